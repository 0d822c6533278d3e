//===- CUDAPipeline.cpp - the CUDA target pipeline ------------------------===//
//
// moe model -> GPU kernels through upstream MLIR:
//
//   contractions -> mf-gpu-tile-contractions (block tiles: operand slabs
//   in shared memory, register tiles per thread, as thread phases)
//   attention's forall over (head, query tile) -> mf-gpu-forall-to-phases
//   (tile buffers in shared memory, each tile op a thread phase)
//   -> mf-gpu-phases-to-launch (gpu.launch, workgroup memory, barriers);
//   other linalg on buffers -> scf.parallel (parallel dims) + scf.for
//   (reductions) -> mf-gpu-tile-parallel-loops (blocks x threads)
//   -> gpu-map-parallel-loops -> convert-parallel-loops-to-gpu (gpu.launch)
//   -> gpu-kernel-outlining -> nvvm-attach-target -> convert-gpu-to-nvvm
//   -> gpu-module-to-binary; host: device memory for the buffers only kernels
//   use, managed memory for the rest, gpu-to-llvm (mgpu* calls).
//
// Each reduction dim stays a sequential loop inside the thread that owns the
// output element, so no two threads accumulate into the same element:
// softmax, RMSNorm, the router's top-k and the attention LSE merge keep the
// exact (max-subtracted) arithmetic of the CPU path.
//
// Weights are stored as bf16 by default (weight-dtype=bf16; f32 on request):
// kernels load 16-bit weight elements and widen them to f32 in registers, so
// accumulation and activations stay f32.
//
// Tensor cores: the block tiles stage f32 slabs (bf16 weights widened on
// the way in); nvgpu/wgmma needs bf16/f16 tiles of both operands in shared
// memory behind TMA descriptors and async copies, which this pipeline does
// not do yet. The kernels use CUDA cores in f32 (the contractions with
// shared-memory block tiles and register tiles).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Pipelines/CUDAPipeline.h"
#include "meshfold/Config.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Pipelines/Common.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

llvm::StringRef meshfold::getConfiguredCUDAToolkitPath() {
  return MESHFOLD_HAVE_CUDA_TOOLKIT ? MESHFOLD_CUDA_ROOT : "";
}

void meshfold::buildLowerToCUDAPipeline(OpPassManager &pm,
                                        const CUDAPipelineOptions &options) {
  // Kernels are named after the moe/mf op they come from.
  pm.addPass(createMFGPUNameLocationsPass());
  buildLowerToBuffersPipeline(pm, options.entry, options.weightDType,
                              /*kernelLoops=*/true);

  // The linear layers with bf16 weights first: cuBLASLt calls, or (wgmma)
  // TMA + warpgroup MMA kernels (gpu.launch).
  if (options.gemmBackend == "cublaslt")
    pm.addPass(createMFGPULibraryContractionsPass());
  else if (options.wgmma)
    pm.addNestedPass<func::FuncOp>(createMFGPUWgmmaContractionsPass());
  // Linalg -> parallel loops -> blocks x threads -> gpu.launch.
  addGPULoopNests(pm, options.threadsPerBlock, /*launches=*/true);
  pm.addNestedPass<func::FuncOp>(createConvertParallelLoopToGpuPass());
  // TMA descriptors (host: mgpuTensorMapEncodeTiledMemref), mbarriers and
  // TMA copies (kernels) -> NVVM, before the kernels leave their functions
  // (as upstream's GPU pipeline does), so both sides agree on the
  // descriptor's type.
  if (options.wgmma && options.gemmBackend != "cublaslt")
    pm.addPass(createConvertNVGPUToNVVMPass());
  MFGPUNameKernelsPassOptions names;
  names.moduleName = options.entry + "_kernels";
  pm.addPass(createMFGPUNameKernelsPass(names));
  pm.addPass(createLowerAffinePass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // Kernels out of the host functions; host buffers become managed memory,
  // except those only kernels use, which stay in device memory.
  pm.addPass(createGpuLaunchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(createMFGPUHostSharedMemoryPass());
  pm.addPass(createMFGPUDeviceMemoryPass());

  // Kernels: NVVM for the target chip.
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(memref::createExpandStridedMetadataPass());
  kernels.addPass(createLowerAffinePass());
  kernels.addPass(createConvertGpuOpsToNVVMOps());
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());

  // Host: the CPU pipeline's lowering plus gpu-to-llvm (mgpu* calls).
  pm.addNestedPass<func::FuncOp>(createSCFToControlFlowPass());
  pm.addNestedPass<func::FuncOp>(memref::createExpandStridedMetadataPass());
  pm.addNestedPass<func::FuncOp>(createLowerAffinePass());
  addHostToLLVM(pm, /*gpuLaunches=*/true);

  // Kernels -> PTX / cubin / fatbin, embedded as gpu.binary.
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = options.format;
  binary.toolkitPath = options.toolkit.empty()
                           ? getConfiguredCUDAToolkitPath().str()
                           : std::string(options.toolkit);
  pm.addPass(createGpuModuleToBinaryPass(binary));
}
void meshfold::registerLowerToCUDAPipeline() {
  PassPipelineRegistration<CUDAPipelineOptions>(
      "mf-lower-to-cuda",
      "Lower a one-rank or partitioned moe model to GPU kernels (NVVM, "
      "embedded as gpu.binary) and host code in the LLVM dialect for the "
      "CUDA target",
      buildLowerToCUDAPipeline);
}
