//===- CommProcessDriver.cpp - The mfrt collectives across processes -----===//
//
// `RuntimeProcessDriver MODE [mpi|tcp]`, one process per rank: under
// `mpirun --allow-run-as-root --oversubscribe -np 32` for mpi (the default),
// or started by tcp-launch.sh (its rank from SLURM_PROCID, rank 0's address
// from MFRT_RENDEZVOUS) for tcp:
//
//   ops      every op of CommChecks.h on the seed layout (a reduced set of
//            dispatch cases), exit 0
//   exit     rank 3 calls _exit(3) inside an all-gather (MFRT_FAULT_EXIT):
//            the job must end non-zero
//   fail     rank 5's fn returns 5 before a collective: every rank reports
//            "rank 5: fn returned 5", exit 2
//   stall    rank 2 stops for 3 s (timeout 1 s): every rank fails with a
//            timeout naming rank 2, exit 2
//   size     (with 2 processes under mpirun) the world size must equal the
//            plan's 32 devices: a clear error, exit 2
//   pools    (with 12 processes) two pools, TP2 x CP2 x DP2 then TP2 x DP2
//            on nodes of 4: each pool's groups, and transfers from the first
//            to the second
//   kill     (tcp) rank 6 is killed (SIGKILL) before a collective: every
//            other rank names it at once, long before the 60 s timeout
//
// Exit status: 0 all good, 1 a check failed, 2 mfrt_launch failed.
//
//===----------------------------------------------------------------------===//

#include "CommChecks.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

using namespace commcheck;

namespace {

/// The pools mode's plans.
const char *const kPoolsFirst =
    "devices=8 gpus_per_node=4 attention=tp:2,cp:2,dp:2 experts=ep:8:tp+cp+dp";
const char *const kPoolsSecond =
    "devices=4 gpus_per_node=4 attention=tp:2,dp:2 experts=ep:4:tp+dp";

struct Context {
  std::string mode;
  MeshLayout layout;
  Failures fails;
  int rank = -1;
};

int rankMain(void *user) {
  Context &ctx = *static_cast<Context *>(user);
  ctx.rank = mfrt_rank();
  Failures &fails = ctx.fails;
  const MeshLayout &layout = ctx.layout;
  if (ctx.mode == "pools") {
    checkPools(layout, layoutOf(kPoolsSecond), fails);
    return 0;
  }
  if (ctx.mode == "ops") {
    auto t0 = std::chrono::steady_clock::now();
    auto step = [&](const char *name) {
      if (ctx.rank == 0)
        std::printf(
            "  %-14s done at %.2f s\n", name,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count());
    };
    checkGroups(layout, fails);
    step("groups");
    checkAllGather(layout, fails);
    step("all_gather");
    checkReduceScatter(layout, fails);
    step("reduce_scatter");
    checkAllReduce(layout, fails);
    step("all_reduce");
    checkRing(layout, fails);
    checkRingBytes(layout, fails);
    step("kv_ring_step");
    checkP2P(layout, fails);
    step("send/recv");
    checkGather(layout, fails);
    step("gather");
    checkBarrier(layout, fails);
    step("barrier");
    checkAccounting(layout, fails);
    step("accounting");
    for (RoutingKind kind :
         {RoutingKind::Random, RoutingKind::Skewed, RoutingKind::Idle}) {
      DispatchCase c;
      c.kind = kind;
      checkDispatch(layout, fails, c);
    }
    DispatchCase k4;
    k4.k = 4;
    k4.dtype = MFRT_BF16;
    checkDispatch(layout, fails, k4);
    step("dispatch");
    return 0;
  }
  const int64_t ep = mfrt_group("ep");
  std::vector<float> send(256, 1.0f), recv(16 * 256);
  if (ctx.mode == "fail" && ctx.rank == 5)
    return 5;
  if (ctx.mode == "stall" && ctx.rank == 2)
    std::this_thread::sleep_for(std::chrono::seconds(3));
  if (ctx.mode == "kill" && ctx.rank == 6)
    raise(SIGKILL);
  for (int i = 0; i < 3; ++i)
    if (mfrt_all_gather(ep, send.data(), recv.data(), 256, MFRT_F32)) {
      std::fprintf(stderr, "%s\n", mfrt_last_error());
      return 1;
    }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "ops";
  const std::string backend = argc > 2 ? argv[2] : "mpi";
  if ((mode != "ops" && mode != "exit" && mode != "fail" && mode != "stall" &&
       mode != "size" && mode != "pools" && mode != "kill") ||
      (backend != "mpi" && backend != "tcp") || argc > 3) {
    std::fprintf(stderr,
                 "usage: %s [ops|exit|fail|stall|size|pools|kill] [mpi|tcp]\n",
                 argv[0]);
    return 64;
  }
  if (mode == "exit")
    setenv("MFRT_FAULT_EXIT", "3:all_gather", 1);
  const bool pools = mode == "pools";
  Context ctx{mode, layoutOf(pools ? kPoolsFirst : kSeedPlan), {}, -1};
  const double timeoutS = mode == "ops" || pools || mode == "kill" ? 60
                          : mode == "exit"                         ? 10
                                                                   : 1;
  mfrt_options options{};
  options.backend = backend == "tcp" ? MFRT_BACKEND_TCP : MFRT_BACKEND_MPI;
  options.plan = pools ? kPoolsFirst : kSeedPlan;
  options.timeout_s = timeoutS;
  options.second_plan = pools ? kPoolsSecond : nullptr;
  auto t0 = std::chrono::steady_clock::now();
  mfrt_status s = mfrt_launch(&options, rankMain, &ctx);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (s != MFRT_OK) {
    std::fprintf(stderr,
                 "RuntimeProcessDriver %s: mfrt_launch failed (status %d) "
                 "after %.1f s: %s\n",
                 mode.c_str(), int(s), secs, mfrt_last_error());
    return 2;
  }
  if (!ctx.fails.empty()) {
    std::fprintf(stderr, "%s", ctx.fails.text().c_str());
    return 1;
  }
  if (ctx.rank == 0)
    std::printf("RuntimeProcessDriver %s: all checks passed on %d ranks in "
                "%.1f s\n",
                mode.c_str(), mfrt_world_size(), secs);
  return 0;
}
