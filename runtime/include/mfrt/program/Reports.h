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

} // namespace mfrt

#endif // MFRT_PROGRAM_REPORTS_H
