//===- CommLocalTest.cpp - The mfrt collectives on the local backend ------===//
//
// Every op on the seed's 32-rank layout (and the swapped and DP32/EP32
// layouts for dispatch), against plain computations (CommChecks.h); the
// traffic of hierarchical dispatch against the analytic figure of
// docs/design.md §5; failures (a rank that errs, stops, or passes bad
// arguments) ending every waiting rank's call within the timeout with a message
// naming the rank.
//
//===----------------------------------------------------------------------===//

#include "CommChecks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <thread>

using namespace commcheck;

namespace {

using RankFn = std::function<int()>;
using Clock = std::chrono::steady_clock;

mfrt_status launch(const std::string &plan, RankFn fn, double timeoutS = 20,
                   mfrt_backend backend = MFRT_BACKEND_LOCAL) {
  mfrt_options options{backend, plan.c_str(), timeoutS};
  return mfrt_launch(
      &options, [](void *user) { return (*static_cast<RankFn *>(user))(); },
      &fn);
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Runs `check` on every rank of `plan` and expects no mismatch.
template <typename Check> void runChecks(const char *plan, Check check) {
  const MeshLayout layout = layoutOf(plan);
  Failures fails;
  mfrt_status s = launch(plan, [&] {
    check(layout, fails);
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  EXPECT_TRUE(fails.empty()) << fails.text();
}

//===----------------------------------------------------------------------===//
// Plan text
//===----------------------------------------------------------------------===//

TEST(CommPlan, LaunchReportsMeshLayoutErrors) {
  mfrt_status s =
      launch("devices=16 attention=tp:2,cp:2,dp:4,pp:2", [] { return 0; });
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  EXPECT_NE(std::string(mfrt_last_error()).find("plan rule 'mesh-size'"),
            std::string::npos)
      << mfrt_last_error();
}

// Under mpirun the launcher numbers the ranks: a rank given to the nccl
// backend without a rendezvous is refused, not ignored.
TEST(CommPlan, NcclRankWithoutRendezvousIsRefused) {
  if (std::getenv("MFRT_RENDEZVOUS") || std::getenv("SLURM_STEP_NODELIST"))
    GTEST_SKIP() << "a rendezvous comes from the environment";
  mfrt_options options{MFRT_BACKEND_NCCL, "devices=2 attention=tp:2", 5};
  options.has_rank = 1;
  options.rank = 0;
  RankFn fn = [] { return 0; };
  mfrt_status s = mfrt_launch(
      &options, [](void *user) { return (*static_cast<RankFn *>(user))(); },
      &fn);
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  EXPECT_EQ(std::string(mfrt_last_error()),
            "mfrt: a rank (--rank, mfrt_options.rank) is for a rendezvous "
            "(--rendezvous HOST:PORT); under mpirun the launcher numbers the "
            "ranks");
}

//===----------------------------------------------------------------------===//
// Ops on the seed layout
//===----------------------------------------------------------------------===//

TEST(CommLocal, GroupsComeFromMeshLayout) { runChecks(kSeedPlan, checkGroups); }

TEST(CommLocal, AllGather) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkAllGather(l, f); });
}

TEST(CommLocal, ReduceScatter) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkReduceScatter(l, f); });
}

TEST(CommLocal, AllReduce) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkAllReduce(l, f); });
}

TEST(CommLocal, KVRingStep) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkRing(l, f); });
}

TEST(CommLocal, RingStepBytes) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkRingBytes(l, f); });
  // A group of one: the step is a copy.
  runChecks("devices=2 attention=tp:2,dp:1",
            [](const MeshLayout &l, Failures &f) {
              int64_t g = mfrt_group("dp");
              char in[5] = "abcd", out[5] = {};
              if (mfrt_ring_step_bytes(g, in, out, 5) != MFRT_OK ||
                  std::string(out) != "abcd")
                f.add("ring step on a group of one");
              (void)l;
            });
}

TEST(CommLocal, PointToPoint) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkP2P(l, f); });
}

TEST(CommLocal, Gather) {
  runChecks(kSeedPlan,
            [](const MeshLayout &l, Failures &f) { checkGather(l, f); });
}

TEST(CommLocal, Barrier) { runChecks(kSeedPlan, checkBarrier); }

TEST(CommLocal, BarrierWaitsForTheLastRank) {
  std::atomic<int> early{0};
  mfrt_status s = launch(kSeedPlan, [&] {
    int64_t g = mfrt_group("tp,cp");
    auto t0 = Clock::now();
    if (mfrt_rank() == 5)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (mfrt_barrier(g) != MFRT_OK)
      return 1;
    // Everyone in rank 5's group waited for it.
    if (mfrt_rank() / 4 == 1 && secondsSince(t0) < 0.15)
      ++early;
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  EXPECT_EQ(early.load(), 0);
}

TEST(CommLocal, ByteAccountingByLinkAndLayer) {
  runChecks(kSeedPlan, checkAccounting);
}

TEST(CommLocal, OpKindNames) {
  EXPECT_STREQ(mfrt_op_kind_name(MFRT_OP_ALL_GATHER), "all_gather");
  EXPECT_STREQ(mfrt_op_kind_name(MFRT_OP_DISPATCH), "dispatch");
  EXPECT_STREQ(mfrt_op_kind_name(MFRT_OP_BARRIER), "barrier");
  EXPECT_STREQ(mfrt_op_kind_name(MFRT_OP_KV_TRANSFER), "kv_transfer");
}

TEST(CommLocal, LargeMessages) {
  // 4 MiB per rank through an all-gather and an in-place all-reduce.
  const char *plan = "devices=4 gpus_per_node=2 attention=tp:4";
  Failures fails;
  mfrt_status s = launch(plan, [&] {
    const int64_t count = 1 << 20;
    int64_t g = mfrt_group("tp");
    std::vector<float> send(static_cast<size_t>(count), float(mfrt_rank() + 1));
    std::vector<float> recv(size_t(4 * count));
    if (mfrt_all_gather(g, send.data(), recv.data(), count, MFRT_F32))
      return 1;
    for (int i = 0; i < 4; ++i)
      if (recv[size_t(i * count + count - 1)] != float(i + 1))
        fails.add("all_gather block " + std::to_string(i));
    if (mfrt_all_reduce(g, send.data(), send.data(), count, MFRT_F32))
      return 1;
    if (send[0] != 10.0f || send[size_t(count - 1)] != 10.0f)
      fails.add("all_reduce");
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  EXPECT_TRUE(fails.empty()) << fails.text();
}

TEST(CommLocal, CallsOutsideLaunchFail) {
  float v = 0;
  EXPECT_EQ(mfrt_rank(), -1);
  EXPECT_EQ(mfrt_world_size(), 0);
  EXPECT_EQ(mfrt_group("tp"), -1);
  EXPECT_EQ(mfrt_all_gather(0, &v, &v, 1, MFRT_F32), MFRT_ERR_STATE);
  EXPECT_NE(std::string(mfrt_last_error()).find("outside mfrt_launch"),
            std::string::npos);
  EXPECT_EQ(mfrt_bytes_sent_total(MFRT_OP_ALL_GATHER, MFRT_LINK_IB), 0u);
}

TEST(CommLocal, UnknownAxis) {
  std::atomic<int> ok{0};
  mfrt_status s = launch("devices=2 attention=tp:2", [&] {
    if (mfrt_group("zz") == -1 &&
        std::string(mfrt_last_error()).find("no axis 'zz'") !=
            std::string::npos)
      ++ok;
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK);
  EXPECT_EQ(ok.load(), 2);
}

//===----------------------------------------------------------------------===//
// Two pools (mfrt_options.second_plan)
//===----------------------------------------------------------------------===//

/// A decode pool of TP2 x DP8 (16 devices) beside the seed plan's 32.
const char *const kDecodePool =
    "devices=16 gpus_per_node=8 attention=tp:2,dp:8 experts=ep:16:tp+dp";

mfrt_status launchPools(const char *first, const char *second, RankFn fn) {
  mfrt_options options{MFRT_BACKEND_LOCAL, first, 20, second};
  return mfrt_launch(
      &options, [](void *user) { return (*static_cast<RankFn *>(user))(); },
      &fn);
}

TEST(CommPools, GroupsAndTransfers) {
  const MeshLayout seed = layoutOf(kSeedPlan), decode = layoutOf(kDecodePool);
  Failures fails;
  mfrt_status s = launchPools(kSeedPlan, kDecodePool, [&] {
    checkPools(seed, decode, fails);
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  EXPECT_TRUE(fails.empty()) << fails.text();
}

TEST(CommPools, WrongPoolPeersAreErrors) {
  // A pipeline send across the pools, or a transfer within one, fails the
  // launch naming the rule.
  auto expectError = [](int from, std::function<mfrt_status()> call,
                        const std::string &text) {
    mfrt_status s = launchPools(kSeedPlan, kDecodePool, [&] {
      return mfrt_rank() == from ? int(call()) : 0;
    });
    EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
    EXPECT_NE(std::string(mfrt_last_error()).find(text), std::string::npos)
        << mfrt_last_error();
  };
  float v = 0;
  expectError(
      3, [&] { return mfrt_send(40, &v, 1, MFRT_F32); },
      "send to rank 40: rank 40 is in pool 1, not this rank's: a transfer "
      "between pools is mfrt_transfer_send/recv");
  expectError(
      40, [&] { return mfrt_transfer_send(41, &v, 1, MFRT_F32); },
      "rank 41 is in pool 1, this rank's own: a transfer goes to the other "
      "pool");
}

TEST(CommPools, PoolsFillWholeNodes) {
  mfrt_status s =
      launchPools(kSeedPlan, "devices=4 gpus_per_node=8 attention=tp:2,dp:2",
                  [] { return 0; });
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  EXPECT_EQ(std::string(mfrt_last_error()),
            "mfrt: plan rule 'pools': pools of 32 and 4 devices do not fill "
            "whole nodes of 8 GPUs (a node never holds both pools)");
  s = launchPools(kSeedPlan, "devices=16 gpus_per_node=4 attention=tp:2,dp:8",
                  [] { return 0; });
  EXPECT_EQ(std::string(mfrt_last_error()),
            "mfrt: plan rule 'pools': the pools' plans give 8 and 4 GPUs per "
            "node; they must agree");
  s = launchPools(kSeedPlan, "devices=16 attention=tp:3", [] { return 0; });
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  EXPECT_NE(std::string(mfrt_last_error()).find("mfrt: the second plan: "),
            std::string::npos)
      << mfrt_last_error();
}

//===----------------------------------------------------------------------===//
// Dispatch / combine
//===----------------------------------------------------------------------===//

TEST(CommDispatch, SeedLayout) { runChecks(kSeedPlan, checkDispatchCases); }

TEST(CommDispatch, SwappedLayout) {
  runChecks(kSwappedPlan, checkDispatchCases);
}

TEST(CommDispatch, DP32EP32) { runChecks(kDP32Plan, checkDispatchCases); }

TEST(CommDispatch, PlacedExpertsWithReplicas) {
  runChecks(kSeedPlan, checkPlacedDispatch);
  runChecks(kDP32Plan, checkPlacedDispatch);
}

TEST(CommDispatch, RelaysOutsideTheGroupGoDirect) {
  // 4 GPUs per node and rank = pp + 3*dp: a stage's EP group has 1 or 2 GPUs
  // per node, so some relays (same local index on the other node) are in the
  // group and some are not; those slots go directly.
  const char *plan = "devices=24 gpus_per_node=4 attention=pp:3,dp:8 "
                     "experts=ep:8:dp,pp:3:pp";
  MeshLayout layout = layoutOf(plan);
  std::vector<int64_t> ep = layout.group(0, {"ep"});
  int inGroup = 0, outside = 0;
  for (int64_t node = 1; node < layout.numNodes(); ++node)
    (std::find(ep.begin(), ep.end(), layout.relay(0, node)) != ep.end()
         ? inGroup
         : outside)++;
  EXPECT_GT(inGroup, 0);
  EXPECT_GT(outside, 0);
  runChecks(plan, [](const MeshLayout &l, Failures &f) {
    for (mfrt_dtype dtype : {MFRT_F32, MFRT_BF16}) {
      DispatchCase c;
      c.dtype = dtype;
      c.k = 3;
      checkDispatch(l, f, c);
    }
  });
}

TEST(CommDispatch, ExpertOwnerIsMeshLayouts) {
  // Expert 5 of the seed lives on GPU 2, expert 27 on GPU 13 (hop 4 of
  // docs/design.md §4): token rows routed there arrive there.
  std::atomic<int> seen{0};
  mfrt_status s = launch(kSeedPlan, [&] {
    int64_t g = mfrt_group("ep");
    const int rank = mfrt_rank();
    std::vector<float> x(4, float(rank));
    int64_t experts[2] = {5, 27};
    float weights[2] = {0.5f, 0.5f};
    const bool sender = rank == 11;
    mfrt_dispatch *h = nullptr;
    if (mfrt_dispatch_tokens(g, MFRT_DISPATCH_HIERARCHICAL, x.data(),
                             sender ? 1 : 0, 4, MFRT_F32, experts, weights, 2,
                             32, &h))
      return 1;
    const int64_t count = mfrt_dispatch_count(h);
    if ((rank == 2 || rank == 13) && count == 1 &&
        static_cast<const float *>(mfrt_dispatch_rows(h))[0] == 11.0f)
      ++seen;
    else if (rank != 2 && rank != 13 && count != 0)
      return 2;
    std::vector<float> out(size_t(4 * count), 1.0f), y(4);
    return int(mfrt_combine_tokens(h, out.data(), y.data()) != MFRT_OK ||
               (sender && y[0] != 1.0f));
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  EXPECT_EQ(seen.load(), 2);
}

/// Sum over all ranks of the IB bytes of dispatch and combine, in `mode`,
/// for uniform random top-2 routing over 32 experts.
struct IBTraffic {
  double dispatch = 0, combine = 0;
};

IBTraffic measureIB(const char *plan, mfrt_dispatch_mode mode, int64_t nTokens,
                    int64_t hidden) {
  std::atomic<uint64_t> dispatchBytes{0}, combineBytes{0};
  mfrt_status s = launch(plan, [&] {
    int64_t g = mfrt_group("ep");
    const int rank = mfrt_rank();
    // Exactly nTokens tokens per rank.
    Routing full = routingOf(rank, RoutingKind::Random, nTokens, 2, 32, 99);
    full.nTokens = nTokens;
    full.experts.resize(size_t(2 * nTokens));
    full.weights.resize(size_t(2 * nTokens));
    std::vector<float> x(size_t(nTokens * hidden), 1.0f);
    mfrt_reset_counters();
    mfrt_set_layer(0);
    mfrt_dispatch *h = nullptr;
    if (mfrt_dispatch_tokens(g, mode, x.data(), nTokens, hidden, MFRT_F32,
                             full.experts.data(), full.weights.data(), 2, 32,
                             &h))
      return 1;
    std::vector<float> out(size_t(mfrt_dispatch_count(h) * hidden), 1.0f);
    std::vector<float> y(size_t(nTokens * hidden));
    if (mfrt_combine_tokens(h, out.data(), y.data()))
      return 1;
    dispatchBytes += mfrt_bytes_sent(MFRT_OP_DISPATCH, MFRT_LINK_IB, 0);
    combineBytes += mfrt_bytes_sent(MFRT_OP_COMBINE, MFRT_LINK_IB, 0);
    return 0;
  });
  EXPECT_EQ(s, MFRT_OK) << mfrt_last_error();
  return {double(dispatchBytes.load()), double(combineBytes.load())};
}

// The traffic figure of docs/design.md §5, measured.
//
// Setup: 32 ranks, every rank has n = 64 tokens (so T/4 = n: T = 256 per DP
// replica), hidden d = 1024, f32 (4 bytes), top-2 over 32 experts drawn
// uniformly without replacement.
//
// Seed plan: the EP group of a stage is its 16 GPUs on 2 nodes; each node
// holds 16 of the stage's 32 experts. A token's two experts are both on its
// own node with probability (16/32) * (15/31), so it crosses IB (to one
// relay, once) with p = 1 - (16/32)(15/31) = 1 - 240/992 = 0.7581. Dispatch
// then sends p * n rows of d elements per GPU over IB, and combine returns
// one summed row per crossing token: p * n * d elements each way, and
// 2 * p * (T/4) * d = 0.379 * T * d both ways, docs/design.md §5's ~0.38*T*d.
// The measured bytes also carry, per crossing token, k * 8 bytes of (expert,
// weight) and per rank 16 bytes of counts to each member on the other node:
// 16 / 4096 = 0.4% of a row, well inside the 5% tolerance, so the check is on
// the plain element count.
//
// Swapped plan (rank = tp + 2cp + 4pp + 8dp): a stage spans 4 nodes with 8
// of its experts each; the expected number of other nodes a token's experts
// touch is 3 * (1 - (24/32)(23/31)) = 1.3306, so 2 * 1.3306 * (T/4) * d =
// 0.665 * T * d both ways (docs/design.md §5's ~0.67*T*d).
//
// Flat mode sends every remote slot separately: k * (16/32) = 1 row per token
// each way on the seed plan, which hierarchical mode cuts to 0.758.
TEST(CommDispatch, HierarchicalIBTrafficMatchesTheArticle) {
  const int64_t n = 64, d = 1024, ranks = 32;
  const double T = 4.0 * double(n), elem = 4.0;
  const double pSeed = 1.0 - (16.0 / 32.0) * (15.0 / 31.0);
  const double pSwapped = 3.0 * (1.0 - (24.0 / 32.0) * (23.0 / 31.0));

  IBTraffic seed = measureIB(kSeedPlan, MFRT_DISPATCH_HIERARCHICAL, n, d);
  // Per GPU, in units of T*d elements.
  const double seedDispatch = seed.dispatch / ranks / elem / (T * double(d));
  const double seedCombine = seed.combine / ranks / elem / (T * double(d));
  const double wantEachWay = pSeed * (T / 4) / T; // 0.1895
  EXPECT_NEAR(seedDispatch / wantEachWay, 1.0, 0.05)
      << "dispatch IB per GPU: " << seedDispatch << " T*d, want "
      << wantEachWay;
  EXPECT_NEAR(seedCombine / wantEachWay, 1.0, 0.05)
      << "combine IB per GPU: " << seedCombine << " T*d, want " << wantEachWay;
  EXPECT_NEAR((seedDispatch + seedCombine) / 0.38, 1.0, 0.05);

  IBTraffic swapped = measureIB(kSwappedPlan, MFRT_DISPATCH_HIERARCHICAL, n, d);
  const double swappedBoth =
      (swapped.dispatch + swapped.combine) / ranks / elem / (T * double(d));
  EXPECT_NEAR(swappedBoth / (2 * pSwapped / 4), 1.0, 0.05)
      << "swapped plan: " << swappedBoth << " T*d both ways, want "
      << 2 * pSwapped / 4;

  IBTraffic flat = measureIB(kSeedPlan, MFRT_DISPATCH_FLAT, n, d);
  const double flatDispatch = flat.dispatch / ranks / elem / (T * double(d));
  EXPECT_NEAR(flatDispatch / (1.0 / 4), 1.0, 0.05)
      << "flat dispatch IB per GPU: " << flatDispatch << " T*d";
  std::printf("IB per GPU per layer (T*d elements): hierarchical seed %.4f + "
              "%.4f = %.4f (analytic 0.38), swapped %.4f (analytic 0.67), flat "
              "seed dispatch %.4f\n",
              seedDispatch, seedCombine, seedDispatch + seedCombine,
              swappedBoth, flatDispatch);
}

TEST(CommDispatch, BadExpertFailsEveryRank) {
  // A failure anywhere aborts the world: rank 9's EP group (stage 0) is
  // waiting for it; stage 1's ranks may or may not be done by then.
  std::atomic<int> peerErrors{0};
  auto t0 = Clock::now();
  mfrt_status s = launch(
      kSeedPlan,
      [&] {
        int64_t g = mfrt_group("ep");
        float x[4] = {};
        int64_t experts[2] = {1, mfrt_rank() == 9 ? 99 : 2};
        float w[2] = {0.5f, 0.5f};
        mfrt_dispatch *h = nullptr;
        mfrt_status st = mfrt_dispatch_tokens(g, MFRT_DISPATCH_FLAT, x, 1, 4,
                                              MFRT_F32, experts, w, 2, 32, &h);
        if (st == MFRT_ERR_PEER && mfrt_rank() < 16 &&
            std::string(mfrt_last_error()).find("rank 9 failed") !=
                std::string::npos)
          ++peerErrors;
        if (st == MFRT_OK) {
          std::vector<float> out(size_t(4 * mfrt_dispatch_count(h))), y(4);
          mfrt_combine_tokens(h, out.data(), y.data());
        }
        return st == MFRT_OK ? 0 : 1;
      },
      2.0);
  EXPECT_LT(secondsSince(t0), 1.5);
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  const std::string msg = mfrt_last_error();
  EXPECT_NE(msg.find("mfrt: rank 9: dispatch on group ep{0,1,2,"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("routes to expert 99"), std::string::npos) << msg;
  // Rank 9's stage: the 15 others of its EP group.
  EXPECT_EQ(peerErrors.load(), 15);
}

//===----------------------------------------------------------------------===//
// Failures and timeouts
//===----------------------------------------------------------------------===//

TEST(CommFailure, TimeoutMessageNamesRankOpAndGroup) {
  std::string message;
  mfrt_status s = launch(
      "devices=2 gpus_per_node=8 attention=tp:2",
      [&] {
        if (mfrt_rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1300));
          return 0;
        }
        float v[2] = {};
        mfrt_status st = mfrt_all_gather(mfrt_group("tp"), v, v, 1, MFRT_F32);
        message = mfrt_last_error();
        return st == MFRT_ERR_TIMEOUT ? 0 : 1;
      },
      1.0);
  EXPECT_EQ(message, "mfrt: rank 0: all_gather on group tp{0,1}: timed out "
                     "after 1.0 s waiting for rank 1");
  EXPECT_EQ(s, MFRT_ERR_TIMEOUT);
  EXPECT_EQ(std::string(mfrt_last_error()), message);
}

TEST(CommFailure, TimeoutFromEnvironment) {
  setenv("MFRT_TIMEOUT_S", "0.5", 1);
  std::string message;
  auto t0 = Clock::now();
  mfrt_status s = launch(
      "devices=2 attention=tp:2",
      [&] {
        if (mfrt_rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(800));
          return 0;
        }
        mfrt_status st = mfrt_barrier(mfrt_group("tp"));
        message = mfrt_last_error();
        return int(st);
      },
      0);
  unsetenv("MFRT_TIMEOUT_S");
  EXPECT_EQ(s, MFRT_ERR_TIMEOUT);
  EXPECT_NE(message.find("barrier on group tp{0,1}: timed out after 0.5 s"),
            std::string::npos)
      << message;
  EXPECT_LT(secondsSince(t0), 1.5);
}

TEST(CommFailure, HugeTimeoutsMeanWaiting) {
  // A timeout of 1e10 s or more (or inf) must not wrap the deadline into
  // the past: the collectives still wait for their peers.
  for (double timeout : {1e9, 1e10, 1e300, HUGE_VAL}) {
    mfrt_status s = launch(
        "devices=2 attention=tp:2",
        [] {
          if (mfrt_rank() == 1)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          float v[2] = {1, 2};
          return int(mfrt_all_gather(mfrt_group("tp"), v, v, 1, MFRT_F32));
        },
        timeout);
    EXPECT_EQ(s, MFRT_OK) << timeout << ": " << mfrt_last_error();
  }
}

/// Result of one rank's collective in a failure test.
struct Outcome {
  std::mutex mutex;
  std::vector<std::pair<mfrt_status, std::string>> results;
  std::vector<double> seconds;
  void add(mfrt_status s, double secs) {
    std::lock_guard<std::mutex> lock(mutex);
    results.push_back({s, mfrt_last_error()});
    seconds.push_back(secs);
  }
};

TEST(CommFailure, RankReturningAnErrorFailsItsPeers) {
  Outcome outcome;
  auto t0 = Clock::now();
  mfrt_status s = launch(
      kSeedPlan,
      [&] {
        int64_t ep = mfrt_group("ep");
        if (mfrt_rank() == 3)
          return 7; // fails before the all-gather its EP group waits in
        std::vector<float> send(8, 1.0f), recv(16 * 8);
        auto t = Clock::now();
        mfrt_status st =
            mfrt_all_gather(ep, send.data(), recv.data(), 8, MFRT_F32);
        if (mfrt_rank() < 16)
          outcome.add(st, secondsSince(t));
        return st == MFRT_OK ? 0 : 1;
      },
      2.0);
  EXPECT_LT(secondsSince(t0), 1.5); // an abort, not a timeout
  EXPECT_EQ(s, MFRT_ERR_PEER);
  EXPECT_EQ(std::string(mfrt_last_error()), "mfrt: rank 3: fn returned 7");
  ASSERT_EQ(outcome.results.size(), 15u);
  for (auto &[st, msg] : outcome.results) {
    EXPECT_EQ(st, MFRT_ERR_PEER) << msg;
    EXPECT_NE(msg.find("all_gather on group ep{0,1,2,3,"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 3 failed: fn returned 7"), std::string::npos)
        << msg;
  }
}

TEST(CommFailure, RankStoppingMidCollectiveTimesOutItsPeers) {
  // Rank 5 stops (sleeps past the timeout) between two collectives; the
  // others wait in the second one and fail within the 1 s timeout.
  Outcome outcome;
  std::atomic<int> lateCallFailed{0};
  auto t0 = Clock::now();
  mfrt_status s = launch(
      kSeedPlan,
      [&] {
        int64_t g = mfrt_group("tp,cp");
        std::vector<float> send(64, 1.0f), recv(256);
        if (mfrt_all_gather(g, send.data(), recv.data(), 64, MFRT_F32))
          return 1;
        if (mfrt_rank() == 5) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1800));
          // The world has failed meanwhile: the late call fails at once.
          auto t = Clock::now();
          if (mfrt_reduce_scatter(g, recv.data(), send.data(), 64, MFRT_F32) ==
                  MFRT_ERR_PEER &&
              secondsSince(t) < 0.1)
            ++lateCallFailed;
          return 1;
        }
        auto t = Clock::now();
        mfrt_status st =
            mfrt_reduce_scatter(g, recv.data(), send.data(), 64, MFRT_F32);
        if (mfrt_rank() / 4 == 1)
          outcome.add(st, secondsSince(t));
        return st == MFRT_OK ? 0 : 1;
      },
      1.0);
  EXPECT_LT(secondsSince(t0), 3.0);
  EXPECT_EQ(lateCallFailed.load(), 1);
  EXPECT_EQ(s, MFRT_ERR_TIMEOUT);
  const std::string msg = mfrt_last_error();
  EXPECT_NE(msg.find("reduce_scatter on group tp,cp{4,5,6,7}: timed out after "
                     "1.0 s waiting for rank 5"),
            std::string::npos)
      << msg;
  ASSERT_EQ(outcome.results.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto &[st, m] = outcome.results[i];
    EXPECT_TRUE(st == MFRT_ERR_TIMEOUT || st == MFRT_ERR_PEER) << m;
    EXPECT_NE(m.find("waiting for rank 5"), std::string::npos) << m;
    EXPECT_LT(outcome.seconds[i], 1.5);
  }
}

TEST(CommFailure, MismatchedCountsAreReported) {
  mfrt_status s = launch(
      "devices=2 attention=tp:2",
      [&] {
        float buf[16] = {};
        int64_t count = mfrt_rank() == 0 ? 2 : 3;
        return int(
            mfrt_all_gather(mfrt_group("tp"), buf, buf + 4, count, MFRT_F32));
      },
      2.0);
  EXPECT_NE(s, MFRT_OK);
  EXPECT_NE(std::string(mfrt_last_error()).find("message size mismatch"),
            std::string::npos)
      << mfrt_last_error();
}

TEST(CommFailure, BadGroupHandleFailsTheWorld) {
  mfrt_status s = launch(
      "devices=4 attention=tp:4",
      [&] {
        float v[4] = {};
        int64_t g = mfrt_rank() == 2 ? 42 : mfrt_group("tp");
        return int(mfrt_all_gather(g, v, v, 1, MFRT_F32));
      },
      2.0);
  EXPECT_EQ(s, MFRT_ERR_ARGUMENT);
  EXPECT_EQ(std::string(mfrt_last_error()),
            "mfrt: rank 2: all_gather: no group with handle 42 (make groups "
            "with mfrt_group)");
}

} // namespace
