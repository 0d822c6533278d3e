//===- MFBase.td - mf dialect definition -------------------*- tablegen -*-===//
//
// The `mf` dialect: meshes, the partitioning plan and communication.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_MF_IR_MFBASE_TD
#define MESHFOLD_DIALECT_MF_IR_MFBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def MF_Dialect : Dialect {
  let name = "mf";
  let cppNamespace = "::meshfold::mf";
  let summary = "meshes, partitioning plans and communication for meshfold";
  let description = [{
    The plan (`#mf.plan`) says how a model is spread over a cluster: the
    device count, the node topology and its link classes, an attention mesh
    (an ordered list of named axes, first axis varying fastest in the rank
    number) and an expert mesh folded onto the same devices, whose axes are
    composites of attention axes. A module carries its plan in the
    `mf.plan` attribute.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Name of the module attribute that holds the plan.
    static constexpr ::llvm::StringLiteral getPlanAttrName() {
      return ::llvm::StringLiteral("mf.plan");
    }
    /// Name of the attribute of a weight that says which slice it holds.
    static constexpr ::llvm::StringLiteral getShardAttrName() {
      return ::llvm::StringLiteral("mf.shard");
    }
    /// Name of the unit attribute of a moe.layer narrowed to the rows that
    /// reach an output (mf-narrow-last-layer).
    static constexpr ::llvm::StringLiteral getNarrowedAttrName() {
      return ::llvm::StringLiteral("mf.narrowed");
    }
    /// Name of the array of i64 on a moe.experts that places its experts
    /// on the EP ranks (mf-place-experts): EP x slots expert ids, slot s of
    /// EP coordinate c at c * slots + s (meshfold/Support/ExpertPlacement.h).
    static constexpr ::llvm::StringLiteral getPlacementAttrName() {
      return ::llvm::StringLiteral("mf.placement");
    }
    /// Name of the module's dictionary of the placed layers' placements
    /// (layer index as text -> array of i64, as getPlacementAttrName), which
    /// mf-fold-experts records for the runtime.
    static constexpr ::llvm::StringLiteral getPlacementsAttrName() {
      return ::llvm::StringLiteral("mf.placements");
    }
    /// Name of the i64 of an expert weight whose leading dim holds the slots
    /// of its EP rank under the placement of that layer (mf.placements).
    static constexpr ::llvm::StringLiteral getPlacedAttrName() {
      return ::llvm::StringLiteral("mf.placed");
    }
  }];
}

class MF_Op<string mnemonic, list<Trait> traits = []>
    : Op<MF_Dialect, mnemonic, traits>;

class MF_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<MF_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // MESHFOLD_DIALECT_MF_IR_MFBASE_TD
