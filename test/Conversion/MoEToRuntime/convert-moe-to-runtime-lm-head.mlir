// RUN: meshfold-opt %s --mf-last-token-head=prompt-logprobs=true --convert-mf-to-runtime --convert-moe-to-runtime | FileCheck %s
// RUN: meshfold-opt %s --mf-last-token-head=prompt-logprobs=true --convert-mf-to-runtime --convert-moe-to-runtime | FileCheck %s --check-prefix=LOADS

// With prompt logprobs under TP = 2 a rank computes every position's logits
// with the whole LM head and the last position's with its vocab half: the
// half is a view of the whole head, so lm_head.weight is one weight of the
// manifest and one runtime load.

// CHECK-LABEL: func.func @prefill(
// CHECK:         %[[W:.+]] = mf.weight 1, "lm_head.weight" : memref<16x8xf32>
// CHECK-NEXT:    %[[WT:.+]] = bufferization.to_tensor %[[W]] restrict : memref<16x8xf32> to tensor<16x8xf32>
// CHECK-NEXT:    moe.linear %{{.+}}, %[[WT]] : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// CHECK:         %[[TP:.+]] = call @mfrt_cg_group_rank(%{{.+}}) : (i64) -> i64
// CHECK-NEXT:    %[[TPI:.+]] = arith.index_cast %[[TP]] : i64 to index
// CHECK-NEXT:    %[[ROWS:.+]] = arith.constant 8 : index
// CHECK-NEXT:    %[[OFF:.+]] = arith.muli %[[TPI]], %[[ROWS]] : index
// CHECK-NEXT:    %[[HALF:.+]] = tensor.extract_slice %[[WT]][%[[OFF]], 0] [8, 8] [1, 1] : tensor<16x8xf32> to tensor<8x8xf32>
// CHECK-NEXT:    moe.lm_head %{{.+}}, %[[HALF]], %{{.+}} : tensor<1x8xf32>, tensor<8x8xf32>, tensor<1xi64> -> tensor<8xf32>
// CHECK:         @__mf_manifest({{.+}}\0Aparam 0 model.norm.weight f32 1 8\0Aparam 1 lm_head.weight f32 2 16 8\0Aend\0A\00")

// LOADS-COUNT-1: mf.weight {{[0-9]+}}, "lm_head.weight"
// LOADS-NOT:     mf.weight {{[0-9]+}}, "lm_head.weight"
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @prefill(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}
