//===- Weights.h - The checkpoint and the slices ----------------*- C++ -*-===//
//
// The weights file is checked against the manifest before any rank starts;
// each rank then loads only its slices of the weights (Weights.cpp), with a
// progress line on a terminal.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_WEIGHTS_H
#define MFRT_PROGRAM_WEIGHTS_H

#include "meshfold/Support/Manifest.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mfrt {

class Checkpoint;
struct ProgramRank;

/// Checks the dtype and shape of every tensor the model reads that the
/// checkpoint holds.
void checkWeights(const meshfold::Manifest &m, const Checkpoint &file);
/// --random-weights: every tensor the manifests read, generated from
/// `seed` in the storage type the manifest names (mfrt/io/RandomWeights.h).
std::unique_ptr<Checkpoint>
generateWeights(const std::vector<const meshfold::Manifest *> &manifests,
                uint64_t seed);
/// The runtime group of `axes` for this rank, made once per rank.
int64_t groupOf(std::map<std::string, int64_t> &cache, const std::string &axes);
/// Loads this rank's slice of every weight, in the storage type the
/// manifest names for it.
void loadWeights(ProgramRank &rs, std::map<std::string, int64_t> &groups);
/// On a terminal: once the ranks' loading has taken a second, a line
/// "loading weights: 42% (600 MB of 1.4 GB)" updated in place until it is
/// done or `stop` is set.
void showLoadProgress(std::atomic<bool> &stop);
/// Whether the progress line is on the terminal, unfinished (an error then
/// starts a new line).
bool progressLineOpen();

} // namespace mfrt

#endif // MFRT_PROGRAM_WEIGHTS_H
