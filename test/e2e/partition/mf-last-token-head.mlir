// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-last-token-head | FileCheck %s
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=2 dp=8 pp=2" --mf-last-token-head | FileCheck %s --check-prefix=TP1
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=4 cp=2 dp=2 pp=2" --mf-last-token-head | FileCheck %s --check-prefix=TP4

// -mf-last-token-head: only position T-1 reaches the final norm and the LM
// head. The rank holding it picks the row, its TP group shares it, each TP
// rank computes V/TP logits with its vocab slice and TP rank 0 gathers them.
// Input: 1 seed layer (d 64, vocab 512).

// Before: the final norm and the head run over every local row.
// BEFORE-LABEL: func.func @prefill(
// BEFORE:         moe.param "model.norm.weight"
// BEFORE-NEXT:    %[[N:.+]] = moe.rms_norm %{{.+}}, %{{.+}} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// BEFORE:         %[[L:.+]] = moe.lm_head %[[N]], %{{.+}} : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
// BEFORE-NEXT:    moe.logits %[[L]] : tensor<512xf32>

// TP=2: take the row before the norm, share row and flag on tp, half the
// vocab per rank, gather on TP rank 0, record where found on TP rank 0.
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK:           %[[POS:.+]] = moe.positions %[[TOK]]
// CHECK:           %[[H:.+]] = moe.layer 0(
// CHECK:           %[[NW:.+]] = moe.param "model.norm.weight" : tensor<64xf32>
// CHECK-NOT:       moe.rms_norm
// CHECK:           %[[T:.+]] = tensor.dim %[[TOK]], %{{.+}} : tensor<?xi64>
// CHECK:           %[[LAST:.+]] = arith.subi %[[T]], %{{.+}} : index
// CHECK-NEXT:      %[[ROW:.+]], %[[FOUND:.+]] = moe.take_position %[[H]], %[[POS]], %[[LAST]] : tensor<?x64xf32>, tensor<?xi64> -> tensor<1x64xf32>, tensor<1xf32>
// CHECK-NEXT:      %[[SROW:.+]] = mf.all_reduce %[[ROW]] on "attention" ["tp"] : tensor<1x64xf32> -> tensor<1x64xf32>
// CHECK-NEXT:      %[[SFOUND:.+]] = mf.all_reduce %[[FOUND]] on "attention" ["tp"] : tensor<1xf32> -> tensor<1xf32>
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[SROW]], %[[NW]] {{.+}} : tensor<1x64xf32>, tensor<64xf32> -> tensor<1x64xf32>
// CHECK:           %[[W:.+]] = moe.param "lm_head.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<256x64xf32>
// CHECK-NEXT:      %[[PART:.+]] = moe.lm_head %[[N]], %[[W]], %{{.+}}, %[[LAST]] : tensor<1x64xf32>, tensor<256x64xf32>, tensor<1xi64> -> tensor<256xf32>
// CHECK-NEXT:      %[[ALL:.+]] = mf.gather %[[PART]] on "attention" ["tp"] dim 0 root 0 : tensor<256xf32> -> tensor<512xf32>
// CHECK:           %[[F:.+]] = tensor.extract %[[SFOUND]][%{{.+}}] : tensor<1xf32>
// CHECK:           %[[HELD:.+]] = arith.cmpf ogt, %[[F]], %{{.+}} : f32
// CHECK:           %[[TPC:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:      %[[ROOT:.+]] = arith.cmpi eq, %[[TPC]], %{{.+}} : index
// CHECK-NEXT:      %[[VALID:.+]] = arith.andi %[[HELD]], %[[ROOT]] : i1
// CHECK-NEXT:      moe.logits %[[ALL]] if %[[VALID]] : tensor<512xf32>
// CHECK-NOT:       tensor<512x64xf32>
// CHECK-NOT:       moe.lm_head
// CHECK:           return

// TP=1 (CP=2): the holder alone computes all 512 logits and records them.
// TP1-LABEL: func.func @prefill(
// TP1:         %[[H:.+]] = moe.layer 0(
// TP1:         %[[ROW:.+]], %[[FOUND:.+]] = moe.take_position %[[H]], %{{.+}} -> tensor<1x64xf32>, tensor<1xf32>
// TP1-NOT:     mf.all_reduce
// TP1:         %[[N:.+]] = moe.rms_norm %[[ROW]], %{{.+}} -> tensor<1x64xf32>
// TP1-NOT:     mf.shard
// TP1:         %[[L:.+]] = moe.lm_head %[[N]], %{{.+}} : tensor<1x64xf32>, tensor<512x64xf32>, tensor<1xi64> -> tensor<512xf32>
// TP1-NOT:     mf.gather
// TP1:         %[[F:.+]] = tensor.extract %[[FOUND]][%{{.+}}] : tensor<1xf32>
// TP1-NEXT:    %[[C:.+]] = arith.constant 5.000000e-01 : f32
// TP1-NEXT:    %[[HELD:.+]] = arith.cmpf ogt, %[[F]], %[[C]] : f32
// TP1-NOT:     mf.coord
// TP1-NEXT:    moe.logits %[[L]] if %[[HELD]] : tensor<512xf32>

// TP=4: a quarter of the vocab per rank.
// TP4-LABEL: func.func @prefill(
// TP4:         moe.param "lm_head.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<128x64xf32>
// TP4:         mf.gather %{{.+}} on "attention" ["tp"] dim 0 root 0 : tensor<128xf32> -> tensor<512xf32>

// With prompt-logprobs, the rank also records the logits of every position
// it holds, with the whole LM head, beside the last-token path.
// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 2 -o %t.pl.mlir
// RUN: meshfold-opt %t.pl.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=1" --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-last-token-head="prompt-logprobs=true" | FileCheck %s --check-prefix=PROMPT
// PROMPT: moe.param "model.norm.weight"
// PROMPT: %[[N:.+]] = moe.rms_norm %{{.+}} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// PROMPT: %[[W:.+]] = moe.param "lm_head.weight" : tensor<512x64xf32>
// PROMPT: %[[ALL:.+]] = moe.linear %[[N]], %[[W]] : tensor<?x64xf32>, tensor<512x64xf32> -> tensor<?x512xf32>
// PROMPT: moe.prompt_logits %[[ALL]], %{{.+}} : tensor<?x512xf32>, tensor<?xi64>
// PROMPT: moe.take_position
// PROMPT: moe.logits %{{.+}} if %{{.+}} : tensor<512xf32>
