// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 2 -o %t.seed.mlir
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=4 cp=2 dp=2 pp=2" | FileCheck %s --check-prefix=TP4
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=1 cp=4 dp=4 pp=2" | FileCheck %s --check-prefix=CP4
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=1 cp=4 dp=4 pp=2" | grep -c ' mf.ring_step ' | FileCheck %s --check-prefix=SIX
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=1 cp=4 dp=4 pp=2" | not grep -E ' mf\.(all_gather|reduce_scatter|all_reduce|gather|slice) '
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=1 cp=1 dp=32 pp=1" | FileCheck %s --check-prefix=DP32
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=1 cp=1 dp=32 pp=1" | not grep -E ' mf\.(all_gather|ring_step|reduce_scatter|all_reduce|gather|send|recv|zigzag_positions|slice|take) |scf.index_switch'
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=8 cp=1 dp=4 pp=1" | FileCheck %s --check-prefix=TP8
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=8 pp=1" | FileCheck %s --check-prefix=PP1
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2 order=tp,cp,pp,dp" | FileCheck %s --check-prefix=SWAP
// RUN: meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=2 pp=1 gpus-per-node=8 dispatch=hierarchical" | FileCheck %s --check-prefix=FORCED
// RUN: meshfold-import-hf %S/Inputs/kv2.json --num-layers 2 -o %t.kv2.mlir
// RUN: meshfold-opt %t.kv2.mlir --mf-partition="tp=4 cp=2 dp=2 pp=2" | FileCheck %s --check-prefix=KV2
// RUN: meshfold-import-hf %S/Inputs/top1.json --num-layers 2 -o %t.top1.mlir
// RUN: meshfold-opt %t.top1.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" | FileCheck %s --check-prefix=TOP1
// RUN: meshfold-import-hf %S/Inputs/top4.json --num-layers 2 -o %t.top4.mlir
// RUN: meshfold-opt %t.top4.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" | FileCheck %s --check-prefix=TOP4
// RUN: meshfold-import-hf %S/Inputs/experts64.json --num-layers 2 -o %t.e64.mlir
// RUN: meshfold-opt %t.e64.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" | FileCheck %s --check-prefix=E64
// RUN: not meshfold-opt %t.seed.mlir --mf-partition="tp=3 cp=2 dp=4 pp=2" 2>&1 | FileCheck %s --check-prefix=BAD-TP
// RUN: not meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=4 pp=3" 2>&1 | FileCheck %s --check-prefix=BAD-PP
// RUN: not meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2 ep=8" 2>&1 | FileCheck %s --check-prefix=BAD-EP
// RUN: not meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2 gpus-per-node=5" 2>&1 | FileCheck %s --check-prefix=BAD-NODE
// RUN: not meshfold-opt %t.seed.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2 order=tp,cp,dp" 2>&1 | FileCheck %s --check-prefix=BAD-ORDER
// RUN: meshfold-import-hf %S/Inputs/experts24.json --num-layers 2 -o %t.e24.mlir
// RUN: not meshfold-opt %t.e24.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" 2>&1 | FileCheck %s --check-prefix=BAD-EXPERTS
// RUN: meshfold-import-hf %S/Inputs/gqa6x3.json --num-layers 2 -o %t.gqa.mlir
// RUN: not meshfold-opt %t.gqa.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" 2>&1 | FileCheck %s --check-prefix=BAD-GQA

// docs/design.md §8: other plans of the family through the whole -mf-partition
// pipeline, each with its expected structure, and bad plans rejected with the
// rule's name. Inputs: 2 layers of the seed model and of small variants
// (n_kv=2, top-1, top-4, 64 experts, 24 experts, 6 heads / 3 KV heads).
// Padding: pad_to = 2*CP*TP.

// TP4 x CP2 x DP2 x PP2 / EP16 x PP2: 2 query heads and 1 KV head per GPU.
// TP4:       attention = [tp = 4, cp = 2, dp = 2, pp = 2], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]
// TP4-LABEL: func.func private @prefill_stage0(
// TP4:         mf.zigzag_positions %{{.+}} pad_to 16
// TP4:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0
// TP4:         moe.rope {{.+}} -> tensor<?x2x8xf32>
// TP4:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 0 : i64} : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>
// TP4:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>
// TP4:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0
// TP4:         mf.dispatch {{.+}} experts 32 hierarchical
// TP4:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32>
// TP4:         mf.send
// TP4-LABEL: func.func private @prefill_stage1(
// TP4:         mf.recv
// TP4:         moe.lm_head {{.+}} tensor<128x64xf32>, tensor<1xi64> -> tensor<128xf32>
// TP4:         mf.gather %{{.+}} on "attention" ["tp"] dim 0 root 0 : tensor<128xf32> -> tensor<512xf32>

// TP1 x CP4 x DP4 x PP2: no SP collectives; a real ring of 3 fused steps and
// 3 merges per layer (2 layers: 6 steps).
// CP4:       attention = [tp = 1, cp = 4, dp = 4, pp = 2]
// CP4-LABEL: func.func private @prefill_stage0(
// CP4:         mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 8
// CP4-NOT:     mf.slice
// CP4:         moe.layer 0(
// CP4:         %[[S1:.+]]:3 = mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
// CP4:         moe.attention_merge
// CP4:         %[[S2:.+]]:3 = mf.ring_step %[[S1]]#0, %[[S1]]#1, %[[S1]]#2 on "attention" ["cp"]
// CP4:         moe.attention_merge
// CP4:         mf.ring_step %[[S2]]#0, %[[S2]]#1, %[[S2]]#2 on "attention" ["cp"]
// CP4:         moe.attention_merge
// CP4-NOT:     mf.ring_step
// CP4:         mf.dispatch {{.+}} experts 32 hierarchical
// CP4-NOT:     mf.all_gather
// CP4-NOT:     mf.reduce_scatter
// CP4-NOT:     mf.all_reduce
// CP4-NOT:     mf.gather
// SIX: {{^}}6{{$}}

// DP32 + EP32 (DeepSeek prefill): attention is replicated per GPU (no zigzag,
// no TP, no ring, no stages); the only comm ops are dispatch and combine, over
// 4 nodes, one expert per GPU.
// DP32:       attention = [tp = 1, cp = 1, dp = 32, pp = 1], experts = [ep = 32 : (tp, cp, dp), pp = 1 : (pp)]
// DP32-LABEL: func.func @prefill(
// DP32-NOT:     mf.zigzag_positions
// DP32:         moe.attention %{{.+}} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>
// DP32:         mf.dispatch {{.+}} on "experts" ["ep"] experts 32 hierarchical
// DP32:         moe.expert_ffn {{.+}} tensor<1x128x64xf32>, tensor<1x64x128xf32>, tensor<1x128x64xf32>
// DP32:         mf.combine
// DP32-NOT:     mf.all_gather
// DP32-NOT:     mf.ring_step
// DP32-NOT:     mf.reduce_scatter
// DP32-NOT:     mf.all_reduce
// DP32-NOT:     mf.gather
// DP32-NOT:     mf.send
// DP32-NOT:     mf.recv
// DP32-NOT:     func.func

// TP8 with n_kv=4 < TP: 1 query head per GPU, each KV head on 2 GPUs.
// TP8-LABEL: func.func @prefill(
// TP8:         mf.zigzag_positions %{{.+}} pad_to 16
// TP8:         "model.layers.0.self_attn.k_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<8x64xf32>
// TP8:         moe.kv_cache {{.+}} : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>
// TP8:         moe.attention %{{.+}} : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?x1x8xf32>,
// TP8:         mf.reduce_scatter
// TP8:         mf.gather %{{.+}} : tensor<64xf32> -> tensor<512xf32>

// n_kv=2 < TP=4: KV replication, one KV head per GPU from head tp*2/4.
// KV2-LABEL: func.func private @prefill_stage0(
// KV2:         "model.layers.0.self_attn.k_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x64xf32>
// KV2:         moe.kv_cache {{.+}} : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>
// KV2:         moe.attention_partial %{{.+}} : tensor<?x2x8xf32>, tensor<?x1x8xf32>, tensor<?x1x8xf32>,

// PP=1: one function, no switch, no send/receive.
// PP1:       attention = [tp = 2, cp = 2, dp = 8, pp = 1]
// PP1-LABEL: func.func @prefill(
// PP1-NOT:     scf.index_switch
// PP1-NOT:     _stage
// PP1:         moe.layer 0(
// PP1:         moe.layer 1(
// PP1:         moe.logits
// PP1-NOT:     mf.send
// PP1-NOT:     mf.recv
// PP1-NOT:     func.func

// PP and DP swapped (rank = tp + 2*cp + 4*pp + 8*dp): the same program on a
// plan whose attention mesh is ordered tp, cp, pp, dp; ep still folds
// (tp, cp, dp); a stage spans all 4 nodes, so dispatch is hierarchical.
// SWAP:       attention = [tp = 2, cp = 2, pp = 2, dp = 4], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]
// SWAP-LABEL: func.func private @prefill_stage0(
// SWAP:         mf.dispatch {{.+}} experts 32 hierarchical
// SWAP:         mf.send
// SWAP-LABEL: func.func private @prefill_stage1(
// SWAP:         mf.recv

// The pipeline's dispatch option reaches -mf-fold-experts.
// FORCED:       attention = [tp = 2, cp = 2, dp = 2, pp = 1]
// FORCED-LABEL: func.func @prefill(
// FORCED:         mf.dispatch {{.+}} experts 32 hierarchical
// FORCED-NOT:     flat

// Top-1 and top-4 routing.
// TOP1-LABEL: func.func private @prefill_stage0(
// TOP1:         moe.router {{.+}} {renormalize, top_k = 1 : i64}
// TOP1:         mf.dispatch {{.+}} : tensor<?x64xf32>, tensor<?x1xi64>, tensor<?x1xf32> ->
// TOP4-LABEL: func.func private @prefill_stage0(
// TOP4:         moe.router {{.+}} top_k = 4 : i64}
// TOP4:         mf.dispatch {{.+}} : tensor<?x64xf32>, tensor<?x4xi64>, tensor<?x4xf32> ->

// 64 experts over EP16: 4 per GPU.
// E64-LABEL: func.func private @prefill_stage0(
// E64:         mf.dispatch {{.+}} experts 64 hierarchical
// E64:         moe.expert_ffn {{.+}} tensor<4x128x64xf32>, tensor<4x64x128xf32>, tensor<4x128x64xf32>

// Bad plans, rejected with the rule's name.
// BAD-TP: error: plan rule 'tp-heads': TP=3 must divide n_heads=8
// BAD-PP: error: plan rule 'pp-layers': PP=3 must divide n_layers=2
// BAD-EP: error: plan rule 'mesh-size': etp*ep*edp = 1*8*1 = 8 must equal tp*cp*dp = 2*2*4 = 16: try --ep 8 --etp 2 or --ep 8 --edp 2
// BAD-NODE: error: plan rule 'node-size'
// BAD-ORDER: error: plan rule 'fold': axis order 'tp,cp,dp' lacks 'pp'
// BAD-EXPERTS: error: plan rule 'ep-experts': EP=16 must divide n_experts=24
// BAD-GQA: error: plan rule 'gqa': TP=2 must divide n_kv=3
