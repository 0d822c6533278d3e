//===- MoE.h - MoE dialect --------------------------------------*- C++ -*-===//

#ifndef MESHFOLD_DIALECT_MOE_IR_MOE_H
#define MESHFOLD_DIALECT_MOE_IR_MOE_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "meshfold/Support/MeshLayout.h"

#include "meshfold/Dialect/MoE/IR/MoEOpsDialect.h.inc"

#define GET_OP_CLASSES
#include "meshfold/Dialect/MoE/IR/MoEOps.h.inc"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace meshfold::moe {
/// The model's dimensions, derived from its ops (the ops are the one source
/// of truth; there is no separate config).
struct ModelInfo {
  int64_t hidden = 0, numHeads = 0, numKVHeads = 0, headDim = 0;
  int64_t numExperts = 0, topK = 0, ffn = 0, numLayers = 0, vocab = 0;
  /// The layers with routed experts, where some layers are dense (their MLP
  /// an moe.mlp: Qwen's mlp_only_layers, DeepSeek's first layers); 0: every
  /// layer.
  int64_t numMoELayers = 0;
  /// 1 where every layer's cache records one tensor as both key and value
  /// (`moe.kv_cache %kv, %kv`: MLA's latent), which is then stored, passed
  /// around the CP ring and transferred once; 0: separate K and V.
  int64_t kvShared = 0;
  /// 1 where the query and key are normalised over their whole projection,
  /// all heads at once (OLMoE's q_norm / k_norm: an `moe.rms_norm` whose
  /// result, clipped or not, is split into heads): under TP each row's sum
  /// of squares is all-reduced; 0 otherwise (per-head norms need none).
  int64_t projNorms = 0;
  /// How many tensors each cached row holds: K and V, or the one shared.
  int64_t kvCopies() const { return kvShared ? 1 : 2; }
  /// The layers that dispatch tokens to experts.
  int64_t moeLayers() const {
    return numMoELayers > 0 ? numMoELayers : numLayers;
  }
};

/// Reads the model's dimensions off `module`'s ops. Emits an error naming the
/// op and fails when ops disagree (e.g. two layers with different head counts).
/// A module without attention ops gives numLayers == 0.
/// A module whose ops no longer show the global dimensions (after
/// partitioning) carries them in the attribute `moe.model_info`, which
/// getModelInfo returns instead.
mlir::FailureOr<ModelInfo> getModelInfo(mlir::ModuleOp module);

inline llvm::StringRef getModelInfoAttrName() { return "moe.model_info"; }
/// Marks a decode step function (`mf-derive-decode`): arguments (token ids,
/// their positions), attention over `moe.kv_history`.
inline llvm::StringRef getDecodeStepAttrName() { return "moe.decode_step"; }

/// The dimensions the plan rules constrain (MeshLayout::checkModel).
inline ModelDims modelDims(const ModelInfo &info) {
  return ModelDims{info.numHeads,  info.numKVHeads, info.numExperts,
                   info.numLayers, info.vocab,      info.ffn};
}

/// Records `info` on `module` as `moe.model_info`.
void setModelInfoAttr(mlir::ModuleOp module, const ModelInfo &info);
} // namespace meshfold::moe

#endif // MESHFOLD_DIALECT_MOE_IR_MOE_H
