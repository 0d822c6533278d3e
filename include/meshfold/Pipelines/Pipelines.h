//===- Pipelines.h - meshfold pass pipelines --------------------*- C++ -*-===//
//
// Pipelines live here, as build...Pipeline functions, so that the compile
// driver stays thin and every pipeline can be run from meshfold-opt.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_PIPELINES_H
#define MESHFOLD_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace meshfold {

struct CPUPipelineOptions
    : public mlir::PassPipelineOptions<CPUPipelineOptions> {
  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("Name of the entry function"),
                            llvm::cl::init("prefill")};
  Option<std::string> weightDType{
      *this, "weight-dtype",
      llvm::cl::desc("Storage type of the weights: f32 (default) or bf16; "
                     "computation stays f32"),
      llvm::cl::init("f32")};
  Option<int64_t> gpuLoops{
      *this, "gpu-loops",
      llvm::cl::desc(
          "A check of the CUDA target's loop decomposition: lower linalg "
          "through the CUDA pipeline's parallel loops and block x thread "
          "tiling with this many threads per block, and run those loop "
          "nests sequentially on the CPU (0: plain loops, the default)"),
      llvm::cl::init(0)};
  Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Width of the host's vector registers in bits (128, 256 "
                     "or 512) the contraction kernels are tiled for"),
      llvm::cl::init(256)};
  Option<bool> batchInvariant{
      *this, "batch-invariant",
      llvm::cl::desc("Contractions sum in one order whatever the row count: "
                     "a row's result does not depend on the rows it comes "
                     "with"),
      llvm::cl::init(false)};
};

struct CUDAPipelineOptions
    : public mlir::PassPipelineOptions<CUDAPipelineOptions> {
  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("Name of the entry function"),
                            llvm::cl::init("prefill")};
  Option<std::string> weightDType{
      *this, "weight-dtype",
      llvm::cl::desc("Storage type of the weights: bf16 (default) or f32; "
                     "computation stays f32"),
      llvm::cl::init("bf16")};
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("GPU architecture of the kernels"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features (ISA version)"),
                               llvm::cl::init("+ptx80")};
  Option<unsigned> optLevel{*this, "opt-level",
                            llvm::cl::desc("Kernel optimisation level 0-3"),
                            llvm::cl::init(2)};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Kernel binaries: isa (PTX), bin (cubin, needs "
                     "ptxas) or fatbin (cubin and PTX, needs fatbinary)"),
      llvm::cl::init("isa")};
  Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit root (libdevice, ptxas); default: the "
                     "one found when meshfold was configured"),
      llvm::cl::init("")};
  Option<int64_t> threadsPerBlock{
      *this, "threads-per-block",
      llvm::cl::desc("Threads per block of the elementwise and reduction "
                     "kernels"),
      llvm::cl::init(256)};
};

struct PartitionPipelineOptions
    : public mlir::PassPipelineOptions<PartitionPipelineOptions> {
  // tp, cp, dp, pp, ep, order and gpus-per-node.
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  Option<Type> Field{*this, Flag, llvm::cl::desc(Description),                 \
                     llvm::cl::init(Default)};
#include "meshfold/Pipelines/PlanOptions.def"
  Option<bool> promptLogprobs{
      *this, "prompt-logprobs",
      llvm::cl::desc("Also output the logits of every prompt position"),
      llvm::cl::init(false)};
  Option<bool> narrowLastLayer{
      *this, "narrow-last-layer",
      llvm::cl::desc("Compute the last layer's attention and MoE only for "
                     "the rows that reach an output (mf-narrow-last-layer)"),
      llvm::cl::init(true)};
  Option<std::string> dispatch{
      *this, "dispatch",
      llvm::cl::desc("EP dispatch: auto, flat or hierarchical"),
      llvm::cl::init("auto")};

  /// True when any plan option was given (the plan then replaces the
  /// module's).
  bool hasPlanOptions() const {
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  if (Field.hasValue())                                                        \
    return true;
#include "meshfold/Pipelines/PlanOptions.def"
    return false;
  }
};

/// Global moe model -> per-rank SPMD IR with mf communication ops, for the
/// plan on the module or given by the options: verify the plan, then zigzag
/// CP, TP sharding, SP, ring attention, expert folding, the last-token head,
/// pipeline stages, the last layer's narrowing and collective fusion.
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            const PartitionPipelineOptions &options);

/// The front shared by the CPU and CUDA targets: verify the plan, bind
/// weights (stored as `weightDType`, f32 or bf16), outputs and collectives to
/// the runtime, lower the moe ops to linalg, bufferize (function boundaries
/// included) and insert deallocations. The experts are grouped by expert
/// (each expert's rows multiplied by its weights at once: block-tiled
/// contractions on both targets, in a host loop over the experts on the
/// GPU), and attention is a fused online softmax over tiles of queries and
/// keys. `kernelLoops` selects the GPU kernels' tiles: 32 x 32 (a block's
/// tiles fit its shared memory), otherwise 64 x 64 (docs/design.md, section
/// 9).
void buildLowerToBuffersPipeline(mlir::OpPassManager &pm, llvm::StringRef entry,
                                 llvm::StringRef weightDType = "f32",
                                 bool kernelLoops = false);

/// moe model (one rank) -> LLVM dialect for the CPU target: verify the plan,
/// bind weights and outputs to the runtime, lower to linalg, bufferize,
/// lower to loops and to LLVM.
void buildLowerToCPUPipeline(mlir::OpPassManager &pm,
                             const CPUPipelineOptions &options);

/// moe model (one rank or partitioned) -> LLVM dialect for the CUDA target:
/// the front of the CPU pipeline (plan check, runtime binding, linalg,
/// bufferization), then every linalg op becomes a GPU kernel (parallel dims
/// over blocks and threads, reduction dims sequential in each thread), host
/// buffers become managed memory, kernels are compiled for `chip` through
/// NVVM into `gpu.binary` objects and the host code calls the mgpu* runtime
/// ABI.
void buildLowerToCUDAPipeline(mlir::OpPassManager &pm,
                              const CUDAPipelineOptions &options);

/// Bufferized linalg -> the kernels' loop nests: contractions as block
/// tiles of `threadsPerBlock` threads that stage operands in block memory
/// and accumulate register tiles, attention's forall over (head, query
/// tile) as a block per iteration with its tiles in block memory (thread
/// phases; with `launches`, already gpu.launch kernels with workgroup
/// memory and barriers), every other op
/// as parallel loops tiled into blocks of at most `threadsPerBlock` threads
/// (reductions sequential in each thread) and mapped to GPU blocks and
/// threads (scf.parallel with mapping attributes, before they become
/// gpu.launch).
void addGPULoopNests(mlir::OpPassManager &pm, int64_t threadsPerBlock,
                     bool launches);

/// Host code (func/cf/arith/math/memref and the runtime's mf ops; with
/// `gpuLaunches`, gpu.launch_func and gpu.alloc as mgpu* calls) -> the LLVM
/// dialect: the common end of the CPU and CUDA pipelines.
void addHostToLLVM(mlir::OpPassManager &pm, bool gpuLaunches);

/// The CUDA toolkit root that the build found ("" when none).
llvm::StringRef getConfiguredCUDAToolkitPath();

/// Registers the pipelines with the pass registry (for meshfold-opt).
void registerMeshfoldPipelines();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_PIPELINES_H
