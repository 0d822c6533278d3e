//===- MFOps.td - mf dialect ops ---------------------------*- tablegen -*-===//

#ifndef MESHFOLD_DIALECT_MF_IR_MFOPS_TD
#define MESHFOLD_DIALECT_MF_IR_MFOPS_TD

include "meshfold/Dialect/MF/IR/MFBase.td"
include "meshfold/Dialect/MF/IR/MFAttrs.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Runtime binding
//===----------------------------------------------------------------------===//

def MF_WeightOp : MF_Op<"weight", [Pure]> {
  let summary = "a weight buffer owned by the runtime";
  let description = [{
    The buffer of weight `id` of the program's manifest (`name` is the
    Hugging Face name, for readers). The runtime loaded it from the weights
    file, checked against the manifest, and owns it: the program reads it and
    never frees it (so buffer deallocation treats it like a global).
    Lowered to a call to `mfrt_weight(id)` that returns the data pointer.
    The element type is the weight's storage type (f32 or bf16), which the
    manifest records and the runtime loads the slice in.

    ```mlir
    %w = mf.weight 3, "model.norm.weight" : memref<64xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$id,
                       StrAttr:$name);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "$id `,` $name attr-dict `:` type($result)";
}

def MF_KVRowsOp : MF_Op<"kv_rows", [MemoryEffects<[MemRead]>]> {
  let summary = "a layer's K or V rows in the rank's K/V cache, owned by the "
                "runtime";
  let description = [{
    Tensor `tensor` (0: K, 1: V) of every row of layer `layer` in the
    runtime's K/V cache of this rank, KV heads `head_offset ..` (the result's
    heads): `[rows, heads, head_dim]`, where `rows` is what
    `mfrt_kv_cache_rows(layer)` said. A decode step's attention reads it in
    place through a table of key tiles. The runtime owns it and the program
    only reads it (buffer deallocation treats it like a global), until the
    cache records more rows. Lowered to a call to
    `mfrt_kv_rows_f32(layer, tensor, head_offset, heads)` that returns the
    data pointer.

    ```mlir
    %k = mf.kv_rows %rows, %first {layer = 3 : i64, tensor = 0 : i64}
        : memref<?x2x64xf32>
    ```
  }];
  let arguments = (ins Index:$rows, I64:$head_offset,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       ConfinedAttr<I64Attr, [IntMinValue<0>,
                                              IntMaxValue<1>]>:$tensor);
  let results = (outs MemRefRankOf<[F32], [3]>:$result);
  let assemblyFormat = [{
    $rows `,` $head_offset attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Mesh queries and communication on local tensors
//===----------------------------------------------------------------------===//

def MF_DispatchType : TypeDef<MF_Dialect, "Dispatch"> {
  let mnemonic = "dispatch";
  let summary = "the routing of a dispatch, consumed by its combine";
}

def MF_AnyTensor : RankedTensorOf<[F32, BF16, F16, I64, I32]>;
def MF_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def MF_IndexTensor : RankedTensorOf<[I64]>;

def MF_CoordOp : MF_Op<"coord", [Pure]> {
  let summary = "this rank's coordinate along a mesh axis";
  let description = [{
    The calling rank's coordinate along `axis` of `mesh` (an attention axis,
    or a composite expert axis, linearized first-fastest), from MeshLayout.

    ```mlir
    %cp = mf.coord "attention" "cp" : index
    ```
  }];
  let arguments = (ins StrAttr:$mesh, StrAttr:$axis);
  let results = (outs Index:$result);
  let assemblyFormat = "$mesh $axis attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MF_AllGatherOp : MF_Op<"all_gather", [Pure]> {
  let summary = "all-gather along a tensor dimension over a group";
  let description = [{
    Every member's `input` concatenated along `dim`, ordered by group rank
    (the members' coordinates along `axes`, first fastest).

    ```mlir
    %full = mf.all_gather %x on "attention" ["tp"] dim 0
        : tensor<?x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MF_AnyTensor:$input, StrAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs MF_AnyTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh $axes `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_ReduceScatterOp : MF_Op<"reduce_scatter", [Pure]> {
  let summary = "sum over a group, each member keeps its slice along a dim";
  let description = [{
    The element-wise sum of every member's `input`, cut into group-size equal
    slices along `dim`; member i keeps slice i.

    ```mlir
    %mine = mf.reduce_scatter %partial on "attention" ["tp"] dim 0
        : tensor<?x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MF_FloatTensor:$input, StrAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs MF_FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh $axes `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_AllReduceOp : MF_Op<"all_reduce", [Pure]> {
  let summary = "element-wise sum over a group, of one or more tensors";
  let description = [{
    Every result is the element-wise sum over the group of its input. Several
    inputs are reduced in one grouped call (`mf-fuse-collectives` groups
    independent all-reduces on one group).

    ```mlir
    %row, %flag = mf.all_reduce %r, %f on "attention" ["tp"]
        : tensor<1x64xf32>, tensor<1xf32> -> tensor<1x64xf32>, tensor<1xf32>
    ```
  }];
  let arguments = (ins Variadic<MF_FloatTensor>:$inputs, StrAttr:$mesh,
                       StrArrayAttr:$axes);
  let results = (outs Variadic<MF_FloatTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh $axes attr-dict `:` type($inputs) `->` type($results)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ValueRange":$inputs, "::llvm::StringRef":$mesh,
                   "::llvm::ArrayRef<::llvm::StringRef>":$axes)>
  ];
}

def MF_RingStepOp : MF_Op<"ring_step", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one step of a ring: send to the next member, receive from the previous";
  let description = [{
    Sends every operand to group rank `(r + 1) % n` and returns those of group
    rank `(r - 1 + n) % n`. All operands travel as one message (ring
    attention's K and V, or the one tensor that is both, and their global
    positions; a decode step's queries, partial outputs and their
    positions, marked `queries`, which the runtime counts as pass-Q's
    traffic). Every member of the group takes part, so a step is kept even
    when its results are unused.

    ```mlir
    %k1, %v1, %p1 = mf.ring_step %k, %v, %p on "attention" ["cp"]
        : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
        -> tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
    ```
  }];
  let arguments = (ins Variadic<MF_AnyTensor>:$inputs, StrAttr:$mesh,
                       StrArrayAttr:$axes, UnitAttr:$queries);
  let results = (outs Variadic<MF_AnyTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh $axes attr-dict `:` type($inputs) `->` type($results)
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ValueRange":$inputs, "::llvm::StringRef":$mesh,
                   "::llvm::ArrayRef<::llvm::StringRef>":$axes,
                   CArg<"bool", "false">:$queries)>
  ];
}

def MF_DispatchModeAttr : I32EnumAttr<"DispatchMode", "dispatch routing", [
    I32EnumAttrCase<"flat", 0>, I32EnumAttrCase<"hierarchical", 1>]> {
  let cppNamespace = "::meshfold::mf";
}

def MF_DispatchOp : MF_Op<"dispatch", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "send each token to the owners of its routed experts";
  let description = [{
    MoE dispatch over an expert-mesh group. Token t of `input [T, d]` goes to
    the owners of experts `indices[t, j]` (expert e on group rank
    e / (num_experts / group size)), with routing weight `weights[t, j]`.
    On a group along the expert mesh's `ep`, the owners are where MeshLayout
    places the expert; a group along `etp` too holds each expert in ETP
    slices, and the token goes to every slice (whose partial outputs the
    combine sums).
    The per-destination counts are exchanged with the payload. Returns the
    rows this rank received `[R, d]`, their expert index local to this rank
    `[R]`, and the routing for `mf.combine`. `hierarchical` sends a token
    across nodes at most once per node, through the relay with the sender's
    local index.

    ```mlir
    %rows, %local, %h = mf.dispatch %x, %idx, %w on "experts" ["ep"]
        experts 32 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32>
        -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
    ```
  }];
  let arguments = (ins MF_FloatTensor:$input, MF_IndexTensor:$indices,
                       MF_FloatTensor:$weights, StrAttr:$mesh,
                       StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       MF_DispatchModeAttr:$mode);
  let results = (outs MF_FloatTensor:$rows, MF_IndexTensor:$local_experts,
                      MF_DispatchType:$routing);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights `on` $mesh $axes `experts` $num_experts
    $mode attr-dict `:` type($input) `,` type($indices) `,` type($weights)
    `->` type($rows) `,` type($local_experts) `,` qualified(type($routing))
  }];
  let hasVerifier = 1;
}

def MF_CombineOp : MF_Op<"combine", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "return expert outputs to their tokens, weighted and summed";
  let description = [{
    The reverse of `mf.dispatch`: row i of `expert_out [R, d]` (the output for
    received row i) goes back to its token; `result[t] = sum_j w[t, j] *
    out(t, j)`. In hierarchical mode each relay first sums its node's
    weighted outputs for a token so one row crosses back.
  }];
  let arguments = (ins MF_DispatchType:$routing, MF_FloatTensor:$expert_out,
                       Index:$num_tokens);
  let results = (outs MF_FloatTensor:$result);
  let assemblyFormat = [{
    $routing `,` $expert_out `tokens` $num_tokens attr-dict `:`
    qualified(type($routing)) `,` type($expert_out) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_SendOp : MF_Op<"send", [MemoryEffects<[MemWrite]>]> {
  let summary = "send a tensor to the rank `offset` steps along an axis";
  let description = [{
    Point-to-point send to the rank whose coordinate along `axis` is this
    rank's plus `offset` (pipeline stages: `"pp" +1`), all other coordinates
    equal. Pairs with an `mf.recv` on that rank.
  }];
  let arguments = (ins MF_AnyTensor:$input, StrAttr:$mesh, StrAttr:$axis,
                       I64Attr:$offset);
  let assemblyFormat = [{
    $input `to` $mesh $axis $offset attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def MF_RecvOp : MF_Op<"recv", [MemoryEffects<[MemRead]>]> {
  let summary = "receive a tensor from the rank `offset` steps along an axis";
  let arguments = (ins Variadic<Index>:$dynamic_sizes, StrAttr:$mesh,
                       StrAttr:$axis, I64Attr:$offset);
  let results = (outs MF_AnyTensor:$result);
  let assemblyFormat = [{
    `from` $mesh $axis $offset (`[` $dynamic_sizes^ `]`)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def MF_SliceOp : MF_Op<"slice", [Pure]> {
  let summary = "this rank's slice of a replicated tensor (no communication)";
  let description = [{
    Cuts `input` into group-size equal slices along `dim` and keeps slice
    `i`, this rank's group rank along `axes`: the inverse of `mf.all_gather`
    (sequence parallelism's split of a TP group's tokens).

    ```mlir
    %mine = mf.slice %x on "attention" ["tp"] dim 0
        : tensor<?x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MF_AnyTensor:$input, StrAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs MF_AnyTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh $axes `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_ZigzagPositionsOp : MF_Op<"zigzag_positions", [Pure]> {
  let summary = "the global positions a context-parallel rank owns";
  let description = [{
    The prompt of `length` tokens, padded to a multiple of `pad_to`
    (a multiple of 2*CP), is cut into 2*CP equal chunks; CP rank `r` (this
    rank's coordinate along `axis`) owns chunks `r` and `2*CP-1-r`, so causal
    work is balanced. Returns their global positions in that order
    (`[Tp / CP]`); positions `>= length` are padding.

    ```mlir
    %pos = mf.zigzag_positions %t on "attention" "cp" pad_to 8 : tensor<?xi64>
    ```
  }];
  let arguments = (ins Index:$length, StrAttr:$mesh, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntPositive]>:$pad_to);
  let results = (outs MF_IndexTensor:$result);
  let assemblyFormat = [{
    $length `on` $mesh $axis `pad_to` $pad_to attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def MF_LayerRowsOp : MF_Op<"layer_rows", [MemoryEffects<[MemWrite]>]> {
  let summary = "the positions of the rows a layer's next collectives carry";
  let description = [{
    Tells the runtime the global positions of the rows that the enclosing
    layer's following collectives carry: `sp` in the SP layout (the residual
    stream's rows) and `cp` in the CP layout (after the TP all-gather). A
    layer starts with its operands' positions; a layer narrowed to the rows
    that reach an output (`mf-narrow-last-layer`) names its surviving rows
    with this op. Token tracing, the routing hooks and the dispatch's
    padding rows read them. Only inside a `moe.layer`.

    ```mlir
    mf.layer_rows %sp, %cp : tensor<?xi64>, tensor<?xi64>
    ```
  }];
  let arguments = (ins MF_IndexTensor:$sp, MF_IndexTensor:$cp);
  let assemblyFormat = [{
    $sp `,` $cp attr-dict `:` type($sp) `,` type($cp)
  }];
}

def MF_StepRowsOp : MF_Op<"step_rows", [Pure]> {
  let summary = "the rows of a decode step a context-parallel rank computes";
  let description = [{
    A decode step's `n` rows (their global `positions [n]`) are dealt to the
    CP ranks round-robin, starting at the CP rank `positions[0] mod CP`: row
    `i` goes to CP rank `(positions[0] + i) mod CP`. For one request that is
    the rank `p mod CP` of each new position `p`, so every rank's K/V cache
    grows by one position in CP steps, and the ranks' row counts differ by
    at most one. Returns the indices of this rank's rows (its coordinate
    along `axis`), padded with `-1` to `ceil(n / CP)` rounded up to a
    multiple of `pad_to`, the same count on every rank, and rotated by
    `(positions[0] / CP) mod pad_to` blocks of `count / pad_to`: with
    sequence parallelism over `pad_to` ranks, a one-row step's row goes to
    those ranks in turn too. A step has at least one row.

    With `by_place`, row `i` goes to CP rank `p mod CP` of its own place `p`
    (the low 32 bits of `positions[i]`), so that where a row is computed,
    and where its K/V is kept, does not depend on the other requests of the
    step (batch invariance); the count is then the most rows a rank gets,
    rounded up to a multiple of `pad_to`.

    ```mlir
    %rows = mf.step_rows %positions on "attention" "cp" pad_to 2
        : tensor<?xi64> -> tensor<?xi64>
    %own = mf.step_rows %positions on "attention" "cp" pad_to 2 by_place
        : tensor<?xi64> -> tensor<?xi64>
    ```
  }];
  let arguments = (ins MF_IndexTensor:$positions, StrAttr:$mesh,
                       StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntPositive]>:$pad_to,
                       UnitAttr:$by_place);
  let results = (outs MF_IndexTensor:$result);
  let assemblyFormat = [{
    $positions `on` $mesh $axis `pad_to` $pad_to (`by_place` $by_place^)?
    attr-dict `:` type($positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_TakeOp : MF_Op<"take", [Pure]> {
  let summary = "gather rows by index, with a fill value past the end";
  let description = [{
    `result[i] = input[indices[i]]` where `0 <= indices[i] < dim(input, 0)`,
    and `fill` elsewhere (padding tokens).
  }];
  let arguments = (ins MF_AnyTensor:$input, MF_IndexTensor:$indices,
                       I64Attr:$fill);
  let results = (outs MF_AnyTensor:$result);
  let assemblyFormat = [{
    $input `[` $indices `]` `fill` $fill attr-dict `:` type($input) `,`
    type($indices) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MF_GatherOp : MF_Op<"gather", [Pure]> {
  let summary = "gather along a dim onto one member of a group";
  let description = [{
    Member `root` receives every member's `input` concatenated along `dim`
    by group rank (the LM-head halves); on other members the result is
    unspecified.
  }];
  let arguments = (ins MF_AnyTensor:$input, StrAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim, I64Attr:$root);
  let results = (outs MF_AnyTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh $axes `dim` $dim `root` $root attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // MESHFOLD_DIALECT_MF_IR_MFOPS_TD
