//===- mfrt-bench.cpp - Throughput of the mfrt collectives ----------------===//
//
// Measures all-gather and flat dispatch (the MoE all-to-all) for 1 to 64 MiB
// per rank and compares them with plain memcpy on the same machine:
//
//   mfrt-bench [--ranks N] [--reps R] [--max-mib M]
//       local backend (every rank a thread), N ranks (default 4)
//   mpirun -np N mfrt-bench [...]
//       the mpi backend on N processes; afterwards rank 0 runs the local
//       backend with the same N and prints both side by side
//
// Rates are aggregate: bytes that land in another rank's buffer per second,
// summed over the ranks (all-gather: N*(N-1)*S per op; dispatch: the rows
// each rank sends to others). memcpy is measured with as many threads as the
// machine has cores, each copying S bytes, as an aggregate rate. Each figure
// is the median of R repetitions (after one warm-up); the time of one op is
// the slowest rank's.
//
//===----------------------------------------------------------------------===//

#include "mfrt/mfrt.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kHidden = 1024; // dispatch rows of 4 KiB (f32)

struct Config {
  int ranks = 4;
  int reps = 5;
  int64_t maxMiB = 64;
  std::vector<int64_t> sizes; // bytes per rank
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Aggregate memcpy rate (bytes/s) of `threads` threads copying `bytes`.
double memcpyRate(int64_t bytes, int threads, int reps) {
  std::vector<std::vector<char>> src(static_cast<size_t>(threads)),
      dst(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    src[size_t(t)].assign(size_t(bytes), char(t + 1));
    dst[size_t(t)].assign(size_t(bytes), 0);
  }
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::memcpy(dst[size_t(t)].data(), src[size_t(t)].data(),
                    size_t(bytes));
      });
    for (std::thread &th : pool)
      th.join();
    if (r > 0)
      times.push_back(secondsSince(t0));
  }
  return double(bytes) * threads / median(times);
}

/// One op's result: median seconds (slowest rank) and aggregate bytes moved.
struct Result {
  double seconds = 0;
  double bytes = 0;
  double rate() const { return bytes / seconds; }
};

struct Bench {
  Config config;
  /// Per size: all-gather, dispatch (filled on rank 0).
  std::vector<Result> allGather, dispatch;
  bool failed = false;
};

/// The slowest rank's time of this repetition.
double slowest(int64_t group, double mine) {
  std::vector<float> all(static_cast<size_t>(mfrt_group_size(group)));
  float f = float(mine);
  if (mfrt_all_gather(group, &f, all.data(), 1, MFRT_F32) != MFRT_OK)
    return mine;
  return *std::max_element(all.begin(), all.end());
}

int rankMain(void *user) {
  Bench &b = *static_cast<Bench *>(user);
  const int64_t world = mfrt_group("tp");
  const int n = mfrt_group_size(world), me = mfrt_group_rank(world);
  const int64_t ep = mfrt_group("ep");
  auto fail = [&](const char *what) {
    std::fprintf(stderr, "%s: %s\n", what, mfrt_last_error());
    b.failed = true;
    return 1;
  };
  for (int64_t bytes : b.config.sizes) {
    const int64_t count = bytes / 4;
    // All-gather of S bytes per rank.
    std::vector<float> send(static_cast<size_t>(count), float(me)),
        recv(size_t(count) * size_t(n));
    std::vector<double> times;
    for (int r = 0; r <= b.config.reps; ++r) {
      if (mfrt_barrier(world))
        return fail("barrier");
      auto t0 = Clock::now();
      if (mfrt_all_gather(world, send.data(), recv.data(), count, MFRT_F32))
        return fail("all_gather");
      double t = slowest(world, secondsSince(t0));
      if (r > 0)
        times.push_back(t);
    }
    if (me == 0)
      b.allGather.push_back(
          {median(times), double(n) * double(n - 1) * double(bytes)});
    send.clear();
    send.shrink_to_fit();
    recv.clear();
    recv.shrink_to_fit();

    // Flat dispatch of S bytes of rows per rank, top-1, experts uniform over
    // the ranks (token t of rank r goes to rank (r + t) % n).
    const int64_t tokens = bytes / (kHidden * 4);
    std::vector<float> x(size_t(tokens * kHidden), 1.0f);
    std::vector<int64_t> experts(static_cast<size_t>(tokens));
    std::vector<float> weights(static_cast<size_t>(tokens), 1.0f);
    for (int64_t t = 0; t < tokens; ++t)
      experts[size_t(t)] = (me + t) % n;
    times.clear();
    uint64_t sent = 0;
    for (int r = 0; r <= b.config.reps; ++r) {
      if (mfrt_barrier(world))
        return fail("barrier");
      mfrt_reset_counters();
      auto t0 = Clock::now();
      mfrt_dispatch *h = nullptr;
      if (mfrt_dispatch_tokens(ep, MFRT_DISPATCH_FLAT, x.data(), tokens,
                               kHidden, MFRT_F32, experts.data(),
                               weights.data(), 1, n, &h))
        return fail("dispatch");
      double t = slowest(world, secondsSince(t0));
      sent = mfrt_bytes_sent_total(MFRT_OP_DISPATCH, MFRT_LINK_NVLINK) +
             mfrt_bytes_sent_total(MFRT_OP_DISPATCH, MFRT_LINK_IB);
      std::vector<float> out(size_t(mfrt_dispatch_count(h) * kHidden), 1.0f);
      std::vector<float> y(size_t(tokens * kHidden));
      if (mfrt_combine_tokens(h, out.data(), y.data()))
        return fail("combine");
      if (r > 0)
        times.push_back(t);
    }
    if (me == 0)
      b.dispatch.push_back({median(times), double(sent) * n});
  }
  return 0;
}

bool run(mfrt_backend backend, Bench &b) {
  const std::string plan = "devices=" + std::to_string(b.config.ranks) +
                           " gpus_per_node=" + std::to_string(b.config.ranks) +
                           " attention=tp:" + std::to_string(b.config.ranks) +
                           " experts=ep:" + std::to_string(b.config.ranks) +
                           ":tp";
  mfrt_options options{backend, plan.c_str(), 300};
  if (mfrt_launch(&options, rankMain, &b) != MFRT_OK) {
    std::fprintf(stderr, "mfrt-bench: %s\n", mfrt_last_error());
    return false;
  }
  return !b.failed;
}

std::string gbps(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%6.2f", rate / 1e9);
  return buf;
}

} // namespace

int main(int argc, char **argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mfrt-bench: %s needs a value\n", arg.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (arg == "--ranks")
      config.ranks = std::atoi(next());
    else if (arg == "--reps")
      config.reps = std::max(1, std::atoi(next()));
    else if (arg == "--max-mib")
      config.maxMiB = std::atoll(next());
    else {
      std::fprintf(stderr,
                   "usage: mfrt-bench [--ranks N] [--reps R] [--max-mib M]\n"
                   "       mpirun -np N mfrt-bench [--reps R] [--max-mib M]\n");
      return 64;
    }
  }
  const char *mpiSize = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!mpiSize)
    mpiSize = std::getenv("PMI_SIZE");
  const bool underMPI = mpiSize != nullptr;
  if (underMPI)
    config.ranks = std::atoi(mpiSize);
  for (int64_t mib = 1; mib <= config.maxMiB; mib *= 4)
    config.sizes.push_back(mib * kMiB);

  Bench mpi{config, {}, {}, false}, local{config, {}, {}, false};
  bool isRankZero = true;
  if (underMPI) {
    if (!run(MFRT_BACKEND_MPI, mpi))
      return 1;
    const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
    isRankZero = !rank || std::atoi(rank) == 0;
    if (!isRankZero)
      return 0;
  }
  if (!run(MFRT_BACKEND_LOCAL, local))
    return 1;

  const int cores = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  std::printf("mfrt-bench: %d ranks, %d reps (median), %d cores; rates in "
              "GB/s (aggregate)\n",
              config.ranks, config.reps, cores);
  std::printf("%8s %8s | %9s %9s %6s | %9s %9s %6s%s\n", "MiB/rank", "memcpy",
              "allgather", "ms", "ratio", "dispatch", "ms", "ratio",
              underMPI ? " |  mpi AG    ms  mpi/loc | mpi disp   ms  mpi/loc"
                       : "");
  for (size_t i = 0; i < config.sizes.size(); ++i) {
    const int64_t bytes = config.sizes[i];
    // memcpy is cheap and noisy here: more repetitions.
    const double copy = memcpyRate(bytes, cores, std::max(config.reps, 15));
    const Result &ag = local.allGather[i], &dp = local.dispatch[i];
    std::printf("%8lld %8s | %9s %9.2f %6.2f | %9s %9.2f %6.2f",
                (long long)(bytes / kMiB), gbps(copy).c_str(),
                gbps(ag.rate()).c_str(), ag.seconds * 1e3, ag.rate() / copy,
                gbps(dp.rate()).c_str(), dp.seconds * 1e3, dp.rate() / copy);
    if (underMPI) {
      const Result &mag = mpi.allGather[i], &mdp = mpi.dispatch[i];
      std::printf(" | %7s %7.2f %6.2f | %7s %7.2f %6.2f",
                  gbps(mag.rate()).c_str(), mag.seconds * 1e3,
                  mag.rate() / ag.rate(), gbps(mdp.rate()).c_str(),
                  mdp.seconds * 1e3, mdp.rate() / dp.rate());
    }
    std::printf("\n");
  }
  return 0;
}
