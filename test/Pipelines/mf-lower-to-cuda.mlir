// REQUIRES: cuda-toolkit
// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir '--mf-lower-to-cuda=chip=sm_90a features=+ptx80 format=isa' -o %t.ll.mlir
// RUN: FileCheck %s < %t.ll.mlir
// RUN: FileCheck %s --check-prefix=GONE < %t.ll.mlir
// RUN: FileCheck %s --check-prefix=DECL < %t.ll.mlir

// The one-rank model lowers to host code in the LLVM dialect plus one
// gpu.binary holding every kernel as PTX for sm_90a. Buffers only kernels
// use are device memory allocated on the (rank's) stream:
// mgpuMemAlloc(bytes, stream, isHostShared = 0); the buffers the host or
// the runtime reads are managed memory: mgpuMemAlloc(bytes, null stream,
// isHostShared = 1). Both are freed with mgpuMemFree; launches are
// synchronous gpu.launch_func ops (the LLVM IR translation turns them into
// mgpuLaunchKernel calls).

// DECL-DAG: llvm.func @mgpuMemAlloc(i64, !llvm.ptr, i8) -> !llvm.ptr
// DECL-DAG: llvm.func @mgpuMemFree(!llvm.ptr, !llvm.ptr)
// DECL-DAG: llvm.func @mgpuStreamCreate() -> !llvm.ptr
// DECL-DAG: llvm.func @mgpuStreamSynchronize(!llvm.ptr)
// CHECK: llvm.func @prefill(
// CHECK-DAG: %[[SHARED:.+]] = llvm.mlir.constant(1 : i8) : i8
// CHECK-DAG: %[[DEVICE:.+]] = llvm.mlir.constant(0 : i8) : i8
// CHECK-DAG: %[[NULL:.+]] = llvm.mlir.zero : !llvm.ptr
// CHECK: llvm.call @mgpuMemAlloc(%{{.*}}, %[[NULL]], %[[SHARED]])
// CHECK: gpu.launch_func @prefill_kernels::@positions_0 blocks in
// CHECK: llvm.call @mfrt_weight
// CHECK: %[[STREAM:.+]] = llvm.call @mgpuStreamCreate()
// CHECK: llvm.call @mgpuMemAlloc(%{{.*}}, %[[STREAM]], %[[DEVICE]])
// CHECK: gpu.launch_func @prefill_kernels::@embed_1 blocks in
// CHECK: llvm.call @mfrt_kv_cache_f32
// CHECK: llvm.call @mfrt_logits_f32
// CHECK: llvm.call @mgpuMemFree
// CHECK: llvm.call @mgpuStreamSynchronize
// CHECK: gpu.binary @prefill_kernels [#gpu.object<#nvvm.target<chip = "sm_90a", features = "+ptx80">, {{.*}}assembly = "{{.*}}.target sm_90a
// CHECK: llvm.mlir.global external constant @__mf_manifest("meshfold-manifest 1\0Aentry prefill

// GONE-NOT: gpu.module
// GONE-NOT: gpu.alloc
// GONE-NOT: gpu.dealloc
// GONE-NOT: llvm.call @malloc
// GONE-NOT: llvm.call @free
// GONE-NOT: = moe.
// GONE-NOT: linalg.
// GONE-NOT: memref.
// GONE-NOT: scf.
// GONE-NOT: mf.weight
