// RUN: meshfold-import-hf %examples/seed/config.json -o %t.mlir
// RUN: meshfold-opt %t.mlir --mf-partition="tp=2 cp=2 dp=4 pp=2" -o %t.out.mlir
// RUN: FileCheck %s --input-file=%t.out.mlir
// RUN: grep -c 'mf.all_gather %.* on "attention" \["tp"\] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c 'mf.ring_step %[^,]*, %[^,]*, %[^ ]* on "attention" \["cp"\] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c 'mf.reduce_scatter %.* on "attention" \["tp"\] dim 0' %t.out.mlir | FileCheck %s --check-prefix=SEVEN
// RUN: grep -c ' mf.all_reduce ' %t.out.mlir | FileCheck %s --check-prefix=TWO
// RUN: grep -c '= mf.dispatch %.* on "experts" \["ep"\] experts 32 hierarchical' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c '= mf.combine ' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c 'moe.expert_ffn .* tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> ' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c 'moe.kv_cache .* heads from .* : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>' %t.out.mlir | FileCheck %s --check-prefix=EIGHT
// RUN: grep -c ' mf\.\(all_gather\|reduce_scatter\|ring_step\|dispatch\|combine\) ' %t.out.mlir | FileCheck %s --check-prefix=THIRTYNINE
// RUN: grep -c ' mf\.\(all_gather\|reduce_scatter\|all_reduce\|ring_step\|dispatch\|combine\|send\|recv\|gather\) ' %t.out.mlir | FileCheck %s --check-prefix=FORTYFOUR
// RUN: grep -c ' mf.send ' %t.out.mlir | FileCheck %s --check-prefix=ONE
// RUN: grep -c ' mf.recv ' %t.out.mlir | FileCheck %s --check-prefix=ONE
// RUN: not grep -E 'moe\.(positions|attention|experts) ' %t.out.mlir
// RUN: not grep -E 'tensor<\?x8x8xf32>|tensor<\?x4x8xf32>, tensor<\?x4x8xf32>|tensor<32x128x64xf32>|tensor<64x64xf32>|moe.lm_head .*tensor<512x64xf32>' %t.out.mlir

// The whole -mf-partition pipeline on the seed model (8 layers) with the
// seed plan TP2 x CP2 x DP4 x PP2 / EP16 x PP2: the counts of docs/design.md §4. Per layer
// exactly five comm ops (all-gather on tp, one K/V/positions ring step on cp,
// reduce-scatter on tp, hierarchical dispatch on ep, combine), one PP send and
// receive, and the LM head's grouped all-reduce and gather: 8*5 + 4 = 44 calls.
// The last layer is narrowed to position T-1 (mf-narrow-last-layer): its
// reduce-scatter becomes an all-reduce of that row, the count stays 44.
// Local shapes only: 4 query heads, 2 KV heads, 2 experts per GPU; no global
// [T, d] (the embedding reads the rank's mf.take, the global token count only
// sizes the zigzag positions and the last position).

// 8 of each per-layer op over the module (7 reduce-scatters), the 5 kinds:
// 39; all comm ops: 44.
// EIGHT: {{^}}8{{$}}
// SEVEN: {{^}}7{{$}}
// TWO: {{^}}2{{$}}
// THIRTYNINE: {{^}}39{{$}}
// FORTYFOUR: {{^}}44{{$}}
// ONE: {{^}}1{{$}}

// The entry switches on pp.
// CHECK-LABEL: func.func @prefill(
// CHECK:         %[[PP:.+]] = mf.coord "attention" "pp" : index
// CHECK-NEXT:    scf.index_switch %[[PP]]
// CHECK:         func.call @prefill_stage0(
// CHECK:         func.call @prefill_stage1(

// Stage 0: the rank's SP tokens are embedded; layers 0-3; one send.
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK:         %[[T:.+]] = tensor.dim %[[TOK]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:    %[[ZZ:.+]] = mf.zigzag_positions %[[T]] on "attention" "cp" pad_to 8 : tensor<?xi64>
// CHECK-NEXT:    %[[SP:.+]] = mf.slice %[[ZZ]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    %[[MINE:.+]] = mf.take %[[TOK]][%[[SP]]] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NOT:     %[[TOK]]
// CHECK:         %[[EMB:.+]] = moe.embed %{{.+}}, %[[MINE]] : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
// CHECK-NOT:     %[[TOK]]
// CHECK-NEXT:    moe.layer 0(%[[EMB]], %[[SP]], %[[ZZ]])
// Layer 0: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.0.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 0 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK:         moe.layer 1(%{{[^,]+}}, %[[SP]], %[[ZZ]])
// Layer 1: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.1.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 1 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK:         moe.layer 2(%{{[^,]+}}, %[[SP]], %[[ZZ]])
// Layer 2: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.2.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 2 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK:         moe.layer 3(%{{[^,]+}}, %[[SP]], %[[ZZ]])
// Layer 3: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.3.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 3 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK-NOT:     %[[TOK]]
// CHECK:         mf.send %{{.+}} to "attention" "pp" 1 : tensor<?x64xf32>
// CHECK-NEXT:    return

// Stage 1: one receive of the SP rows; layers 4-7; the last-token head.
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK-NOT:     moe.embed
// CHECK:         %[[T:.+]] = tensor.dim %[[TOK]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:    %[[ZZ:.+]] = mf.zigzag_positions %[[T]] on "attention" "cp" pad_to 8 : tensor<?xi64>
// CHECK-NEXT:    %[[SP:.+]] = mf.slice %[[ZZ]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NOT:     %[[TOK]]
// CHECK:         %[[R:.+]] = tensor.dim %[[SP]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:    %[[H:.+]] = mf.recv from "attention" "pp" -1[%[[R]]] : tensor<?x64xf32>
// CHECK-NEXT:    moe.layer 4(%[[H]], %[[SP]], %[[ZZ]])
// Layer 4: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.4.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 4 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK:         moe.layer 5(%{{[^,]+}}, %[[SP]], %[[ZZ]])
// Layer 5: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.5.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 5 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// CHECK:         moe.layer 6(%{{[^,]+}}, %[[SP]], %[[ZZ]])
// Layer 6: five comm ops, local shapes.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.param "model.layers.6.self_attn.q_proj.weight" {{.+}} : tensor<32x64xf32>
// CHECK:         moe.rope {{.+}} -> tensor<?x4x8xf32>
// CHECK-NEXT:    moe.rope {{.+}} -> tensor<?x2x8xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 6 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.attention_merge
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield
// Layer 7, the last, narrowed to position T-1 (mf-narrow-last-layer): the
// position is its operand, the surviving rows' positions its second result.
// CHECK:         %[[LAST:.+]] = arith.subi %[[T]], %{{.+}} : index
// CHECK-NEXT:    %[[L7:.+]]:2 = moe.layer 7(%{{[^,]+}}, %[[SP]], %[[ZZ]], %[[LAST]]) {mf.narrowed}
// The K/V of every row: all-gather, K/V projection, cache, ring.
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK:         moe.kv_cache {{.+}} heads from %{{.+}} {layer = 7 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> ->
// The query of the surviving row only, its attention, and the output
// projection summed over TP for that row (no reduce-scatter).
// CHECK:         moe.take_position
// CHECK:         moe.linear {{.+}} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
// CHECK:         moe.attention_merge
// CHECK:         mf.layer_rows
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.all_reduce %{{.+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.dispatch %{{.+}} on "experts" ["ep"] experts 32 hierarchical :
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.expert_ffn {{.+}} tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         mf.combine %{{.+}} tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NOT:     {{ mf\.(all_gather|reduce_scatter|all_reduce|ring_step|dispatch|combine|send|recv|gather) }}
// CHECK:         moe.yield

// The head: only position T-1, shared on tp, vocab halves gathered on TP rank 0.
// CHECK:         %[[ROW:.+]], %[[FOUND:.+]] = moe.take_position %[[L7]]#0, %[[L7]]#1, %[[LAST]]
// CHECK-NEXT:    mf.all_reduce %[[ROW]], %[[FOUND]] on "attention" ["tp"] : tensor<1x64xf32>, tensor<1xf32> -> tensor<1x64xf32>, tensor<1xf32>
// CHECK:         moe.lm_head {{.+}} : tensor<1x64xf32>, tensor<256x64xf32>, tensor<1xi64> -> tensor<256xf32>
// CHECK-NEXT:    mf.gather %{{.+}} on "attention" ["tp"] dim 0 root 0 : tensor<256xf32> -> tensor<512xf32>
// CHECK:         moe.logits %{{.+}} if %{{.+}} : tensor<512xf32>
// CHECK-NOT:     mf.
// CHECK:         return
