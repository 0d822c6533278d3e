//===- CPUPipeline.cpp - the CPU target pipeline --------------------------===//

#include "meshfold/Pipelines/CPUPipeline.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/Linalg/Transforms/Passes.h"
#include "meshfold/Pipelines/Common.h"

#include "mlir/Conversion/Passes.h"
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

void meshfold::buildLowerToCPUPipeline(OpPassManager &pm,
                                       const CPUPipelineOptions &options) {
  // --gpu-loops-on-cpu checks the CUDA pipeline's kernels: the same lowering.
  buildLowerToBuffersPipeline(pm, options.entry, options.weightDType,
                              /*kernelLoops=*/options.gpuLoops > 0,
                              options.batchInvariant);

  if (options.gpuLoops > 0) {
    // The CUDA pipeline's kernels as loop nests (blocks x threads, then the
    // sequential reductions), run in order by the CPU.
    addGPULoopNests(pm, options.gpuLoops, /*launches=*/false);
    // Run in sequence, a block loop's buffers must still be freed after
    // each block (the scope scf-to-cf drops).
    pm.addNestedPass<func::FuncOp>(createMFGPUScopeParallelAllocasPass());
    pm.addPass(createMFOutlineParallelLoopsPass());
  } else {
    // Buffers freed right after their last use, not at the end of the
    // function (where ownership-based deallocation puts them): the peak is
    // then one layer's live activations, not every layer's.
    pm.addNestedPass<func::FuncOp>(
        bufferization::createOptimizeAllocationLivenessPass());
    // ... and allocated right before their first use, not where their
    // tensor.empty stood.
    pm.addNestedPass<func::FuncOp>(createMFSinkAllocsPass());
    MFLinalgContractionKernelsPassOptions kernels;
    kernels.vectorBits = options.vectorBits;
    kernels.batchInvariant = options.batchInvariant;
    kernels.bf16Dot = options.bf16Dot;
    pm.addNestedPass<func::FuncOp>(
        createMFLinalgContractionKernelsPass(kernels));
    // Copies into strided views (a concatenation's parts) as linalg ops,
    // not calls of the runner library's memrefCopy.
    pm.addNestedPass<func::FuncOp>(createMFStridedCopiesToLinalgPass());
    // The rest (gathers, SiLU, norms) in blocks of rows over the threads,
    // when there are at least 8192 elements: a fork and join of the OpenMP
    // threads costs about 2 us, more than a decode step's row of 1024 or
    // 2816 takes on one thread. A 1-stream step of the bench model starts
    // 52 parallel regions instead of 165, and spends 13.8% of its samples in
    // the OpenMP runtime instead of 15.7% (the step's time moved within the
    // noise of this 2-core machine).
    MFLinalgParallelRowsPassOptions rows;
    rows.minElements = 8192;
    pm.addNestedPass<func::FuncOp>(createMFLinalgParallelRowsPass(rows));
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
    // exp as arithmetic, so that LLVM vectorizes the softmax and SiLU loops.
    pm.addNestedPass<func::FuncOp>(createMFMathPolynomialExpPass());
    // Parallel loops (tiles of attention, blocks of the contractions) run
    // on the OpenMP threads the program starts (its --threads).
    pm.addNestedPass<func::FuncOp>(createForallToParallelLoopPass());
    // Each distinct kernel once (a stage's layers repeat them).
    pm.addPass(createMFOutlineParallelLoopsPass());
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

void meshfold::registerLowerToCPUPipeline() {
  PassPipelineRegistration<CPUPipelineOptions>(
      "mf-lower-to-cpu",
      "Lower a one-rank moe model to the LLVM dialect for the CPU target",
      buildLowerToCPUPipeline);
}
