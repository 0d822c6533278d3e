//===- ModelInfo.cpp - model dimensions from the moe ops ------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <set>

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

/// The fields of moe.model_info, by key.
const std::pair<StringRef, int64_t ModelInfo::*> kFields[] = {
    {"hidden", &ModelInfo::hidden},
    {"heads", &ModelInfo::numHeads},
    {"kv_heads", &ModelInfo::numKVHeads},
    {"head_dim", &ModelInfo::headDim},
    {"experts", &ModelInfo::numExperts},
    {"top_k", &ModelInfo::topK},
    {"ffn", &ModelInfo::ffn},
    {"layers", &ModelInfo::numLayers},
    {"moe_layers", &ModelInfo::numMoELayers},
    {"vocab", &ModelInfo::vocab},
    {"kv_shared", &ModelInfo::kvShared},
    {"proj_norms", &ModelInfo::projNorms}};

/// The fields recorded only when set.
bool optionalField(int64_t ModelInfo::*field) {
  return field == &ModelInfo::numMoELayers || field == &ModelInfo::kvShared ||
         field == &ModelInfo::projNorms;
}

int64_t dim(Value v, unsigned i) {
  return cast<RankedTensorType>(v.getType()).getDimSize(i);
}

/// Whether `norm` normalises a whole projection, all heads at once: its
/// input is the projection (an moe.linear) and its result, through a clip
/// or not, is split into heads. (MLA's latent norm reads a slice of its
/// projection; a LoRA norm feeds a linear.)
bool normsProjection(RMSNormOp norm) {
  if (!norm.getInput().getDefiningOp<LinearOp>())
    return false;
  for (Operation *user : norm->getUsers()) {
    if (auto clip = dyn_cast<ClipOp>(user))
      user = clip->hasOneUse() ? *clip->user_begin() : nullptr;
    if (isa_and_nonnull<tensor::ExpandShapeOp>(user))
      return true;
  }
  return false;
}
} // namespace

FailureOr<ModelInfo> meshfold::moe::getModelInfo(ModuleOp module) {
  // A partitioned module keeps its global dimensions in an attribute.
  if (auto dict =
          module->getAttrOfType<DictionaryAttr>(getModelInfoAttrName())) {
    ModelInfo info;
    auto get = [&](StringRef key, int64_t &slot) {
      if (auto v = dict.getAs<IntegerAttr>(key))
        slot = v.getInt();
    };
    for (auto [key, field] : kFields)
      get(key, info.*field);
    return info;
  }
  ModelInfo info;
  // A module may hold several functions of one model (prefill and its
  // decode step): layers count by index, attentions per function.
  std::set<int64_t> layers, moeLayers;
  llvm::DenseMap<Operation *, int64_t> attentionsIn;
  std::optional<bool> kvShared;
  llvm::DenseMap<Operation *, int64_t> projNormsIn;
  WalkResult result = module.walk([&](Operation *op) -> WalkResult {
    LogicalResult ok = success();
    if (isa<AttentionOp, AttentionPartialOp>(op)) {
      Value q = op->getOperand(0), k = op->getOperand(1);
      if (isa<AttentionOp>(op))
        ++attentionsIn[op->getParentOfType<func::FuncOp>()];
      ok = success(
          succeeded(agree(op, "n_heads", info.numHeads, dim(q, 1))) &&
          succeeded(agree(op, "n_kv_heads", info.numKVHeads, dim(k, 1))) &&
          succeeded(agree(op, "head_dim", info.headDim, dim(q, 2))));
    } else if (auto layer = dyn_cast<LayerOp>(op)) {
      layers.insert(layer.getIndex());
    } else if (auto router = dyn_cast<RouterOp>(op)) {
      if (auto layer = router->getParentOfType<LayerOp>())
        moeLayers.insert(layer.getIndex());
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
    } else if (auto norm = dyn_cast<RMSNormOp>(op)) {
      if (normsProjection(norm))
        ++projNormsIn[op->getParentOfType<func::FuncOp>()];
    } else if (auto cache = dyn_cast<KVCacheOp>(op)) {
      bool shared = cache.getKey() == cache.getValue();
      if (kvShared && *kvShared != shared) {
        op->emitError() << "model is inconsistent: this layer's cache "
                        << (shared ? "records" : "does not record")
                        << " one tensor as its key and value, another's "
                        << (shared ? "does not" : "does");
        return WalkResult::interrupt();
      }
      kvShared = shared;
    }
    return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();
  // Layers are moe.layer ops; a model written without them has one
  // attention per layer.
  int64_t attentions = 0;
  for (auto [fn, count] : attentionsIn)
    attentions = std::max(attentions, count);
  info.numLayers = !layers.empty() ? int64_t(layers.size()) : attentions;
  // Recorded only where some layers are dense.
  if (!layers.empty() && moeLayers.size() < layers.size())
    info.numMoELayers = int64_t(moeLayers.size());
  info.kvShared = kvShared.value_or(false) ? 1 : 0;
  // Two per attention (the query's and the key's) in every layer, or none.
  for (auto [fn, count] : projNormsIn) {
    if (count != 2 * attentionsIn.lookup(fn)) {
      fn->emitError() << "model is inconsistent: " << count
                      << " norms over a whole query or key projection for "
                      << attentionsIn.lookup(fn)
                      << " attentions (one each for the query and the key "
                         "of every attention, or none)";
      return failure();
    }
    info.projNorms = 1;
  }
  return info;
}

void meshfold::moe::setModelInfoAttr(ModuleOp module, const ModelInfo &info) {
  Builder b(module.getContext());
  SmallVector<NamedAttribute> entries;
  auto add = [&](StringRef key, int64_t v) {
    entries.push_back(b.getNamedAttr(key, b.getI64IntegerAttr(v)));
  };
  for (auto [key, field] : kFields)
    if (info.*field != 0 || !optionalField(field))
      add(key, info.*field);
  module->setAttr(getModelInfoAttrName(), b.getDictionaryAttr(entries));
}
