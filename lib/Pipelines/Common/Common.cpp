//===- Common.cpp - pieces of every pipeline ------------------------------===//

#include "meshfold/Pipelines/Common.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/Linalg/Transforms/Passes.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace meshfold;

void meshfold::buildLowerToBuffersPipeline(OpPassManager &pm,
                                           llvm::StringRef entry,
                                           llvm::StringRef weightDType,
                                           bool kernelLoops,
                                           bool batchInvariant) {
  // A GPU block keeps its attention tiles in shared memory (48 KiB at most
  // without opting in): 32 x 32 tiles leave room for head dims up to 128.
  int64_t attentionTile = kernelLoops ? 32 : 64;
  pm.addPass(mf::createMFVerifyPlanPass());
  // A decode step's LM head on the rows that choose a token, partitioned or
  // not (a TP group's split head has its rows taken already).
  pm.addPass(mf::createMFStepHeadRowsPass());
  ConvertMoEToRuntimePassOptions rt;
  rt.entryName = entry.str();
  rt.weightDType = weightDType.str();
  rt.keyTile = attentionTile;
  if (batchInvariant)
    rt.historyTile = attentionTile;
  pm.addPass(createConvertMFToRuntimePass());
  pm.addPass(createConvertMoEToRuntimePass(rt));
  ConvertMoEToLinalgPassOptions linalg;
  linalg.groupExperts = true;
  linalg.fuseAttention = true;
  linalg.attentionTile = attentionTile;
  pm.addPass(createConvertMoEToLinalgPass(linalg));
  pm.addPass(createConvertElementwiseToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // The runtime calls' reads of tensors, one per call again (CSE merged
  // them), so that bufferization keeps each tensor until its last call.
  pm.addNestedPass<func::FuncOp>(createMFBufferReadsAtUsePass());
  // Each op that writes a fill gets its own (CSE merged them): bufferization
  // then fills each op's buffer in place, instead of keeping one filled
  // buffer for the whole function and copying it for every op.
  pm.addNestedPass<func::FuncOp>(createMFFillsAtUsePass());

  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::buildBufferDeallocationPipeline(pm);
}

void meshfold::addGPULoopNests(OpPassManager &pm, int64_t threadsPerBlock,
                               bool launches) {
  MFGPUTileContractionsPassOptions contractions;
  contractions.threadsPerBlock = threadsPerBlock;
  pm.addNestedPass<func::FuncOp>(createMFGPUTileContractionsPass(contractions));
  MFGPUForallToPhasesPassOptions tiles;
  tiles.threadsPerBlock = threadsPerBlock;
  pm.addNestedPass<func::FuncOp>(createMFGPUForallToPhasesPass(tiles));
  if (launches)
    pm.addNestedPass<func::FuncOp>(createMFGPUPhasesToLaunchPass());
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
  pm.addNestedPass<func::FuncOp>(createCanonicalizerPass());
  MFGPUTileParallelLoopsPassOptions tile;
  tile.threadsPerBlock = threadsPerBlock;
  pm.addNestedPass<func::FuncOp>(createMFGPUTileParallelLoopsPass(tile));
  GpuMapParallelLoopsPassOptions map;
  map.mappingPolicyStr = "innermost-first";
  pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass(map));
}

void meshfold::addHostToLLVM(OpPassManager &pm, bool gpuLaunches) {
  pm.addPass(createConvertMFToLLVMPass());
  ConvertVectorToLLVMPassOptions vectorToLLVM;
  // The contraction kernels' packing transposes squares of vectors: 16 x 16
  // f32 (AVX-512) in the 64-shuffle unpack/permute sequence (shuffle1d
  // leaves LLVM one 256-lane shuffle, lowered to ~4x the instructions);
  // other shapes as shuffle1d.
  vectorToLLVM.vectorTransposeLowering =
      vector::VectorTransposeLowering::Shuffle16x16;
  // The CPU kernels' bf16 dot products (x86vector.avx512.dot).
  vectorToLLVM.x86Vector = true;
  pm.addPass(createConvertVectorToLLVMPass(vectorToLLVM));
  if (gpuLaunches)
    pm.addPass(createGpuToLLVMConversionPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}
