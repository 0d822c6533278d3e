//===- Pipelines.cpp - meshfold pass pipelines ----------------------------===//

#include "meshfold/Pipelines/Pipelines.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void meshfold::buildLowerToCPUPipeline(OpPassManager &pm,
                                       const CPUPipelineOptions &options) {
  pm.addPass(mf::createMFVerifyPlanPass());
  ConvertMoEToRuntimePassOptions rt;
  rt.entryName = options.entry;
  pm.addPass(createConvertMoEToRuntimePass(rt));
  pm.addPass(createConvertMoEToLinalgPass());
  pm.addPass(createConvertElementwiseToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::buildBufferDeallocationPipeline(pm);

  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createConvertMFToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void meshfold::registerMeshfoldPipelines() {
  PassPipelineRegistration<CPUPipelineOptions>(
      "mf-lower-to-cpu",
      "Lower a one-rank moe model to the LLVM dialect for the CPU target",
      buildLowerToCPUPipeline);
}
