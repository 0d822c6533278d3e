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

    // Weights: one id per distinct (name, slice), in order of first use.
    Type f32 = Float32Type::get(ctx), i64 = IntegerType::get(ctx, 64);
    // The weights' storage type (the manifest and mf.weight say it; the
    // runtime loads each slice in it).
    Type storage = weightDType == "bf16" ? Type(BFloat16Type::get(ctx)) : f32;
    Manifest manifest;
    llvm::StringMap<std::pair<int64_t, RankedTensorType>> ids;
    SmallVector<ParamOp> params;
    module.walk([&](ParamOp op) { params.push_back(op); });
    auto keyOf = [](ParamOp op) {
      std::string key = op.getName().str();
      for (mf::ShardAttr shard : mf::getShards(op))
        key += " shard " + std::to_string(shard.getDim()) + " " +
               shard.getMesh().str() + " " + shard.getAxis().str() + " " +
               std::to_string(shard.getParts());
      return key;
    };
    // The stages that read each weight (stage functions are named
    // <entry>_stage<s>; anything else is read by every stage).
    llvm::StringMap<std::set<int64_t>> stagesOf;
    std::string stagePrefix = entryName + "_stage";
    for (ParamOp op : params) {
      auto fn = op->getParentOfType<func::FuncOp>();
      StringRef name = fn ? fn.getSymName() : StringRef();
      int64_t stage = -1;
      if (name.starts_with(stagePrefix) &&
          name.drop_front(stagePrefix.size()).getAsInteger(10, stage))
        stage = -1;
      stagesOf[keyOf(op)].insert(stage);
    }
    for (ParamOp op : params) {
      RankedTensorType type = op.getType();
      if (type.getElementType() != f32) {
        op.emitError() << "the CPU target computes in f32; weight '"
                       << op.getName() << "' is " << type.getElementType();
        return signalPassFailure();
      }
      std::string key = keyOf(op);
      auto [it, inserted] = ids.try_emplace(key, int64_t(ids.size()), type);
      if (!inserted && it->second.second != type) {
        op.emitError() << "weight '" << op.getName() << "' used as " << type
                       << " and as " << it->second.second;
        return signalPassFailure();
      }
      if (inserted) {
        ManifestParam p;
        p.id = it->second.first;
        p.name = op.getName().str();
        p.bf16 = weightDType == "bf16";
        p.shape.assign(type.getShape().begin(), type.getShape().end());
        for (mf::ShardAttr shard : mf::getShards(op))
          p.shards.push_back({shard.getDim(), shard.getParts(),
                              shard.getMesh().str(), shard.getAxis().str()});
        const std::set<int64_t> &stages = stagesOf[key];
        if (!stages.count(-1))
          p.stages.assign(stages.begin(), stages.end());
        manifest.params.push_back(std::move(p));
      }
    }

    for (ParamOp op : params) {
      OpBuilder b(op);
      auto type = op.getType().clone(storage);
      Value buffer = mf::WeightOp::create(
          b, op.getLoc(), MemRefType::get(type.getShape(), storage),
          ids.lookup(keyOf(op)).first, op.getName());
      Value tensor = bufferization::ToTensorOp::create(
          b, op.getLoc(), type, buffer, b.getUnitAttr(), /*writable=*/nullptr);
      op.replaceAllUsesWith(tensor);
      op.erase();
      // Views of the weight (MLA splits kv_b_proj per head and slices it)
      // take its storage type; the moe ops they feed widen it.
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

    // K/V outputs.
    auto kvType = dynamicStrided(
        {ShapedType::kDynamic, ShapedType::kDynamic, ShapedType::kDynamic},
        f32);
    auto posType = dynamicStrided({ShapedType::kDynamic}, i64);
    func::FuncOp kvFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_kv_cache_f32);
    SmallVector<KVCacheOp> caches;
    module.walk([&](KVCacheOp op) { caches.push_back(op); });
    for (KVCacheOp op : caches) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      if (op.getKey().getType().getElementType() != f32) {
        op.emitError() << "the CPU target computes in f32";
        return signalPassFailure();
      }
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

    // K/V history inputs of decode steps.
    auto historyPosType = MemRefType::get({ShapedType::kDynamic}, i64);
    SmallVector<KVHistoryOp> histories;
    module.walk([&](KVHistoryOp op) { histories.push_back(op); });
    if (!histories.empty()) {
      func::FuncOp lengthFn =
          declareRuntimeFunction(module, RuntimeFn::mfrt_kv_history_length);
      func::FuncOp historyFn =
          declareRuntimeFunction(module, RuntimeFn::mfrt_kv_history_f32);
      for (KVHistoryOp op : histories) {
        OpBuilder b(op);
        Location loc = op.getLoc();
        auto type = op.getKey().getType();
        if (type.getElementType() != f32) {
          op.emitError() << "the CPU target computes in f32";
          return signalPassFailure();
        }
        Value layer = arith::ConstantOp::create(
            b, loc, b.getI64IntegerAttr(op.getLayer()));
        Value step = tensor::DimOp::create(b, loc, op.getStepKey(), 0);
        Value stepPositions =
            readOnlyBuffer(b, loc, op.getStepPositions(), posType);
        Value cached = arith::IndexCastOp::create(
            b, loc, b.getIndexType(),
            func::CallOp::create(b, loc, lengthFn,
                                 ValueRange{layer, stepPositions})
                .getResult(0));
        Value rows = arith::AddIOp::create(b, loc, cached, step);
        auto bufferType = MemRefType::get(type.getShape(), f32);
        Value k = memref::AllocOp::create(b, loc, bufferType, rows);
        Value v = memref::AllocOp::create(b, loc, bufferType, rows);
        Value p = memref::AllocOp::create(b, loc, historyPosType, rows);
        func::CallOp::create(
            b, loc, historyFn,
            ValueRange{layer, readOnlyBuffer(b, loc, op.getStepKey(), kvType),
                       readOnlyBuffer(b, loc, op.getStepValue(), kvType),
                       stepPositions, memref::CastOp::create(b, loc, kvType, k),
                       memref::CastOp::create(b, loc, kvType, v),
                       memref::CastOp::create(b, loc, posType, p),
                       headOffset(b, loc, op.getHeadOffset())});
        auto toTensor = [&](Value m, Type t) -> Value {
          return bufferization::ToTensorOp::create(
              b, loc, t, m, b.getUnitAttr(), /*writable=*/nullptr);
        };
        op.getKey().replaceAllUsesWith(toTensor(k, type));
        op.getValue().replaceAllUsesWith(toTensor(v, type));
        op.getPositions().replaceAllUsesWith(
            toTensor(p, op.getPositions().getType()));
        op.erase();
      }
    }

    // Logits outputs.
    auto logitsType = dynamicStrided({ShapedType::kDynamic}, f32);
    func::FuncOp logitsFn =
        declareRuntimeFunction(module, RuntimeFn::mfrt_logits_f32);
    SmallVector<LogitsOp> logits;
    module.walk([&](LogitsOp op) { logits.push_back(op); });
    for (LogitsOp op : logits) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      auto type = op.getLogits().getType();
      if (type.getElementType() != f32) {
        op.emitError() << "the CPU target computes in f32";
        return signalPassFailure();
      }
      Value cast = readOnlyBuffer(b, loc, op.getLogits(), logitsType);
      func::CallOp::create(b, loc, logitsFn,
                           ValueRange{cast, recordFlag(b, loc, op.getValid())});
      op.erase();
    }

    // Prompt logits outputs.
    auto rowsType =
        dynamicStrided({ShapedType::kDynamic, ShapedType::kDynamic}, f32);
    SmallVector<PromptLogitsOp> prompts;
    module.walk([&](PromptLogitsOp op) { prompts.push_back(op); });
    if (!prompts.empty()) {
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

    // Decode-step row logits.
    SmallVector<StepLogitsOp> stepRows;
    module.walk([&](StepLogitsOp op) { stepRows.push_back(op); });
    if (!stepRows.empty()) {
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

    // The manifest the runtime checks weights and outputs against.
    manifest.hidden = info->hidden;
    manifest.vocab = info->vocab;
    manifest.layers = info->numLayers;
    manifest.heads = info->numHeads;
    manifest.kvHeads = info->numKVHeads;
    manifest.headDim = info->headDim;
    manifest.experts = info->numExperts;
    manifest.topK = info->topK;
    manifest.moeLayers = info->numMoELayers;
    manifest.kvShared = info->kvShared != 0;
    manifest.projNorms = info->projNorms != 0;
    manifest.ffn = info->ffn;
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
        if (id < 0 || id >= info->vocab) {
          module.emitError()
              << "convert-moe-to-runtime: eos_token_id " << id
              << " is outside the vocabulary (" << info->vocab << " tokens)";
          return signalPassFailure();
        }
        manifest.eosTokens.push_back(id);
      }
      module->removeAttr(getEosTokensAttrName());
    }
    // The plan (absent: one rank) and the groups the program uses, by id.
    if (auto plan = module->getAttrOfType<mf::PlanAttr>(
            mf::MFDialect::getPlanAttrName()))
      manifest.plan = formatPlanText(plan.toPlanSpec());
    if (auto groups =
            module->getAttrOfType<ArrayAttr>(getRuntimeGroupsAttrName()))
      for (Attribute g : groups) {
        auto [mesh, axes] = cast<StringAttr>(g).getValue().split(':');
        manifest.groups.push_back({mesh.str(), axes.str()});
      }
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
