//===- Outputs.h - The requests' outputs: gathering and writing -*- C++ -*-===//
//
// The outputs of the requests, which the ranks write into the Program's
// RequestOutputs (Outputs.cpp): made room for, collected by rank 0 in a
// multi-process run (with the traffic and load figures and the token
// trace), checked and written; and the reports made of them.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_OUTPUTS_H
#define MFRT_PROGRAM_OUTPUTS_H

namespace mfrt {

struct Options;
struct Program;
class SafetensorsWriter;

/// One empty RequestOutput per request.
void allocateOutputs(Program &prog);
/// Multi-process runs: rank 0 collects the other processes' outputs, token
/// trace and traffic counters; the other ranks send theirs.
void collectOutputs(Program &prog);
void collectTrace(Program &prog);
void collectTraffic(Program &prog);
/// --report load: rank 0 gathers every rank's load figures (under MPI), and
/// prints them.
void collectLoads(Program &prog);
/// --report routing: every rank's routing counters to rank 0 (collective).
void collectRouting(Program &prog);
void printLoadReport(const Program &prog);
/// Checks that every output was written and adds it to `writer`; prints
/// each request's next token unless `quiet`.
void addOutputs(const Program &prog, SafetensorsWriter &writer, bool quiet);
/// --report decode: one line per request, the rows its decode steps
/// computed and read.
void printDecodeReport(const Program &prog);
/// --out-jsonl: one line per request, written whole or not at all.
void writeJsonlResults(const Options &options, const Program &prog);

} // namespace mfrt

#endif // MFRT_PROGRAM_OUTPUTS_H
