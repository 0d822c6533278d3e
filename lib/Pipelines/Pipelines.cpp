//===- Pipelines.cpp - meshfold pass pipelines ----------------------------===//

#include "meshfold/Pipelines/Pipelines.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/Linalg/Transforms/Passes.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace meshfold;

void meshfold::buildPartitionPipeline(OpPassManager &pm,
                                      const PartitionPipelineOptions &options) {
  if (options.hasPlanOptions()) {
    mf::MFSetPlanPassOptions plan;
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  plan.Field = options.Field;
#include "meshfold/Pipelines/PlanOptions.def"
    pm.addPass(mf::createMFSetPlanPass(plan));
  }
  pm.addPass(mf::createMFVerifyPlanPass());
  pm.addPass(mf::createMFZigzagCPPass());
  pm.addPass(mf::createMFDecodeKVPlacementPass());
  pm.addPass(mf::createMFShardTPPass());
  pm.addPass(mf::createMFInsertSPPass());
  pm.addPass(mf::createMFRingAttentionPass());
  pm.addPass(mf::createMFPassQAttentionPass());
  mf::MFFoldExpertsPassOptions fold;
  fold.mode = options.dispatch;
  pm.addPass(mf::createMFFoldExpertsPass(fold));
  mf::MFLastTokenHeadPassOptions head;
  head.promptLogprobs = options.promptLogprobs;
  pm.addPass(mf::createMFLastTokenHeadPass(head));
  pm.addPass(mf::createMFSplitPipelinePass());
  if (options.narrowLastLayer)
    pm.addPass(mf::createMFNarrowLastLayerPass());
  pm.addPass(mf::createMFFuseCollectivesPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void meshfold::buildLowerToBuffersPipeline(OpPassManager &pm,
                                           llvm::StringRef entry,
                                           llvm::StringRef weightDType,
                                           bool kernelLoops) {
  pm.addPass(mf::createMFVerifyPlanPass());
  ConvertMoEToRuntimePassOptions rt;
  rt.entryName = entry.str();
  rt.weightDType = weightDType.str();
  pm.addPass(createConvertMFToRuntimePass());
  pm.addPass(createConvertMoEToRuntimePass(rt));
  ConvertMoEToLinalgPassOptions linalg;
  linalg.groupExperts = true;
  linalg.fuseAttention = true;
  // A GPU block keeps its attention tiles in shared memory (48 KiB at most
  // without opting in): 32 x 32 tiles leave room for head dims up to 128.
  linalg.attentionTile = kernelLoops ? 32 : 64;
  pm.addPass(createConvertMoEToLinalgPass(linalg));
  pm.addPass(createConvertElementwiseToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // The runtime calls' reads of tensors, one per call again (CSE merged
  // them), so that bufferization keeps each tensor until its last call.
  pm.addNestedPass<func::FuncOp>(createMFBufferReadsAtUsePass());

  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::buildBufferDeallocationPipeline(pm);
}

void meshfold::buildLowerToCPUPipeline(OpPassManager &pm,
                                       const CPUPipelineOptions &options) {
  // --gpu-loops-on-cpu checks the CUDA pipeline's kernels: the same lowering.
  buildLowerToBuffersPipeline(pm, options.entry, options.weightDType,
                              /*kernelLoops=*/options.gpuLoops > 0);

  if (options.gpuLoops > 0) {
    // The CUDA pipeline's kernels as loop nests (blocks x threads, then the
    // sequential reductions), run in order by the CPU.
    addGPULoopNests(pm, options.gpuLoops, /*launches=*/false);
    // Run in sequence, a block loop's buffers must still be freed after
    // each block (the scope scf-to-cf drops).
    pm.addNestedPass<func::FuncOp>(createMFGPUScopeParallelAllocasPass());
  } else {
    // Buffers freed right after their last use, not at the end of the
    // function (where ownership-based deallocation puts them): the peak is
    // then one layer's live activations, not every layer's.
    pm.addNestedPass<func::FuncOp>(
        bufferization::createOptimizeAllocationLivenessPass());
    MFLinalgContractionKernelsPassOptions kernels;
    kernels.vectorBits = options.vectorBits;
    kernels.batchInvariant = options.batchInvariant;
    pm.addNestedPass<func::FuncOp>(
        createMFLinalgContractionKernelsPass(kernels));
    // Copies into strided views (a concatenation's parts) as linalg ops,
    // not calls of the runner library's memrefCopy.
    pm.addNestedPass<func::FuncOp>(createMFStridedCopiesToLinalgPass());
    // The rest (gathers, SiLU, norms) in blocks of rows over the threads.
    pm.addNestedPass<func::FuncOp>(createMFLinalgParallelRowsPass());
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
    // exp as arithmetic, so that LLVM vectorizes the softmax and SiLU loops.
    pm.addNestedPass<func::FuncOp>(createMFMathPolynomialExpPass());
    // Parallel loops (tiles of attention, blocks of the contractions) run
    // on the OpenMP threads the program starts (its --threads).
    pm.addNestedPass<func::FuncOp>(createForallToParallelLoopPass());
    pm.addPass(createConvertSCFToOpenMPPass());
    // Inlines the memref.alloca_scope of each parallel body (they hold no
    // alloca), which could not hold the blocks of scf-to-cf.
    pm.addPass(createCanonicalizerPass());
  }
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  addHostToLLVM(pm, /*gpuLaunches=*/false);
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

void meshfold::registerMeshfoldPipelines() {
  PassPipelineRegistration<PartitionPipelineOptions>(
      "mf-partition",
      "Partition a global moe model into the per-rank SPMD program of a plan",
      buildPartitionPipeline);
  PassPipelineRegistration<CPUPipelineOptions>(
      "mf-lower-to-cpu",
      "Lower a one-rank moe model to the LLVM dialect for the CPU target",
      buildLowerToCPUPipeline);
  PassPipelineRegistration<CUDAPipelineOptions>(
      "mf-lower-to-cuda",
      "Lower a one-rank or partitioned moe model to GPU kernels (NVVM, "
      "embedded as gpu.binary) and host code in the LLVM dialect for the "
      "CUDA target",
      buildLowerToCUDAPipeline);
}
