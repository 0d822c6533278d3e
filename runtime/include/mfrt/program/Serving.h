//===- Serving.h - The generation loop's side of serving --------*- C++ -*-===//
//
// A serving program (--serve) runs the same generation loop as a batch, with
// requests that arrive while it runs: at each call rank 0 asks the server
// (Program::source) for an Intake, which every rank receives (ServeGroups),
// so that all decide the next calls alike (Serving.cpp). The request tables
// (Program::requests, outputs, served) have a fixed number of slots, which
// the server reuses once every rank is done with a request.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_SERVING_H
#define MFRT_PROGRAM_SERVING_H

#include "mfrt/program/Program.h"

#include <map>
#include <string>
#include <vector>

namespace mfrt {

struct Options;

/// How the Intake reaches a serving rank: rank 0 shares it with the ranks
/// of the first pipeline stage (an all-reduce over `stage`, every axis but
/// pp; -1 for one rank), and each stage sends it on to the next (`next`,
/// received from `previous`; -1 at the ends), as the pipeline's activations
/// go: a collective over all the ranks at the top of every call would wait
/// on later stages that are still sharing an earlier call's tokens.
struct ServeGroups {
  int64_t stage = -1;
  int previous = -1, next = -1;
  /// The rank's DP replica.
  int64_t replica = 0;
  /// Rank 0: its decode steps the server has heard of (for /metrics).
  size_t stepsSeen = 0;
};

/// The serving groups of the calling rank of DP replica `replica`.
ServeGroups servingGroups(const Program &prog,
                          std::map<std::string, int64_t> &groups,
                          int64_t replica);

/// An Intake as a fixed-size message of floats (slots and replicas are
/// below 2^24), and back.
std::vector<float> encodeIntake(const Intake &in);
Intake decodeIntake(const std::vector<float> &msg);

/// --serve against the program and the other flags: what serving does not
/// do (yet) fails in one line naming the flag.
void checkServing(const Options &options, const Program &prog);

/// Gives the request tables `slots` empty slots.
void prepareServing(Program &prog, int64_t slots);
/// Puts a request in slot `slot` (rank 0, before the Intake that announces
/// it): its prompt, its settings and fresh outputs.
void placeRequest(Program &prog, int64_t slot, std::vector<int64_t> prompt,
                  const Generation &g);

} // namespace mfrt

#endif // MFRT_PROGRAM_SERVING_H
