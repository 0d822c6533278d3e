//===- PCH.cpp - The source MeshfoldPCH precompiles PCH.h with -----------===//
//
// Empty: CMake compiles PCH.h for this target, and the compiler's other
// targets reuse that precompiled header (meshfold_use_pch).
//
//===----------------------------------------------------------------------===//
