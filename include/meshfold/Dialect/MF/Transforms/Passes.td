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
    - `pp-layers`: PP does not divide the number of layers.

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
}

#endif // MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_TD
