//===- MFAttrs.td - mf dialect attributes ------------------*- tablegen -*-===//

#ifndef MESHFOLD_DIALECT_MF_IR_MFATTRS_TD
#define MESHFOLD_DIALECT_MF_IR_MFATTRS_TD

include "meshfold/Dialect/MF/IR/MFBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def MF_AxisAttr : MF_Attr<"Axis", "axis"> {
  let summary = "a named mesh axis with its size";
  let description = [{
    An axis of a mesh. An expert-mesh axis also lists the attention axes it is
    composed of (first varies fastest): `#mf.axis<"ep", 16, ["tp", "cp", "dp"]>`.
  }];
  let parameters = (ins "::mlir::StringAttr":$name, "int64_t":$size,
                        OptionalArrayRefParameter<"::mlir::StringAttr">:$parts);
  let assemblyFormat = "`<` $name `,` $size (`,` `[` $parts^ `]`)? `>`";
}

def MF_PlanAttr : MF_Attr<"Plan", "plan"> {
  let summary = "a partitioning plan: devices, topology and two folded meshes";
  let description = [{
    ```mlir
    #mf.plan<devices = 32, gpus_per_node = 8, nvlink_gbps = 450.0,
             ib_gbps = 50.0, attention = [tp = 2, cp = 2, dp = 4, pp = 2],
             experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>
    ```
    The attention mesh's first axis varies fastest:
    `rank = tp + 2*cp + 4*dp + 16*pp`. Each expert-mesh axis is a composite of
    attention axes, so the fold stays exact for any axis order. Expert axes
    composed of the same attention axes are folded over them: they split
    those axes' linear index in the order listed, first fastest (MoE
    Parallel Folding), e.g. an expert mesh of ETP2 x EP8 x PP2 on the seed's
    attention mesh:
    `experts = [etp = 2 : (tp, cp, dp), ep = 8 : (tp, cp, dp), pp = 2 : (pp)]`. Devices on the
    same node talk over NVLink, across nodes over InfiniBand. The plan is
    checked against its rules by `mf-verify-plan`, not by the parser.
  }];
  let parameters = (ins "int64_t":$devices, "int64_t":$gpusPerNode,
                        APFloatParameter<"NVLink GB/s">:$nvlinkGBps,
                        APFloatParameter<"InfiniBand GB/s">:$ibGBps,
                        ArrayRefParameter<"AxisAttr">:$attention,
                        ArrayRefParameter<"AxisAttr">:$experts);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// The plan as the plain description MeshLayout consumes.
    ::meshfold::PlanSpec toPlanSpec() const;
    /// The plan from a plain description.
    static PlanAttr fromPlanSpec(::mlir::MLIRContext *ctx,
                                 const ::meshfold::PlanSpec &spec);
  }];
}

def MF_ShardAttr : MF_Attr<"Shard", "shard"> {
  let summary = "which slice of a weight a rank holds";
  let description = [{
    Attached to a `moe.param` as `mf.shard`: the param's (local) type is the
    slice `i` of `parts` equal slices of the checkpoint tensor along `dim`,
    where `i = coord(axis) * parts / size(axis)` (`parts` divides or equals
    the axis size; fewer parts than the axis size replicate each slice, as
    KV heads are when n_kv < TP). A weight split along several dims carries
    an array of them, one per dim (an expert block over `ep`, each expert's
    FFN over `etp`).

    ```mlir
    %w = moe.param "model.layers.0.self_attn.q_proj.weight"
        {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>}
        : tensor<32x64xf32>
    ```
  }];
  let parameters = (ins "int64_t":$dim, "::mlir::StringAttr":$mesh,
                        "::mlir::StringAttr":$axis, "int64_t":$parts);
  let assemblyFormat = [{
    `<` `dim` `=` $dim `,` `mesh` `=` $mesh `,` `axis` `=` $axis `,` `parts`
    `=` $parts `>`
  }];
}

#endif // MESHFOLD_DIALECT_MF_IR_MFATTRS_TD
