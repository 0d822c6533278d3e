//===- Run.h - The inputs and the per-rank run ------------------*- C++ -*-===//
//
// main reads the inputs once (loadProgram); every rank (mfrt_launch) then
// runs rankMain: it loads its weights and runs the requests the balancer
// gave its DP replica (Run.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_RUN_H
#define MFRT_PROGRAM_RUN_H

#include <string>

namespace mfrt {

struct Options;
struct Program;

/// Reads the embedded manifest, the prompts and the weights file (checked
/// against the manifest) into `prog`, and makes room for the outputs.
void loadProgram(const Options &options, Program &prog);
/// The number of ranks (devices) of `plan`.
int ranksOfPlan(const std::string &plan);
/// --report traffic: a row of counters per device of `plan`.
void prepareTraffic(Program &prog, const std::string &plan);
/// The body of every rank (mfrt_launch): loads its weights, runs its
/// requests and hands its outputs to rank 0.
int rankMain(void *);

} // namespace mfrt

#endif // MFRT_PROGRAM_RUN_H
