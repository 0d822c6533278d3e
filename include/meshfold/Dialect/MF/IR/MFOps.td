//===- MFOps.td - mf dialect ops ---------------------------*- tablegen -*-===//

#ifndef MESHFOLD_DIALECT_MF_IR_MFOPS_TD
#define MESHFOLD_DIALECT_MF_IR_MFOPS_TD

include "meshfold/Dialect/MF/IR/MFBase.td"
include "meshfold/Dialect/MF/IR/MFAttrs.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

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

    ```mlir
    %w = mf.weight 3, "model.norm.weight" : memref<64xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$id,
                       StrAttr:$name);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "$id `,` $name attr-dict `:` type($result)";
}

// Communication ops come with the partitioning passes.

#endif // MESHFOLD_DIALECT_MF_IR_MFOPS_TD
