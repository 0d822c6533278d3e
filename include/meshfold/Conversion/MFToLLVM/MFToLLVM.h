//===- MFToLLVM.h - mf runtime-binding ops to LLVM --------------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_MFTOLLVM_MFTOLLVM_H
#define MESHFOLD_CONVERSION_MFTOLLVM_MFTOLLVM_H

namespace mlir {
class LLVMTypeConverter;
class RewritePatternSet;
} // namespace mlir

namespace meshfold {
/// Patterns lowering mf runtime-binding ops (mf.weight) to LLVM calls.
void populateMFToLLVMConversionPatterns(mlir::LLVMTypeConverter &converter,
                                        mlir::RewritePatternSet &patterns);
} // namespace meshfold

#endif // MESHFOLD_CONVERSION_MFTOLLVM_MFTOLLVM_H
