//===- Program.cpp - The emitted program's state and error exits ----------===//

#include "mfrt/program/Program.h"

#include "mfrt/comm/CommRuntime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace mfrt;

namespace {
const char *gProgram = "prefill";
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
  if (progressLineOpen())
    std::fputc('\n', stderr);
  std::fprintf(stderr, "%s: error: %s\n", gProgram, msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

ProgramRank &mfrt::programRank() {
  comm::RankState *rank = comm::currentRank();
  if (!rank || !rank->program)
    die("internal: a program hook called outside the ranks' run");
  return *rank->program;
}

void mfrt::fatal(const std::string &msg) {
  comm::RankState *rank = comm::currentRank();
  const ProgramRank *rs = rank ? rank->program : nullptr;
  if (rs && rs->manifest && !rs->manifest->plan.empty())
    die("rank " + std::to_string(rank->rank) + ": " + msg);
  die(msg);
}

Sequence *ProgramRank::sequenceOf(int64_t position, int64_t *place) {
  int64_t slot = stepping ? position >> 32 : prefill;
  int64_t p = stepping ? position & 0xffffffffLL : position;
  if (position < 0 || slot < 0 || slot >= int64_t(sequences.size()))
    return nullptr;
  Sequence &s = sequences[size_t(slot)];
  if (!s.output || p >= s.length || (stepping && !s.inStep))
    return nullptr;
  *place = p;
  return &s;
}
