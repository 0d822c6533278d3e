//===- Program.cpp - The emitted program's state and error exits ----------===//

#include "mfrt/program/Program.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace mfrt;

namespace {
const char *gProgram = "prefill";
thread_local RankState tRank;
} // namespace

Program &mfrt::program() {
  static Program prog;
  return prog;
}

void mfrt::setProgramName(const char *argv0) {
  if (!argv0)
    return;
  const char *slash = std::strrchr(argv0, '/');
  gProgram = slash ? slash + 1 : argv0;
}

const char *mfrt::programName() { return gProgram; }

void mfrt::die(const std::string &msg) {
  // Ranks are threads: the first one to fail speaks for the process.
  static std::mutex once;
  once.lock();
  std::fprintf(stderr, "%s: error: %s\n", gProgram, msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

RankState &mfrt::currentRank() { return tRank; }

void mfrt::fatal(const std::string &msg) {
  if (tRank.manifest && !tRank.manifest->plan.empty())
    die("rank " + std::to_string(tRank.rank) + ": " + msg);
  die(msg);
}
