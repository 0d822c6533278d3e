//===- RandomWeights.h - Deterministic generated weights --------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Weights generated from a seed and each tensor's name, with no checkpoint:
/// what `meshfold-gen-weights` writes, and what an emitted program loads
/// with `--random-weights SEED` (benchmarks of models too large to carry,
/// such as one Mixtral layer's 11 GB of experts). A tensor's values depend
/// only on the seed and its name, so the same weight gets the same values in
/// any model that names it, and a program given `--random-weights S` computes
/// what it computes on `meshfold-gen-weights --seed S`'s file of the same
/// dtype.
///
/// No LLVM dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_RANDOMWEIGHTS_H
#define MFRT_IO_RANDOMWEIGHTS_H

#include "mfrt/io/Checkpoint.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mfrt {

/// The \p count values of tensor \p name with \p seed: norms ("...norm.weight")
/// uniform in [0.9, 1.1), everything else uniform in [-s, s) with s =
/// 1/sqrt(last dim) (the embedding: 1), so activations stay O(1).
void randomWeightValues(const std::string &name, int64_t lastDim, int64_t count,
                        uint64_t seed, float *out);

/// The bytes of tensor \p name of \p shape as \p dtype (F32 or BF16, rounded
/// to nearest even), resized to fit.
void randomWeightBytes(const std::string &name,
                       const std::vector<int64_t> &shape, DType dtype,
                       uint64_t seed, std::vector<uint8_t> &bytes);

/// One tensor of a generated checkpoint.
struct RandomTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// A checkpoint holding \p tensors (F32 or BF16), generated in memory (an
/// anonymous file, filled by \p threads threads) and named \p label in
/// errors and reports. On failure returns null and sets \p error.
std::unique_ptr<Checkpoint>
randomCheckpoint(const std::vector<RandomTensor> &tensors, uint64_t seed,
                 const std::string &label, unsigned threads,
                 std::string *error);

} // namespace mfrt

#endif // MFRT_IO_RANDOMWEIGHTS_H
