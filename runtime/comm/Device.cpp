//===- Device.cpp - The registered accelerator and its failure path -------===//

#include "mfrt/comm/Device.h"
#include "mfrt/comm/CommRuntime.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

using namespace mfrt::comm;

namespace {
std::atomic<Device *> gDevice{nullptr};
} // namespace

Device *mfrt::comm::activeDevice() {
  return gDevice.load(std::memory_order_acquire);
}

void mfrt::comm::registerDevice(Device *device) {
  gDevice.store(device, std::memory_order_release);
}

int mfrt::comm::localRankFromEnvironment(int fallback) {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK",
                           "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char *v = std::getenv(name);
    if (!v || !*v)
      continue;
    char *end = nullptr;
    long r = std::strtol(v, &end, 10);
    if (end && *end == 0 && r >= 0)
      return int(r);
  }
  return fallback;
}

void mfrt::comm::hostAccess() {
  Device *device = activeDevice();
  if (!device || !device->attached())
    return;
  Status s = device->synchronize();
  if (!s.ok())
    failRank(s.code, s.detail);
}

void mfrt::comm::failRank(mfrt_status status, const std::string &detail) {
  RankState *st = currentRank();
  int rank = st ? st->rank : -1;
  if (st && !st->failure.failed()) {
    st->failure = FailureRecord{st->rank, status, detail};
    st->transport.raiseFailure(st->failure);
  }
  if (st)
    st->transport.beforeExit();
  // Ranks may be threads: the first one to fail speaks for the process.
  static std::mutex once;
  once.lock();
  std::string where =
      rank >= 0 ? "mfrt: rank " + std::to_string(rank) + ": " : "mfrt: ";
  std::fprintf(stderr, "%s: error: %s%s\n", program_invocation_short_name,
               where.c_str(), detail.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}
