//===- Reports.h - The traffic and token-trace reports ----------*- C++ -*-===//
//
// --report traffic and --trace-token's travel log (Reports.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_REPORTS_H
#define MFRT_PROGRAM_REPORTS_H

#include <string>

namespace mfrt {

struct Program;

/// --report traffic: measured bytes per GPU and layer beside the analytic
/// figures of `plan`.
void printTraffic(const Program &prog, const std::string &plan);
/// --trace-token: the travel log (and --trace-svg's map).
void reportTrace(const Program &prog, const std::string &plan);
/// --report routing and --routing-json need a model with experts and a
/// program with expert parallelism (the rows are counted at the dispatch):
/// one line otherwise.
void checkRoutingReport(const Program &prog);
/// --report routing: per layer with experts, the rows routed to each expert
/// over the run (summed over the ranks) and their max / mean.
void printRoutingReport(const Program &prog);
/// --routing-json FILE: the same figures as JSON (docs/design.md,
/// Formats); false and *error when the file cannot be written.
bool writeRoutingJson(const Program &prog, const std::string &path,
                      std::string *error);

} // namespace mfrt

#endif // MFRT_PROGRAM_REPORTS_H
