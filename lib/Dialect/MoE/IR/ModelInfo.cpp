//===- ModelInfo.cpp - model dimensions from the moe ops ------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace meshfold::moe;

namespace {
/// Sets `slot` to `value`, or checks that it already holds `value`.
LogicalResult agree(Operation *op, StringRef what, int64_t &slot,
                    int64_t value) {
  if (slot == 0 || slot == value) {
    slot = value;
    return success();
  }
  return op->emitError() << "model is inconsistent: " << what << " is " << value
                         << " here but " << slot << " elsewhere";
}

int64_t dim(Value v, unsigned i) {
  return cast<RankedTensorType>(v.getType()).getDimSize(i);
}
} // namespace

FailureOr<ModelInfo> meshfold::moe::getModelInfo(ModuleOp module) {
  ModelInfo info;
  WalkResult result = module.walk([&](Operation *op) -> WalkResult {
    LogicalResult ok = success();
    if (auto attn = dyn_cast<AttentionOp>(op)) {
      ++info.numLayers;
      ok = success(succeeded(agree(op, "n_heads", info.numHeads,
                                   dim(attn.getQuery(), 1))) &&
                   succeeded(agree(op, "n_kv_heads", info.numKVHeads,
                                   dim(attn.getKey(), 1))) &&
                   succeeded(agree(op, "head_dim", info.headDim,
                                   dim(attn.getQuery(), 2))));
    } else if (auto router = dyn_cast<RouterOp>(op)) {
      ok = success(succeeded(agree(op, "n_experts", info.numExperts,
                                   dim(router.getGate(), 0))) &&
                   succeeded(agree(op, "top_k", info.topK, router.getTopK())));
    } else if (auto experts = dyn_cast<ExpertsOp>(op)) {
      ok = success(succeeded(agree(op, "n_experts", info.numExperts,
                                   dim(experts.getW1(), 0))) &&
                   succeeded(agree(op, "expert ffn", info.ffn,
                                   dim(experts.getW1(), 1))));
    } else if (auto embed = dyn_cast<EmbedOp>(op)) {
      ok = success(succeeded(agree(op, "hidden size", info.hidden,
                                   dim(embed.getTable(), 1))) &&
                   succeeded(agree(op, "vocab size", info.vocab,
                                   dim(embed.getTable(), 0))));
    } else if (auto head = dyn_cast<LMHeadOp>(op)) {
      ok = agree(op, "vocab size", info.vocab, dim(head.getWeight(), 0));
    }
    return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();
  return info;
}
