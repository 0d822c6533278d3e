//===- Passes.td - mf dialect passes -----------------------*- tablegen -*-===//

#ifndef MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_TD
#define MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MFVerifyPlanPass : Pass<"mf-verify-plan", "::mlir::ModuleOp"> {
  let summary = "check the module's partitioning plan against the plan rules "
                "and the model";
  let description = [{
    Reads the `mf.plan` attribute of the module (a module without one is a
    one-rank program and passes) and rejects, with a diagnostic naming the
    rule, any plan that cannot work:

    - `mesh-size`: the attention or the expert mesh does not multiply to the
      device count (or an expert axis is not the product of its parts);
    - `node-size`: GPUs per node do not divide the device count;
    - `fold`, `pp-groups`: the expert mesh is not a fold of the attention
      mesh, or the two meshes give different pipeline-parallel groups;
    - `tp-heads`: TP does not divide the number of query heads;
    - `gqa`: TP must divide n_kv, or (KV-head replication) n_kv < TP and TP
      a multiple of n_kv;
    - `ep-experts`: EP does not divide the number of experts;
    - `pp-layers`: PP does not divide the number of layers;
    - `tp-vocab`: TP does not divide the vocab (the LM head is split by
      vocab over the TP group).

    Example: this plan is rejected with `plan rule 'tp-heads'` for a model
    with 6 query heads.

    ```mlir
    module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
        attention = [tp = 4], experts = [ep = 4 : (tp)]>} { ... }
    ```
    The module is left unchanged.
  }];
  let statistics = [
    Statistic<"numDevices", "devices", "Devices in the verified plan">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFSplitPipelinePass : Pass<"mf-split-pipeline", "::mlir::ModuleOp"> {
  let summary = "cut the layers into pipeline stages, one function per stage";
  let description = [{
    With PP = the plan's `pp` size and L layers, stage s gets layers
    `s*L/PP .. (s+1)*L/PP - 1` in a function `@<entry>_stage<s>`; the entry
    becomes a switch on the rank's `pp` coordinate. Stage 0 keeps the
    embedding, the last stage the final norm and LM head; at each boundary
    the residual stream (the stage's local tokens: [T/(CP*TP), d] once the
    token passes have run) is sent once with `mf.send` / `mf.recv` on `pp`.

    ```mlir
    func.func @prefill(%tokens: tensor<?xi64>) {
      %pp = mf.coord "attention" "pp" : index
      scf.index_switch %pp
      case 0 { func.call @prefill_stage0(%tokens) ... }
      case 1 { func.call @prefill_stage1(%tokens) ... }
    }
    func.func private @prefill_stage0(...) {  ... layers 0..3 ...
      mf.send %h to "attention" "pp" 1 : tensor<?x64xf32> }
    func.func private @prefill_stage1(...) {
      %h = mf.recv from "attention" "pp" -1 [%t] : tensor<?x64xf32>  ... }
    ```
  }];
  let options = [
    Option<"entryName", "entry", "std::string", "\"prefill\"",
           "Name of the entry function">
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::func::FuncDialect",
                           "::meshfold::mf::MFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFZigzagCPPass : Pass<"mf-zigzag-cp", "::mlir::ModuleOp"> {
  let summary = "give each context-parallel rank its zigzag chunks of tokens";
  let description = [{
    The prompt (padded to a multiple of 2*CP*TP) is cut into 2*CP chunks and
    CP rank r keeps chunks r and 2*CP-1-r: `moe.positions` becomes
    `mf.zigzag_positions` (GLOBAL positions, which RoPE, the causal mask, the
    KV cache and the LM head use) and the embedding reads the rank's tokens
    through `mf.take` (padding gets token 0). Padding sits past the last real
    position, so the causal mask keeps it away from real queries, the KV cache
    drops it and the LM head never picks it.

    ```mlir
    %pos = moe.positions %tokens : tensor<?xi64> -> tensor<?xi64>
    // becomes
    %t = tensor.dim %tokens, %c0 : tensor<?xi64>
    %pos = mf.zigzag_positions %t on "attention" "cp" pad_to 8 : tensor<?xi64>
    %mine = mf.take %tokens[%pos] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
    ```
  }];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFDecodeKVPlacementPass
    : Pass<"mf-decode-kv-placement", "::mlir::ModuleOp"> {
  let summary = "deal a decode step's rows, and so its new K/V, to the CP "
                "ranks round-robin";
  let description = [{
    In a decode step function (`moe.decode_step`, from `mf-derive-decode`)
    the step's rows are dealt to the CP ranks round-robin by position
    (`mf.step_rows`): each computes the K/V of its rows and appends them to
    its own cache, so the cache stays where prefill's zigzag chunks put it
    and every CP rank's share grows by one position in CP steps. The rows
    are padded to the same count on every CP rank, a multiple of TP (for
    sequence parallelism), and rotated over the TP ranks from step to step,
    so that the per-token work (norms, the MoE dispatch) takes turns too;
    padding gets token 0 and a position past every
    real one, which the causal mask, the cache and the LM head ignore. The
    LM head still takes the step's last position.

    ```mlir
    func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>)
        attributes {moe.decode_step}
    // gets (CP = 2, TP = 2)
    %rows = mf.step_rows %pos on "attention" "cp" pad_to 2
        : tensor<?xi64> -> tensor<?xi64>
    %mine = mf.take %pos[%rows] fill 1073741824 : ...
    %ids = mf.take %tokens[%rows] fill 0 : ...
    ```

    With `by-place` (a batch-invariant program) each row goes to the CP
    rank of its own place instead (`mf.step_rows ... by_place`), so that a
    request's K/V, and the order pass-Q merges its partial attentions in,
    do not depend on the other requests of the step.
  }];
  let options = [
    Option<"byPlace", "by-place", "bool", "false",
           "Deal each row by its own place (p mod CP), not by its index in "
           "the step">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFShardTPPass : Pass<"mf-shard-tp", "::mlir::ModuleOp"> {
  let summary = "tensor parallelism: split attention heads over the TP group";
  let description = [{
    Column-parallel Q/K/V (each TP rank holds n_h/TP query heads and
    n_kv/TP KV heads; when n_kv < TP, TP/n_kv ranks share each KV head),
    local attention and KV-cache writes for those heads, and a row-parallel
    output projection whose partial sums are added by an `mf.all_reduce` on
    `tp`. Weights get `mf.shard` so each rank loads only its slice.

    ```mlir
    %wq = moe.param "...q_proj.weight" : tensor<64x64xf32>
    // becomes (TP = 2)
    %wq = moe.param "...q_proj.weight"
        {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>}
        : tensor<32x64xf32>
    ...
    %o = mf.all_reduce %partial on "attention" ["tp"] : tensor<?x64xf32>
    ```
  }];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFInsertSPPass : Pass<"mf-insert-sp", "::mlir::ModuleOp"> {
  let summary = "sequence parallelism: per-token work on 1/TP of the tokens";
  let description = [{
    Outside attention each TP rank keeps T/(CP*TP) whole tokens (with TP = 2,
    rank 0 the CP rank's first chunk, rank 1 its second): the embedding,
    RMSNorm, residual adds, router and experts run on that slice. Before the
    QKV projection an `mf.all_gather` on `tp` rebuilds the CP rank's tokens;
    the output projection's all-reduce becomes an `mf.reduce_scatter` that
    hands each rank its tokens back. No [T, d] tensor is formed.

    ```mlir
    %o = mf.all_reduce %partial on "attention" ["tp"] : tensor<?x64xf32>
    // becomes
    %o = mf.reduce_scatter %partial on "attention" ["tp"] dim 0
        : tensor<?x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFRingAttentionPass : Pass<"mf-ring-attention", "::mlir::ModuleOp"> {
  let summary = "context parallelism: ring attention over the CP group";
  let description = [{
    Each CP rank attends its queries to its own K/V block, then CP-1 times
    passes K, V and their positions one step around the CP ring and attends
    to the block it received; the partial results are merged by their
    log-sum-exp (`moe.attention_merge`). At CP = 2 this is one swap.

    ```mlir
    %o = moe.attention %q, %k, %v, %qp, %kp ...
    // becomes (CP = 2)
    %o0, %l0 = moe.attention_partial %q, %k, %v, %qp, %kp ...
    %k1 = mf.ring_step %k on "attention" ["cp"] ...
    %v1 = mf.ring_step %v on "attention" ["cp"] ...
    %p1 = mf.ring_step %kp on "attention" ["cp"] ...
    %o1, %l1 = moe.attention_partial %q, %k1, %v1, %qp, %p1 ...
    %o, %l = moe.attention_merge %o0, %l0, %o1, %l1 ...
    ```
  }];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFPassQAttentionPass : Pass<"mf-pass-q-attention", "::mlir::ModuleOp"> {
  let summary = "context parallelism in decode: move the queries, not the "
                "K/V cache";
  let description = [{
    A decode step's attention (over `moe.kv_history`, the rank's own cache)
    with CP > 1: each CP rank attends its rows' queries to its own K/V, then
    CP-1 times passes the queries, their positions and the running partial
    output with its log-sum-exp one step around the CP ring, and the rank
    that receives them attends them to its K/V and merges its partial in
    (`moe.attention_merge`, prefill's rule). One last step hands each
    merged output back to the rank that owns its rows. A step's few query
    rows travel; the cache, which grows with every token, never does.

    ```mlir
    %k, %v, %kp = moe.kv_history ...
    %o = moe.attention %q, %k, %v, %qp, %kp ...
    // becomes (CP = 2)
    %o0, %l0 = moe.attention_partial %q, %k, %v, %qp, %kp ...
    %q1 = mf.ring_step %q ...  %acc1 = mf.ring_step %acc ...  %qp1 = ...
    %o1, %l1 = moe.attention_partial %q1, %k, %v, %qp1, %kp ...
    %o2, %l2 = moe.attention_merge ...
    %o = mf.ring_step %o2 ...   // back to the queries' rank
    ```
  }];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFFoldExpertsPass : Pass<"mf-fold-experts", "::mlir::ModuleOp"> {
  let summary = "expert parallelism on the folded expert mesh";
  let description = [{
    Each rank of an EP group holds n_experts/EP experts (expert e on EP rank
    e / (n_experts/EP)); `moe.experts` becomes `mf.dispatch` of each token to
    its experts' owners, `moe.expert_ffn` on the rows received, and
    `mf.combine` back with the routing weights. The dispatch is hierarchical
    (one inter-node copy per destination node, through the relay) when the
    EP group spans nodes, flat otherwise.

    With expert tensor parallelism (ETP > 1) each expert is split over its
    etp group: w1 and w3 by FFN rows, w2 by FFN columns (a second
    `#mf.shard`); the dispatch runs on the etp x ep group and sends each
    chosen expert's token to all its etp slices, whose partial outputs the
    combine sums with the routing weight. Expert data parallelism (EDP > 1)
    replicates the experts: each EDP replica's ep group dispatches among
    itself.

    ```mlir
    %y = moe.experts %x, %w, %idx, %w1, %w2, %w3 ...
    // becomes
    %rows, %local, %r = mf.dispatch %x, %idx, %w on "experts" ["ep"] experts 32 hierarchical ...
    %out = moe.expert_ffn %rows, %local, %w1, %w2, %w3 ...  // 2 experts' weights
    %y = mf.combine %r, %out tokens %t ...
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"auto\"",
           "Dispatch routing: auto (hierarchical when EP spans nodes), flat "
           "or hierarchical">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFPlaceExpertsPass : Pass<"mf-place-experts", "::mlir::ModuleOp"> {
  let summary = "place each layer's experts on the EP ranks from measured "
                "routing";
  let description = [{
    Reads a routing file (`--routing-json` of a run: rows routed to each
    expert per layer, docs/design.md §10) and gives each `moe.experts` a
    placement (`mf.placement`: EP x slots expert ids, slot s of EP
    coordinate c at c * slots + s) that keeps the largest row count of an
    EP rank low: `redundant` extra replicas go one at a time to the expert
    with the most rows per replica, then the replicas, heaviest first, each
    to the rank with the fewest rows that has a free slot and lacks the
    expert (greedy longest-processing-time). `mf-fold-experts` then gives
    each EP rank the weights of its slots, and the dispatch sends each row
    to one replica of its expert, the replicas taking turns.

    ```mlir
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : ...
    // with EP = 2, 4 experts, expert 3 hot, redundant = 2:
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3
        {mf.placement = array<i64: 0, 2, 3, 1, 3, ...>} : ...
    ```

    Errors, each one line: a file that is not a meshfold routing file, one of
    another model (layers, experts, top_k, hidden size), a layer it lacks,
    a layer with another number of experts, a plan without expert
    parallelism, and a `redundant` that EP does not divide with n_experts or
    that would put an expert twice on a rank.
  }];
  let options = [
    Option<"routing", "routing", "std::string", "\"\"",
           "The routing file (meshfold-routing JSON) to place from">,
    Option<"redundant", "redundant", "int64_t", "0",
           "Extra expert replicas per layer, spread over the EP ranks">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect"];
}

def MFDeriveDecodePass : Pass<"mf-derive-decode", "::mlir::ModuleOp"> {
  let summary = "add a decode step function beside the prefill entry";
  let description = [{
    Clones the entry `@prefill(%tokens)` into `@decode(%tokens, %positions)`,
    the function a generation loop calls for each new token: the tokens'
    global positions are its second argument (where prefill counts
    `0 .. T-1` with `moe.positions`); every `moe.attention` (whose K/V a
    `moe.kv_cache` records) attends to the layer's cached K/V of the earlier
    positions followed by the step's own (`moe.kv_history`); and the LM head
    computes every row's logits (`moe.step_logits`; lowering narrows it to
    the rows that choose a token, `mf-step-head-rows`): a step batches the
    newest tokens of several requests, one row each, whose positions name
    their sequences (see `moe.attention`).

    ```mlir
    %a = moe.attention %q, %k, %v, %p, %p ...
    // becomes, in @decode
    %k2, %v2, %p2 = moe.kv_history %k, %v, %p {layer = 0 : i64} : ...
    %a = moe.attention %q, %k2, %v2, %p, %p2 ...
    ```

    The model must not be partitioned yet for more than one device: the
    decode step of a partitioned plan (pass-Q attention, round-robin K/V
    placement) is not derived by this pass.
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"prefill\"",
           "The prefill function to derive the step from">,
    Option<"decode", "decode", "std::string", "\"decode\"",
           "Name of the decode step function">,
    Option<"keepEntry", "keep-entry", "bool", "true",
           "Keep the prefill function; false erases it: the step with no "
           "history is prefill (one function to compile instead of two, "
           "at the price of every prompt position's logits)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect",
                           "::meshfold::moe::MoEDialect"];
}

def MFLastTokenHeadPass : Pass<"mf-last-token-head", "::mlir::ModuleOp"> {
  let summary = "only the last prompt position reaches the final norm and LM head";
  let description = [{
    The rank holding position T-1 picks that row; its TP group shares it (an
    all-reduce of the row, zero elsewhere), each TP rank computes V/TP logits
    with its vocab slice of the LM head, and the slices are gathered on TP
    rank 0, which records the logits.

    ```mlir
    %n = moe.rms_norm %h ...
    %l = moe.lm_head %n, %w, %pos, %last ...
    moe.logits %l : tensor<512xf32>
    // becomes (TP = 2)
    %row, %found = moe.take_position %h, %pos, %last ...
    %shared = mf.all_reduce %row on "attention" ["tp"] : tensor<1x64xf32>
    %n = moe.rms_norm %shared ...
    %part = moe.lm_head %n, %w_half, ... -> tensor<256xf32>
    %l = mf.gather %part on "attention" ["tp"] dim 0 root 0 ...
    moe.logits %l if %mine : tensor<512xf32>
    ```
    With `prompt-logprobs`, every rank also computes the logits of all the
    positions it holds (the full LM head) and records them with
    `moe.prompt_logits`, in prefill (not in a decode step, `moe.decode_step`,
    whose rows are generated tokens); its vocab slice for the last position
    is then a `tensor.extract_slice` of that head, so the rank loads the LM
    head once.

    A decode step records the logits of the rows that choose a token
    (`moe.step_logits`, each row a request's newest token or a prompt
    chunk's): its TP group all-gathers the rows and takes those that choose
    (`moe.step_head_rows`, as `mf-step-head-rows` does without TP), each TP
    rank computes their V/TP logits with its vocab slice, and TP rank 0
    gathers the slices (stacked `[TP * n, V/TP]`, permuted to `[n, V]`) and
    records them.
  }];
  let options = [
    Option<"promptLogprobs", "prompt-logprobs", "bool", "false",
           "Also output the logits of every prompt position">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFStepHeadRowsPass : Pass<"mf-step-head-rows", "::mlir::ModuleOp"> {
  let summary = "a decode step's LM head computes only the rows that choose a token";
  let description = [{
    A decode step records the logits of each request's newest row: a decode
    row, or the last row of a prompt's last chunk. A chunk of a prompt
    before its last (chunked prefill), a recomputed place and padding choose
    nothing, and computing their `[rows, V]` logits costs a whole LM head
    per row. The step's head (`rms_norm -> linear -> moe.step_logits`) takes
    the rows that choose (`moe.step_head_rows`, which the runtime answers,
    at least one row of a step that has rows) before the norm, and the
    norm, the LM head and the output run on those rows only.

    ```mlir
    %n = moe.rms_norm %h, %nw ...
    %l = moe.linear %n, %w : tensor<?x1024xf32>, ... -> tensor<?x32000xf32>
    moe.step_logits %l, %pos
    // becomes
    %rows = moe.step_head_rows %pos : tensor<?xi64> -> tensor<?xi64>
    %x = moe.take_rows %h, %rows ...
    %p = moe.take_rows %pos, %rows ...
    %n = moe.rms_norm %x, %nw ...
    %l = moe.linear %n, %w ...
    moe.step_logits %l, %p
    ```
    A TP group's split head takes its rows in `mf-last-token-head` (after
    its all-gather) and is left as it is; this pass narrows the others
    (one device, TP = 1).
  }];
  let dependentDialects = ["::meshfold::moe::MoEDialect"];
}

def MFNarrowLastLayerPass : Pass<"mf-narrow-last-layer", "::mlir::ModuleOp"> {
  let summary = "the last layer computes only the rows that reach an output";
  let description = [{
    A layer whose result is used only by `moe.take_position` of one position
    (the LM head's last prompt token, after `mf-last-token-head`) computes
    its query, attention, output projection, router, dispatch, experts and
    combine for that row alone. Its K/V projection, RoPE and the CP ring
    stay whole: the KV cache and the other CP ranks' queries need every
    row. Any other use of the layer's result (prompt logprobs' LM head over
    every row, a decode step's logits, a later layer, the hidden states as
    an output) keeps the layer whole: the narrowing follows from the uses.

    Under SP and CP the surviving row is on one rank of the replica: the
    TP group of its CP rank computes its query and attention (the row taken
    from the all-gathered rows), the TP reduce-scatter of the output
    projection becomes an all-reduce of that row, and only its SP holder
    runs the router and dispatches the row. The other ranks take part in
    every collective with zero rows. `mf.layer_rows` tells the runtime the
    surviving rows' positions.

    ```mlir
    %h1 = moe.layer 7(%h, %sp, %cp) : ... -> tensor<?x64xf32> { ... }
    %row, %found = moe.take_position %h1, %sp, %last ...
    // becomes
    %h1, %p1 = moe.layer 7(%h, %sp, %cp, %last) : ...
        -> (tensor<?x64xf32>, tensor<?xi64>) {
      ...  // K/V of every row, then the query and the MoE of [0|1] rows
      moe.yield %out, %kept : tensor<?x64xf32>, tensor<?xi64>
    }
    %row, %found = moe.take_position %h1, %p1, %last ...
    ```
    With `remarks`, a candidate layer kept whole says why.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Say why a layer whose result only one position reads is kept "
           "whole">
  ];
  let statistics = [
    Statistic<"numNarrowed", "layers-narrowed", "Layers narrowed">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::meshfold::moe::MoEDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFFuseCollectivesPass : Pass<"mf-fuse-collectives", "::mlir::ModuleOp"> {
  let summary = "fewer runtime calls: fuse and group collectives";
  let description = [{
    Rewrites, each on its own:
    - adjacent `mf.ring_step`s on one group (ring attention's K, V and
      positions) become one step: one message;
    - adjacent independent `mf.all_reduce`s on one group become one grouped
      call;
    - `mf.all_reduce` whose result is only `mf.slice`d along the same group
      (possibly through per-token element-wise ops) becomes
      `mf.reduce_scatter` (the SP identity: all-reduce = reduce-scatter +
      all-gather, and the all-gather is not needed);
    - `mf.dispatch` already carries its counts exchange with its payload in
      one call, so there is no separate counts round to remove.

    ```mlir
    %k1 = mf.ring_step %k on "attention" ["cp"] : ... -> ...
    %v1 = mf.ring_step %v on "attention" ["cp"] : ... -> ...
    // becomes
    %k1, %v1 = mf.ring_step %k, %v on "attention" ["cp"] : ... -> ...
    ```
    With `remarks`, each layer reports its collective calls before and after.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Report per layer the collective calls before and after">
  ];
  let statistics = [
    Statistic<"numBefore", "calls-before", "Collective calls before fusion">,
    Statistic<"numAfter", "calls-after", "Collective calls after fusion">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MFSetPlanPass : Pass<"mf-set-plan", "::mlir::ModuleOp"> {
  let summary = "attach a plan given by options to the module";
  let description = [{
    Builds the plan from `tp, cp, dp, pp, etp, ep, edp, order, expert-order,
    gpus-per-node` (the expert mesh folds etp, ep and edp, in expert-order,
    over the non-pp attention axes, then pp; etp*ep*edp = tp*cp*dp) and sets
    it as the module's `mf.plan`. Used by the `mf-partition` pipeline when
    options are given.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor parallel size">,
    Option<"cp", "cp", "int64_t", "1", "Context parallel size">,
    Option<"dp", "dp", "int64_t", "1", "Data parallel size">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline parallel size">,
    Option<"etp", "etp", "int64_t", "1", "Expert tensor parallel size">,
    Option<"ep", "ep", "int64_t", "0",
           "Expert parallel size (0: tp*cp*dp / (etp*edp))">,
    Option<"edp", "edp", "int64_t", "1", "Expert data parallel size">,
    Option<"order", "order", "std::string", "\"tp,cp,dp,pp\"",
           "Attention mesh axis order, fastest first">,
    Option<"expertOrder", "expert-order", "std::string", "\"etp,ep,edp\"",
           "Expert mesh axis order, fastest first">,
    Option<"gpusPerNode", "gpus-per-node", "int64_t", "8", "GPUs per node">
  ];
  let dependentDialects = ["::meshfold::mf::MFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_TD
