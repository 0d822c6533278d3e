//===- Common.h - pieces of every pipeline ----------------------*- C++ -*-===//
//
// The parts the target pipelines share: the front that lowers a moe model to
// buffers, the GPU loop nests (the CUDA pipeline's kernels, and the CPU
// pipeline's check of them) and the host code's lowering to LLVM. The
// target pipelines (CPUPipeline.h, CUDAPipeline.h) build on these; nothing
// here calls a target pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_COMMON_H
#define MESHFOLD_PIPELINES_COMMON_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace meshfold {

/// The front shared by the CPU and CUDA targets: verify the plan, bind
/// weights (stored as `weightDType`, f32 or bf16), outputs and collectives to
/// the runtime, lower the moe ops to linalg, bufferize (function boundaries
/// included) and insert deallocations. The experts are grouped by expert
/// (each expert's rows multiplied by its weights at once: block-tiled
/// contractions on both targets, in a host loop over the experts on the
/// GPU), and attention is a fused online softmax over tiles of queries and
/// keys. `kernelLoops` selects the GPU kernels' tiles: 32 x 32 (a block's
/// tiles fit its shared memory), otherwise 64 x 64 (docs/design.md, section
/// 9). A decode step's attention reads the K/V cache in place through key
/// tiles of at most the attention tile; `batchInvariant` starts a request's
/// key tiles at fixed places of its own rows (the manifest's history_tile),
/// so that they do not depend on the other requests of its step.
void buildLowerToBuffersPipeline(mlir::OpPassManager &pm, llvm::StringRef entry,
                                 llvm::StringRef weightDType = "f32",
                                 bool kernelLoops = false,
                                 bool batchInvariant = false);

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

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_COMMON_H
