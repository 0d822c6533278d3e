// RUN: meshfold-import-hf %examples/seed/config.json -o %t.seed.mlir
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives="remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives="remarks=true" -o /dev/null 2>&1 | grep -c "collective calls before fusion" | FileCheck %s --check-prefix=REMARK-COUNT
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives -o /dev/null 2>&1 | count 0

// -mf-fuse-collectives on the seed model (8 layers) after the partitioning
// passes with the seed plan: the per-layer remarks, and no diagnostic
// without them. The rewrites themselves are tested on hand-written inputs in
// test/Dialect/MF/Transforms/mf-fuse-collectives.mlir.

// The seed model through the partitioning passes: every layer has the
// all-gather, 3 ring steps (K, V, positions), the reduce-scatter, dispatch
// and combine before fusion, and one ring step after.
// REMARK-DAG: remark: layer 0: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 1: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 2: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 3: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 4: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 5: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 6: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 7: 7 collective calls before fusion, 5 after
// REMARK-NOT: error
// REMARK-COUNT: {{^}}8{{$}}
