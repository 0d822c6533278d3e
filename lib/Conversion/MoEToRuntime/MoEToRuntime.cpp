//===- MoEToRuntime.cpp - bind weights, outputs and entry to mfrt ---------===//
//
// Weights become calls into the runtime (which maps the safetensors file and
// checks it against the manifest emitted here), K/V outputs become calls that
// hand the runtime the cache entries, and the entry function gets the C
// interface the runtime's driver calls.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Conversion/MoEToRuntime/MoEToRuntime.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Conversion/RuntimeCalls.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Support/Manifest.h"
#include "meshfold/Support/MeshLayout.h"
#include "meshfold/Support/PlanText.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/StringMap.h"

#include "llvm/Support/raw_ostream.h"
#include <set>

#define DEBUG_TYPE "convert-moe-to-runtime"

namespace meshfold {
#define GEN_PASS_DEF_CONVERTMOETORUNTIMEPASS
#include "meshfold/Conversion/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;
using namespace meshfold::moe;

namespace {
/// The tensor `t` as a read-only buffer, cast to the runtime call's fully
/// dynamic strided type `erased`.
Value readOnlyBuffer(OpBuilder &b, Location loc, Value t, MemRefType erased) {
  auto tt = cast<RankedTensorType>(t.getType());
  Value m = bufferization::ToBufferOp::create(
      b, loc, dynamicStrided(tt.getShape(), tt.getElementType()), t,
      /*read_only=*/true);
  return memref::CastOp::create(b, loc, erased, m);
}

/// The first KV head a rank's K/V tensors hold, as the i64 the runtime
/// takes (0 without `heads from`: all of the model's).
Value headOffset(OpBuilder &b, Location loc, Value offset) {
  if (!offset)
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(0));
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), offset);
}

/// Whether this rank records an output, as the i64 the runtime takes: the
/// op's `valid` flag, or 1 without one (every rank records).
Value recordFlag(OpBuilder &b, Location loc, Value valid) {
  if (!valid)
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(1));
  return arith::ExtUIOp::create(b, loc, b.getI64Type(), valid);
}

/// The key of a weight slice: its name and its shards. One id (one load)
/// per distinct key.
std::string weightKey(ParamOp op) {
  std::string key = op.getName().str();
  for (mf::ShardAttr shard : mf::getShards(op))
    key += " shard " + std::to_string(shard.getDim()) + " " +
           shard.getMesh().str() + " " + shard.getAxis().str() + " " +
           std::to_string(shard.getParts());
  if (auto layer =
          op->getAttrOfType<IntegerAttr>(mf::MFDialect::getPlacedAttrName()))
    key += " placed " + std::to_string(layer.getInt());
  return key;
}

/// The stages that read each weight slice, by key (stage functions are
/// named <entry>_stage<s>; anything else is read by every stage, -1).
llvm::StringMap<std::set<int64_t>> weightStages(ArrayRef<ParamOp> params,
                                                StringRef entryName) {
  llvm::StringMap<std::set<int64_t>> stagesOf;
  std::string stagePrefix = (entryName + "_stage").str();
  for (ParamOp op : params) {
    auto fn = op->getParentOfType<func::FuncOp>();
    StringRef name = fn ? fn.getSymName() : StringRef();
    int64_t stage = -1;
    if (name.starts_with(stagePrefix) &&
        name.drop_front(stagePrefix.size()).getAsInteger(10, stage))
      stage = -1;
    stagesOf[weightKey(op)].insert(stage);
  }
  return stagesOf;
}

/// Gives the views of a weight tensor (MLA splits kv_b_proj per head and
/// slices it) the weight's storage type; the moe ops they feed widen it.
void retypeWeightViews(Value tensor, Type storage) {
  SmallVector<Value> views = {tensor};
  while (!views.empty()) {
    Value v = views.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (!isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
               tensor::ExtractSliceOp>(user) ||
          user->getOperand(0) != v)
        continue;
      Value r = user->getResult(0);
      auto rType = cast<RankedTensorType>(r.getType());
      if (rType.getElementType() == storage)
        continue;
      r.setType(rType.clone(storage));
      views.push_back(r);
    }
  }
}

/// Every op of type `OpTy` in `module`, in walk order.
template <typename OpTy> SmallVector<OpTy> collectOps(ModuleOp module) {
  SmallVector<OpTy> ops;
  module.walk([&](OpTy op) { ops.push_back(op); });
  return ops;
}

/// The id and the type of each weight slice, by key.
using WeightIds = llvm::StringMap<std::pair<int64_t, RankedTensorType>>;

struct ConvertMoEToRuntimePass
    : public meshfold::impl::ConvertMoEToRuntimePassBase<
          ConvertMoEToRuntimePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    // A program may have only the decode step: its prefill is a step with
    // no history.
    auto entry = module.lookupSymbol<func::FuncOp>(entryName);
    auto step = module.lookupSymbol<func::FuncOp>(decodeName);
    if (!entry && !step) {
      module.emitError() << "convert-moe-to-runtime: no entry function @"
                         << entryName;
      return signalPassFailure();
    }
    FailureOr<ModelInfo> info = getModelInfo(module);
    if (failed(info))
      return signalPassFailure();
    if (weightDType != "f32" && weightDType != "bf16") {
      module.emitError() << "convert-moe-to-runtime: weight-dtype must be f32 "
                            "or bf16, got '"
                         << weightDType << "'";
      return signalPassFailure();
    }

    Manifest manifest;
    SmallVector<ParamOp> params = collectOps<ParamOp>(module);
    WeightIds ids;
    if (failed(registerWeights(params, ids, info->numExperts, manifest)))
      return signalPassFailure();
    // The weights' storage type (the manifest and mf.weight say it; the
    // runtime loads each slice in it).
    Type storage = weightDType == "bf16" ? Type(BFloat16Type::get(ctx))
                                         : Type(Float32Type::get(ctx));
    bindWeights(params, ids, storage);

    if (failed(lowerKVCaches(module)) || failed(lowerKVHistories(module)) ||
        failed(lowerLogits(module)))
      return signalPassFailure();
    // The runtime records every prompt position's logits only for a
    // program whose prefill computes them.
    manifest.promptLogits = !collectOps<PromptLogitsOp>(module).empty();
    if (historyTile < 1) {
      module.emitError() << "history-tile must be at least 1, got "
                         << static_cast<int64_t>(historyTile);
      return signalPassFailure();
    }
    manifest.historyTile = historyTile;
    lowerPromptLogits(module);
    lowerStepHeadRows(module);
    lowerStepLogits(module);

    if (entry) {
      entry->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                     UnitAttr::get(ctx));
      manifest.entry = entryName;
    }
    if (step) {
      step->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                    UnitAttr::get(ctx));
      manifest.decode = decodeName;
    }
    if (failed(describeProgram(module, *info, manifest)))
      return signalPassFailure();
    emitManifest(module, manifest);
  }

private:
  /// Gives each distinct weight slice (name and shards) an id, in order of
  /// first use, and its manifest entry; every slice must be f32 and used
  /// with one type.
  LogicalResult registerWeights(ArrayRef<ParamOp> params, WeightIds &ids,
                                int64_t numExperts, Manifest &manifest) {
    Type f32 = Float32Type::get(&getContext());
    llvm::StringMap<std::set<int64_t>> stagesOf =
        weightStages(params, entryName);
    for (ParamOp op : params) {
      RankedTensorType type = op.getType();
      if (type.getElementType() != f32)
        return op.emitError()
               << "the CPU target computes in f32; weight '" << op.getName()
               << "' is " << type.getElementType();
      std::string key = weightKey(op);
      auto [it, inserted] = ids.try_emplace(key, int64_t(ids.size()), type);
      if (!inserted && it->second.second != type)
        return op.emitError() << "weight '" << op.getName() << "' used as "
                              << type << " and as " << it->second.second;
      if (!inserted)
        continue;
      ManifestParam p;
      p.id = it->second.first;
      p.name = op.getName().str();
      p.bf16 = weightDType == "bf16";
      p.shape.assign(type.getShape().begin(), type.getShape().end());
      for (mf::ShardAttr shard : mf::getShards(op))
        p.shards.push_back({shard.getDim(), shard.getParts(),
                            shard.getMesh().str(), shard.getAxis().str()});
      if (auto layer = op->getAttrOfType<IntegerAttr>(
              mf::MFDialect::getPlacedAttrName())) {
        p.placedLayer = layer.getInt();
        p.placedExperts = numExperts;
      }
      const std::set<int64_t> &stages = stagesOf[key];
      if (!stages.count(-1))
        p.stages.assign(stages.begin(), stages.end());
      manifest.params.push_back(std::move(p));
    }
    return success();
  }

  /// Replaces each moe.param by its slice as the runtime loaded it: an
  /// mf.weight buffer of the `storage` type, seen as a tensor.
  void bindWeights(ArrayRef<ParamOp> params, const WeightIds &ids,
                   Type storage) {
    for (ParamOp op : params) {
      OpBuilder b(op);
      auto type = op.getType().clone(storage);
      Value buffer = mf::WeightOp::create(
          b, op.getLoc(), MemRefType::get(type.getShape(), storage),
          ids.lookup(weightKey(op)).first, op.getName());
      Value tensor = bufferization::ToTensorOp::create(
          b, op.getLoc(), type, buffer, b.getUnitAttr(), /*writable=*/nullptr);
      op.replaceAllUsesWith(tensor);
      op.erase();
      retypeWeightViews(tensor, storage);
    }
  }

  /// K/V outputs: each moe.kv_cache hands the runtime its layer's entries.
  LogicalResult lowerKVCaches(ModuleOp module) {
    Type f32 = Float32Type::get(&getContext());
    Type i64 = IntegerType::get(&getContext(), 64);
    auto kvType = dynamicStrided(
        {ShapedType::kDynamic, ShapedType::kDynamic, ShapedType::kDynamic},
        f32);
    auto posType = dynamicStrided({ShapedType::kDynamic}, i64);
    func::FuncOp kvFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_kv_cache_f32);
    for (KVCacheOp op : collectOps<KVCacheOp>(module)) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      if (op.getKey().getType().getElementType() != f32)
        return op.emitError() << "the CPU target computes in f32";
      Value layer =
          arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(op.getLayer()));
      Value heads = headOffset(b, loc, op.getHeadOffset());
      func::CallOp::create(
          b, loc, kvFn,
          ValueRange{layer, readOnlyBuffer(b, loc, op.getKey(), kvType),
                     readOnlyBuffer(b, loc, op.getValue(), kvType),
                     readOnlyBuffer(b, loc, op.getPositions(), posType),
                     heads});
      op.erase();
    }
    return success();
  }

  /// K/V history inputs of decode steps: the runtime's cache read in place
  /// through a table of key tiles.
  LogicalResult lowerKVHistories(ModuleOp module) {
    SmallVector<KVHistoryOp> histories = collectOps<KVHistoryOp>(module);
    if (histories.empty())
      return success();
    if (keyTile < 1)
      return module.emitError() << "key-tile must be at least 1, got "
                                << static_cast<int64_t>(keyTile);
    HistoryCalls calls{
        declareRuntimeFunction(module, RuntimeFn::mfrt_kv_key_tiles),
        declareRuntimeFunction(module, RuntimeFn::mfrt_kv_key_tiles_fill),
        declareRuntimeFunction(module, RuntimeFn::mfrt_kv_cache_rows)};
    for (KVHistoryOp op : histories)
      if (failed(lowerKVHistory(op, calls)))
        return failure();
    return success();
  }

  struct HistoryCalls {
    func::FuncOp count, fill, rows;
  };

  /// One moe.kv_history: the key tiles of the step (counted by the runtime,
  /// allocated here, filled by it) and the cache's K and V rows they name
  /// (mf.kv_rows, the runtime's own memory); each attention over the
  /// history reads them through the tiles.
  LogicalResult lowerKVHistory(KVHistoryOp op, const HistoryCalls &calls) {
    Type f32 = Float32Type::get(&getContext());
    Type i64 = IntegerType::get(&getContext(), 64);
    auto type = op.getKey().getType();
    if (type.getElementType() != f32)
      return op.emitError() << "the CPU target computes in f32";
    if (failed(checkHistoryUsers(op)))
      return failure();
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value layer =
        arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(op.getLayer()));
    Value stepPositions =
        readOnlyBuffer(b, loc, op.getStepPositions(),
                       dynamicStrided({ShapedType::kDynamic}, i64));
    Value capacity = arith::ConstantOp::create(
        b, loc, b.getI64IntegerAttr(static_cast<int64_t>(keyTile)));
    Value count = arith::IndexCastOp::create(
        b, loc, b.getIndexType(),
        func::CallOp::create(b, loc, calls.count,
                             ValueRange{layer, stepPositions, capacity})
            .getResult(0));
    auto tilesType = MemRefType::get({ShapedType::kDynamic, 2}, i64);
    int64_t rowsPerTile = keyTile;
    auto positionsType =
        MemRefType::get({ShapedType::kDynamic, rowsPerTile}, i64);
    Value tiles = memref::AllocOp::create(b, loc, tilesType, count);
    Value positions = memref::AllocOp::create(b, loc, positionsType, count);
    auto table =
        dynamicStrided({ShapedType::kDynamic, ShapedType::kDynamic}, i64);
    func::CallOp::create(
        b, loc, calls.fill,
        ValueRange{layer, stepPositions,
                   memref::CastOp::create(b, loc, table, tiles),
                   memref::CastOp::create(b, loc, table, positions)});
    Value cacheRows = arith::IndexCastOp::create(
        b, loc, b.getIndexType(),
        func::CallOp::create(b, loc, calls.rows, ValueRange{layer})
            .getResult(0));
    Value first = headOffset(b, loc, op.getHeadOffset());
    auto rows = [&](int64_t tensor) -> Value {
      Value all =
          mf::KVRowsOp::create(b, loc, MemRefType::get(type.getShape(), f32),
                               cacheRows, first, op.getLayer(), tensor);
      return toTensor(b, loc, all, type);
    };
    Value k = rows(0), v = rows(1);
    Value tileTensor = toTensor(
        b, loc, tiles, RankedTensorType::get({ShapedType::kDynamic, 2}, i64));
    Value positionTensor = toTensor(
        b, loc, positions,
        RankedTensorType::get({ShapedType::kDynamic, rowsPerTile}, i64));
    for (OpOperand &use : llvm::make_early_inc_range(op.getKey().getUses()))
      readThroughTiles(use.getOwner(), k, v, positionTensor, tileTensor);
    op.erase();
    return success();
  }

  static Value toTensor(OpBuilder &b, Location loc, Value m, Type t) {
    return bufferization::ToTensorOp::create(b, loc, t, m, b.getUnitAttr(),
                                             /*writable=*/nullptr);
  }

  /// A history's K, V and positions feed attentions only, as their key,
  /// value and key positions, the three of one history (what the tiles
  /// replace).
  LogicalResult checkHistoryUsers(KVHistoryOp op) {
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers()) {
        auto keys = [&](auto att) {
          return att.getKey() == op.getKey() &&
                 att.getValue() == op.getValue() &&
                 att.getKvPositions() == op.getPositions() &&
                 !att.getKeyTiles();
        };
        bool ok = false;
        if (auto att = dyn_cast<AttentionOp>(user))
          ok = keys(att) && att.getQuery() != result;
        else if (auto att = dyn_cast<AttentionPartialOp>(user))
          ok = keys(att) && att.getQuery() != result;
        if (!ok)
          return user->emitError()
                 << "a K/V history is read in place through key tiles: "
                    "only an attention's key, value and key positions may "
                    "use it";
      }
    return success();
  }

  /// An attention over a history: reads `k` and `v` through the tiles.
  static void readThroughTiles(Operation *user, Value k, Value v,
                               Value positions, Value tiles) {
    auto retarget = [&](auto att) {
      att.getKeyMutable().assign(k);
      att.getValueMutable().assign(v);
      att.getKvPositionsMutable().assign(positions);
      att.getKeyTilesMutable().assign(tiles);
    };
    if (auto att = dyn_cast<AttentionOp>(user))
      retarget(att);
    else if (auto att = dyn_cast<AttentionPartialOp>(user))
      retarget(att);
  }

  /// Logits outputs: each moe.logits hands the runtime its row and whether
  /// this rank records it.
  LogicalResult lowerLogits(ModuleOp module) {
    Type f32 = Float32Type::get(&getContext());
    auto logitsType = dynamicStrided({ShapedType::kDynamic}, f32);
    func::FuncOp logitsFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_logits_f32);
    for (LogitsOp op : collectOps<LogitsOp>(module)) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      auto type = op.getLogits().getType();
      if (type.getElementType() != f32)
        return op.emitError() << "the CPU target computes in f32";
      Value cast = readOnlyBuffer(b, loc, op.getLogits(), logitsType);
      func::CallOp::create(b, loc, logitsFn,
                           ValueRange{cast, recordFlag(b, loc, op.getValid())});
      op.erase();
    }
    return success();
  }

  /// The [rows, V] f32 logits and the i64 positions the row-logits calls
  /// take.
  std::pair<MemRefType, MemRefType> rowLogitsTypes() {
    Type f32 = Float32Type::get(&getContext());
    Type i64 = IntegerType::get(&getContext(), 64);
    return {dynamicStrided({ShapedType::kDynamic, ShapedType::kDynamic}, f32),
            dynamicStrided({ShapedType::kDynamic}, i64)};
  }

  /// Prompt logits outputs: the logits of every position a rank holds.
  void lowerPromptLogits(ModuleOp module) {
    SmallVector<PromptLogitsOp> prompts = collectOps<PromptLogitsOp>(module);
    if (prompts.empty())
      return;
    auto [rowsType, posType] = rowLogitsTypes();
    func::FuncOp promptFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_prompt_logits_f32);
    for (PromptLogitsOp op : prompts) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      func::CallOp::create(
          b, loc, promptFn,
          ValueRange{readOnlyBuffer(b, loc, op.getLogits(), rowsType),
                     readOnlyBuffer(b, loc, op.getPositions(), posType)});
      op.erase();
    }
  }

  /// The rows of a decode step whose logits are recorded: counted by the
  /// runtime, allocated here, filled by it.
  void lowerStepHeadRows(ModuleOp module) {
    SmallVector<StepHeadRowsOp> ops = collectOps<StepHeadRowsOp>(module);
    if (ops.empty())
      return;
    func::FuncOp countFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_step_head_rows);
    func::FuncOp fillFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_step_head_rows_fill);
    auto posType = rowLogitsTypes().second;
    for (StepHeadRowsOp op : ops) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value pos = readOnlyBuffer(b, loc, op.getPositions(), posType);
      Value count = arith::IndexCastOp::create(
          b, loc, b.getIndexType(),
          func::CallOp::create(b, loc, countFn, ValueRange{pos}).getResult(0));
      auto rowsType = MemRefType::get({ShapedType::kDynamic},
                                      op.getType().getElementType());
      Value rows = memref::AllocOp::create(b, loc, rowsType, count);
      func::CallOp::create(
          b, loc, fillFn,
          ValueRange{memref::CastOp::create(b, loc, posType, rows)});
      Value result = toTensor(b, loc, rows,
                              RankedTensorType::get({ShapedType::kDynamic},
                                                    rowsType.getElementType()));
      if (result.getType() != op.getType())
        result = tensor::CastOp::create(b, loc, op.getType(), result);
      op.replaceAllUsesWith(result);
      op.erase();
    }
  }

  /// Decode-step row logits: one row per new token, where valid.
  void lowerStepLogits(ModuleOp module) {
    SmallVector<StepLogitsOp> stepRows = collectOps<StepLogitsOp>(module);
    if (stepRows.empty())
      return;
    auto [rowsType, posType] = rowLogitsTypes();
    func::FuncOp stepFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_step_logits_f32);
    for (StepLogitsOp op : stepRows) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value valid = recordFlag(b, loc, op.getValid());
      func::CallOp::create(
          b, loc, stepFn,
          ValueRange{readOnlyBuffer(b, loc, op.getLogits(), rowsType),
                     readOnlyBuffer(b, loc, op.getPositions(), posType),
                     valid});
      op.erase();
    }
  }

  /// The manifest's model, plan and groups; takes the module attributes that
  /// only the runtime reads (prompt length limit, EOS tokens) off it.
  LogicalResult describeProgram(ModuleOp module, const ModelInfo &info,
                                Manifest &manifest) {
    manifest.hidden = info.hidden;
    manifest.vocab = info.vocab;
    manifest.layers = info.numLayers;
    manifest.heads = info.numHeads;
    manifest.kvHeads = info.numKVHeads;
    manifest.headDim = info.headDim;
    manifest.experts = info.numExperts;
    manifest.topK = info.topK;
    manifest.moeLayers = info.numMoELayers;
    manifest.kvShared = info.kvShared != 0;
    manifest.projNorms = info.projNorms != 0;
    manifest.ffn = info.ffn;
    // The traffic report's model of a narrowed last layer (only prefill's
    // can be: a decode step's logits read every row).
    module.walk([&](LayerOp layer) {
      manifest.narrowedLast |=
          layer->hasAttr(mf::MFDialect::getNarrowedAttrName());
    });
    // The runtime checks prompt lengths against the config's limit; the
    // attribute has no other reader.
    if (auto limit =
            module->getAttrOfType<IntegerAttr>(getMaxPositionsAttrName())) {
      manifest.maxPositions = limit.getInt();
      module->removeAttr(getMaxPositionsAttrName());
    }
    if (auto eos =
            module->getAttrOfType<DenseI64ArrayAttr>(getEosTokensAttrName())) {
      for (int64_t id : eos.asArrayRef()) {
        if (id < 0 || id >= info.vocab)
          return module.emitError()
                 << "convert-moe-to-runtime: eos_token_id " << id
                 << " is outside the vocabulary (" << info.vocab << " tokens)";
        manifest.eosTokens.push_back(id);
      }
      module->removeAttr(getEosTokensAttrName());
    }
    // The plan (absent: one rank) and the groups the program uses, by id.
    if (auto plan = module->getAttrOfType<mf::PlanAttr>(
            mf::MFDialect::getPlanAttrName()))
      manifest.plan = formatPlanText(plan.toPlanSpec());
    if (failed(readPlacements(module, manifest)))
      return failure();
    if (auto groups =
            module->getAttrOfType<ArrayAttr>(getRuntimeGroupsAttrName()))
      for (Attribute g : groups) {
        auto [mesh, axes] = cast<StringAttr>(g).getValue().split(':');
        manifest.groups.push_back({mesh.str(), axes.str()});
      }
    return success();
  }

  /// The layers' expert placements (mf.placements, with the plan's EP),
  /// which the runtime loads weights and routes rows by.
  LogicalResult readPlacements(ModuleOp module, Manifest &manifest) {
    auto placements = module->getAttrOfType<DictionaryAttr>(
        mf::MFDialect::getPlacementsAttrName());
    auto plan =
        module->getAttrOfType<mf::PlanAttr>(mf::MFDialect::getPlanAttrName());
    if (!placements)
      return success();
    std::optional<MeshLayout> layout =
        plan ? MeshLayout::create(plan.toPlanSpec(), nullptr) : std::nullopt;
    if (!layout || !layout->hasAxis("ep"))
      return module.emitError("convert-moe-to-runtime: expert placements "
                              "need a plan with an ep axis");
    for (NamedAttribute entry : placements) {
      ExpertPlacement p = ExpertPlacement::fromTable(
          manifest.experts, layout->axisSize("ep"),
          std::vector<int64_t>(
              cast<DenseI64ArrayAttr>(entry.getValue()).asArrayRef()));
      int64_t layer = -1;
      if (entry.getName().getValue().getAsInteger(10, layer) || layer < 0 ||
          !p.check().empty())
        return module.emitError()
               << "convert-moe-to-runtime: malformed placement of layer '"
               << entry.getName().getValue() << "'";
      manifest.placements[layer] = std::move(p);
    }
    return success();
  }

  /// The manifest the runtime checks weights and outputs against, as a
  /// NUL-terminated global string.
  void emitManifest(ModuleOp module, const Manifest &manifest) {
    MLIRContext *ctx = &getContext();
    std::string text = formatManifest(manifest);
    text.push_back('\0');
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    auto arrayType =
        LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), text.size());
    LLVM::GlobalOp::create(b, module.getLoc(), arrayType, /*isConstant=*/true,
                           LLVM::Linkage::External, kManifestSymbol,
                           b.getStringAttr(text));
  }
};
} // namespace
