//===- MFToLLVM.cpp - mf runtime-binding ops to LLVM ----------------------===//

#include "meshfold/Conversion/MFToLLVM/MFToLLVM.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Conversion/RuntimeCalls.h"
#include "meshfold/Dialect/MF/IR/MF.h"

#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Transforms/DialectConversion.h"

#define DEBUG_TYPE "convert-mf-to-llvm"

namespace meshfold {
#define GEN_PASS_DEF_CONVERTMFTOLLVMPASS
#include "meshfold/Conversion/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {
/// The llvm.func of runtime entry `fn` (CodegenABI.def) in `op`'s module,
/// declared there on first use.
FailureOr<LLVM::LLVMFuncOp> runtimeFunction(ConversionPatternRewriter &rewriter,
                                            Operation *op, RuntimeFn fn) {
  FunctionType type = getRuntimeFnType(rewriter.getContext(), fn);
  return LLVM::lookupOrCreateFn(rewriter, op->getParentOfType<ModuleOp>(),
                                getRuntimeFnName(fn), type.getInputs(),
                                type.getResult(0));
}

struct WeightOpLowering : public ConvertOpToLLVMPattern<mf::WeightOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult
  matchAndRewrite(mf::WeightOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    // The runtime's entry that returns the data pointer of weight `id`.
    Type i64 = rewriter.getI64Type();
    FailureOr<LLVM::LLVMFuncOp> fn =
        runtimeFunction(rewriter, op, RuntimeFn::mfrt_weight);
    if (failed(fn))
      return rewriter.notifyMatchFailure(op, "mfrt_weight has a bad signature");
    Value id = LLVM::ConstantOp::create(rewriter, loc, i64,
                                        rewriter.getI64IntegerAttr(op.getId()));
    Value ptr =
        LLVM::CallOp::create(rewriter, loc, *fn, ValueRange{id}).getResult();
    Value desc = MemRefDescriptor::fromStaticShape(
        rewriter, loc, *getTypeConverter(), op.getType(), ptr);
    rewriter.replaceOp(op, desc);
    return success();
  }
};

/// mf.kv_rows: the runtime's pointer to the rows, in a descriptor of
/// [rows, heads, head_dim] with the identity layout.
struct KVRowsOpLowering : public ConvertOpToLLVMPattern<mf::KVRowsOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult
  matchAndRewrite(mf::KVRowsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    FailureOr<LLVM::LLVMFuncOp> fn =
        runtimeFunction(rewriter, op, RuntimeFn::mfrt_kv_rows_f32);
    if (failed(fn))
      return rewriter.notifyMatchFailure(
          op, "mfrt_kv_rows_f32 has a bad signature");
    MemRefType memrefType = op.getType();
    Type i64 = rewriter.getI64Type();
    auto constant = [&](int64_t v) -> Value {
      return LLVM::ConstantOp::create(rewriter, loc, i64,
                                      rewriter.getI64IntegerAttr(v));
    };
    Value ptr =
        LLVM::CallOp::create(rewriter, loc, *fn,
                             ValueRange{constant(op.getLayer()),
                                        constant(op.getTensor()),
                                        adaptor.getHeadOffset(),
                                        constant(memrefType.getDimSize(1))})
            .getResult();
    SmallVector<Value> sizes, strides;
    Value bytes;
    getMemRefDescriptorSizes(loc, memrefType, ValueRange{adaptor.getRows()},
                             rewriter, sizes, strides, bytes);
    Value desc = createMemRefDescriptor(loc, memrefType, ptr, ptr, sizes,
                                        strides, rewriter);
    rewriter.replaceOp(op, desc);
    return success();
  }
};

struct ConvertMFToLLVMPass
    : public meshfold::impl::ConvertMFToLLVMPassBase<ConvertMFToLLVMPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    LLVMTypeConverter converter(ctx);
    RewritePatternSet patterns(ctx);
    populateMFToLLVMConversionPatterns(converter, patterns);
    ConversionTarget target(*ctx);
    target.addIllegalOp<mf::WeightOp, mf::KVRowsOp>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

void meshfold::populateMFToLLVMConversionPatterns(LLVMTypeConverter &converter,
                                                  RewritePatternSet &patterns) {
  patterns.add<WeightOpLowering, KVRowsOpLowering>(converter);
}
