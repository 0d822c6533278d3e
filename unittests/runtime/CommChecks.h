//===- CommChecks.h - Per-rank checks of the mfrt collectives ---*- C++ -*-===//
//
// Each check runs on the calling rank inside mfrt_launch, computes the
// expected buffers plainly (every rank's inputs are a function of its rank,
// so any rank can compute any other's), and records mismatches. Shared by
// the local-backend GoogleTest suite and the MPI test driver.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_UNITTESTS_RUNTIME_COMMCHECKS_H
#define MESHFOLD_UNITTESTS_RUNTIME_COMMCHECKS_H

#include "meshfold/Support/ExpertPlacement.h"
#include "meshfold/Support/PlanText.h"
#include "mfrt/comm/CommDType.h"
#include "mfrt/mfrt.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace commcheck {

using meshfold::MeshLayout;
using mfrt::comm::dtypeSize;
using mfrt::comm::loadElement;
using mfrt::comm::storeElement;

const char *const kSeedPlan =
    "devices=32 gpus_per_node=8 attention=tp:2,cp:2,dp:4,pp:2 "
    "experts=ep:16:tp+cp+dp,pp:2:pp";
const char *const kSwappedPlan =
    "devices=32 gpus_per_node=8 attention=tp:2,cp:2,pp:2,dp:4 "
    "experts=ep:16:tp+cp+dp,pp:2:pp";
const char *const kDP32Plan =
    "devices=32 gpus_per_node=8 attention=dp:32 experts=ep:32:dp";

/// Mismatches found by the ranks (thread-safe).
struct Failures {
  std::mutex mutex;
  std::vector<std::string> list;
  void add(const std::string &what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (list.size() < 50)
      list.push_back("rank " + std::to_string(mfrt_rank()) + ": " + what);
  }
  bool empty() {
    std::lock_guard<std::mutex> lock(mutex);
    return list.empty();
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const std::string &s : list)
      out += s + "\n";
    return out;
  }
};

inline MeshLayout layoutOf(const std::string &plan) {
  std::string error;
  std::optional<MeshLayout> layout = meshfold::layoutFromPlanText(plan, &error);
  if (!layout) {
    std::fprintf(stderr, "bad test plan: %s\n", error.c_str());
    std::abort();
  }
  return *layout;
}

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/// A value in [-2, 2) using all 24 bits of an f32 significand, so that f32
/// sums of a few of them round and the order of summation shows.
inline float valueOf(int64_t rank, int64_t i, uint64_t salt) {
  uint64_t h = mix(uint64_t(rank) * 0x9e3779b97f4a7c15ULL + uint64_t(i) * 31 +
                   salt * 0x632be59bd9b4e019ULL);
  return float(int64_t(h % (1u << 24)) - (1 << 23)) / float(1 << 22);
}

/// A buffer of `n` elements of `dtype` holding valueOf(rank, i, salt).
inline std::vector<char> makeData(mfrt_dtype dtype, int64_t n, int64_t rank,
                                  uint64_t salt) {
  std::vector<char> buf(static_cast<size_t>(n) * dtypeSize(dtype) + 1);
  for (int64_t i = 0; i < n; ++i)
    storeElement(buf.data(), i, valueOf(rank, i, salt), dtype);
  return buf;
}

inline std::vector<std::string> splitAxes(const std::string &axes) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = axes.find(',', start);
    out.push_back(axes.substr(start, comma - start));
    if (comma == std::string::npos)
      return out;
    start = comma + 1;
  }
}

const char *const kGroupAxes[] = {"tp", "cp", "dp", "pp", "ep", "tp,cp"};
const mfrt_dtype kDtypes[] = {MFRT_F32, MFRT_BF16, MFRT_F16};

/// Records a mismatch and goes on (so that this rank still joins the
/// collectives its peers wait in).
#define COMMCHECK(cond, what)                                                  \
  do {                                                                         \
    if (!(cond))                                                               \
      fails.add(what);                                                         \
  } while (0)

/// A precondition: records and returns.
#define COMMREQUIRE(cond, what)                                                \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fails.add(what);                                                         \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define COMMCALL(call)                                                         \
  do {                                                                         \
    mfrt_status _s = (call);                                                   \
    if (_s != MFRT_OK) {                                                       \
      fails.add(std::string(#call) + " failed: " + mfrt_last_error());         \
      return;                                                                  \
    }                                                                          \
  } while (0)

/// mfrt_group agrees with MeshLayout::group / groupRank.
inline void checkGroups(const MeshLayout &layout, Failures &fails) {
  const int rank = mfrt_rank();
  for (const char *axes : kGroupAxes) {
    int64_t g = mfrt_group(axes);
    COMMREQUIRE(g >= 0,
                std::string("mfrt_group(") + axes + "): " + mfrt_last_error());
    std::vector<int64_t> members = layout.group(rank, splitAxes(axes));
    COMMCHECK(mfrt_group_size(g) == int(members.size()),
              std::string("size of ") + axes);
    COMMCHECK(mfrt_group_rank(g) ==
                  int(layout.groupRank(rank, splitAxes(axes))),
              std::string("group rank in ") + axes);
    for (size_t i = 0; i < members.size(); ++i)
      COMMCHECK(mfrt_group_member(g, int(i)) == int(members[i]),
                std::string("member ") + std::to_string(i) + " of " + axes);
    COMMCHECK(mfrt_group(axes) == g, "mfrt_group is not idempotent");
  }
}

inline void checkAllGather(const MeshLayout &layout, Failures &fails,
                           int64_t count = 37) {
  const int rank = mfrt_rank();
  for (const char *axes : kGroupAxes)
    for (mfrt_dtype dtype : kDtypes) {
      int64_t g = mfrt_group(axes);
      const int n = mfrt_group_size(g);
      const size_t elem = dtypeSize(dtype);
      std::vector<char> send = makeData(dtype, count, rank, 1);
      std::vector<char> recv(size_t(n * count) * elem + 1);
      COMMCALL(mfrt_all_gather(g, send.data(), recv.data(), count, dtype));
      for (int i = 0; i < n; ++i) {
        std::vector<char> want =
            makeData(dtype, count, mfrt_group_member(g, i), 1);
        COMMCHECK(std::memcmp(recv.data() + size_t(i * count) * elem,
                              want.data(), size_t(count) * elem) == 0,
                  std::string("all_gather on ") + axes + " " +
                      mfrt::comm::dtypeName(dtype) + ": block " +
                      std::to_string(i) + " differs");
      }
      (void)layout;
    }
}

/// Sum over the group in group-rank order, f32 from 0, rounded once.
inline std::vector<char> expectedSum(int64_t g, mfrt_dtype dtype, int64_t total,
                                     int64_t offset, int64_t count,
                                     uint64_t salt) {
  const int n = mfrt_group_size(g);
  std::vector<float> acc(static_cast<size_t>(count), 0.0f);
  for (int i = 0; i < n; ++i) {
    std::vector<char> in =
        makeData(dtype, total, mfrt_group_member(g, i), salt);
    for (int64_t c = 0; c < count; ++c)
      acc[size_t(c)] += 1.0f * loadElement(in.data(), offset + c, dtype);
  }
  std::vector<char> out(static_cast<size_t>(count) * dtypeSize(dtype) + 1);
  for (int64_t c = 0; c < count; ++c)
    storeElement(out.data(), c, acc[size_t(c)], dtype);
  return out;
}

inline void checkReduceScatter(const MeshLayout &, Failures &fails,
                               int64_t count = 29) {
  const int rank = mfrt_rank();
  for (const char *axes : kGroupAxes)
    for (mfrt_dtype dtype : kDtypes) {
      int64_t g = mfrt_group(axes);
      const int n = mfrt_group_size(g), me = mfrt_group_rank(g);
      const size_t elem = dtypeSize(dtype);
      std::vector<char> send = makeData(dtype, n * count, rank, 2);
      std::vector<char> recv(static_cast<size_t>(count) * elem + 1);
      COMMCALL(mfrt_reduce_scatter(g, send.data(), recv.data(), count, dtype));
      std::vector<char> want =
          expectedSum(g, dtype, n * count, me * count, count, 2);
      COMMCHECK(std::memcmp(recv.data(), want.data(), size_t(count) * elem) ==
                    0,
                std::string("reduce_scatter on ") + axes + " " +
                    mfrt::comm::dtypeName(dtype) + " differs");
    }
}

inline void checkAllReduce(const MeshLayout &, Failures &fails,
                           int64_t count = 23) {
  const int rank = mfrt_rank();
  for (const char *axes : kGroupAxes)
    for (mfrt_dtype dtype : kDtypes)
      for (bool inPlace : {false, true}) {
        int64_t g = mfrt_group(axes);
        const size_t elem = dtypeSize(dtype);
        std::vector<char> send = makeData(dtype, count, rank, 3);
        std::vector<char> recv(static_cast<size_t>(count) * elem + 1);
        void *dst = inPlace ? send.data() : recv.data();
        COMMCALL(mfrt_all_reduce(g, send.data(), dst, count, dtype));
        std::vector<char> want = expectedSum(g, dtype, count, 0, count, 3);
        COMMCHECK(std::memcmp(dst, want.data(), size_t(count) * elem) == 0,
                  std::string("all_reduce on ") + axes + " " +
                      mfrt::comm::dtypeName(dtype) +
                      (inPlace ? " (in place)" : "") + " differs");
      }
}

inline void checkRing(const MeshLayout &, Failures &fails, int64_t count = 41) {
  const int rank = mfrt_rank();
  for (const char *axes : {"cp", "ep", "tp,cp"})
    for (mfrt_dtype dtype : kDtypes) {
      int64_t g = mfrt_group(axes);
      const int n = mfrt_group_size(g), me = mfrt_group_rank(g);
      const size_t elem = dtypeSize(dtype), bytes = size_t(count) * elem;
      std::vector<char> k = makeData(dtype, count, rank, 4);
      std::vector<char> v = makeData(dtype, count, rank, 5);
      std::vector<char> kOut(bytes + 1), vOut(bytes + 1);
      COMMCALL(mfrt_kv_ring_step(g, k.data(), v.data(), kOut.data(),
                                 vOut.data(), count, dtype));
      const int prev = mfrt_group_member(g, (me - 1 + n) % n);
      COMMCHECK(
          std::memcmp(kOut.data(), makeData(dtype, count, prev, 4).data(),
                      bytes) == 0 &&
              std::memcmp(vOut.data(), makeData(dtype, count, prev, 5).data(),
                          bytes) == 0,
          std::string("kv_ring_step on ") + axes + " " +
              mfrt::comm::dtypeName(dtype) + ": not the previous rank's K/V");
    }
}

/// mfrt_ring_step_bytes: one opaque buffer around the ring (also on a
/// group of one, where it is a copy).
inline void checkRingBytes(const MeshLayout &, Failures &fails,
                           int64_t bytes = 333) {
  const int rank = mfrt_rank();
  for (const char *axes : {"cp", "ep", "tp,cp"}) {
    int64_t g = mfrt_group(axes);
    const int n = mfrt_group_size(g), me = mfrt_group_rank(g);
    std::vector<char> send(static_cast<size_t>(bytes)),
        recv(static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; ++i)
      send[size_t(i)] = char(rank * 7 + i);
    COMMCALL(mfrt_ring_step_bytes(g, send.data(), recv.data(), bytes));
    const int prev = mfrt_group_member(g, (me - 1 + n) % n);
    bool same = true;
    for (int64_t i = 0; i < bytes; ++i)
      same &= recv[size_t(i)] == char(prev * 7 + i);
    COMMCHECK(same, std::string("ring_step_bytes on ") + axes +
                        ": not the previous rank's buffer");
  }
}

/// PP send from stage 0 to stage 1, then a symmetric exchange (both send
/// first: mfrt_send is buffered).
inline void checkP2P(const MeshLayout &layout, Failures &fails,
                     int64_t count = 1000) {
  const int rank = mfrt_rank();
  int64_t g = mfrt_group("pp");
  if (mfrt_group_size(g) < 2)
    return;
  const int me = mfrt_group_rank(g);
  const int peer = mfrt_group_member(g, me ^ 1);
  if (peer < 0)
    return;
  mfrt_reset_counters();
  std::vector<char> data = makeData(MFRT_F32, count, rank, 6);
  std::vector<char> got(static_cast<size_t>(count) * 4);
  if (me == 0) {
    COMMCALL(mfrt_send(peer, data.data(), count, MFRT_F32));
  } else if (me == 1) {
    COMMCALL(mfrt_recv(peer, got.data(), count, MFRT_F32));
    COMMCHECK(std::memcmp(got.data(), makeData(MFRT_F32, count, peer, 6).data(),
                          size_t(count) * 4) == 0,
              "pp recv differs");
  }
  if (me <= 1) {
    COMMCALL(mfrt_send(peer, data.data(), count, MFRT_F32));
    COMMCALL(mfrt_recv(peer, got.data(), count, MFRT_F32));
    COMMCHECK(std::memcmp(got.data(), makeData(MFRT_F32, count, peer, 6).data(),
                          size_t(count) * 4) == 0,
              "pp exchange differs");
    const mfrt_link link = layout.link(rank, peer) == meshfold::LinkClass::IB
                               ? MFRT_LINK_IB
                               : MFRT_LINK_NVLINK;
    const uint64_t want = uint64_t(count) * 4 * (me == 0 ? 2 : 1);
    COMMCHECK(
        mfrt_bytes_sent_total(MFRT_OP_PP, link) == want,
        "pp bytes: " + std::to_string(mfrt_bytes_sent_total(MFRT_OP_PP, link)) +
            ", want " + std::to_string(want));
  }
}

inline void checkGather(const MeshLayout &, Failures &fails,
                        int64_t count = 17) {
  const int rank = mfrt_rank();
  for (const char *axes : {"tp", "ep"}) {
    int64_t g = mfrt_group(axes);
    const int n = mfrt_group_size(g), me = mfrt_group_rank(g);
    const int root = n - 1;
    std::vector<char> send = makeData(MFRT_BF16, count, rank, 7);
    std::vector<char> recv(size_t(n * count) * 2 + 1);
    COMMCALL(mfrt_gather(g, root, send.data(),
                         me == root ? recv.data() : nullptr, count, MFRT_BF16));
    if (me != root)
      continue;
    for (int i = 0; i < n; ++i)
      COMMCHECK(
          std::memcmp(
              recv.data() + size_t(i * count) * 2,
              makeData(MFRT_BF16, count, mfrt_group_member(g, i), 7).data(),
              size_t(count) * 2) == 0,
          std::string("gather on ") + axes + ": block " + std::to_string(i));
  }
}

inline void checkBarrier(const MeshLayout &, Failures &fails) {
  for (const char *axes : kGroupAxes)
    COMMCALL(mfrt_barrier(mfrt_group(axes)));
}

/// The byte accounting of an all-gather on the dp group, by MeshLayout link
/// class and layer.
inline void checkAccounting(const MeshLayout &layout, Failures &fails) {
  const int rank = mfrt_rank();
  const int64_t count = 100;
  int64_t g = mfrt_group("dp");
  const int n = mfrt_group_size(g);
  std::vector<float> send(static_cast<size_t>(count), 1.0f),
      recv(size_t(n * count));
  mfrt_reset_counters();
  mfrt_set_layer(3);
  COMMCALL(mfrt_all_gather(g, send.data(), recv.data(), count, MFRT_F32));
  mfrt_set_layer(-1);
  COMMCALL(mfrt_all_gather(g, send.data(), recv.data(), count, MFRT_F32));
  uint64_t want[MFRT_LINK_COUNT] = {0, 0};
  for (int i = 0; i < n; ++i) {
    const int m = mfrt_group_member(g, i);
    if (layout.link(rank, m) == meshfold::LinkClass::NVLink)
      want[MFRT_LINK_NVLINK] += uint64_t(count) * 4;
    else if (layout.link(rank, m) == meshfold::LinkClass::IB)
      want[MFRT_LINK_IB] += uint64_t(count) * 4;
  }
  for (int l = 0; l < MFRT_LINK_COUNT; ++l) {
    const mfrt_link link = mfrt_link(l);
    COMMCHECK(
        mfrt_bytes_sent(MFRT_OP_ALL_GATHER, link, 3) == want[l] &&
            mfrt_bytes_sent(MFRT_OP_ALL_GATHER, link, -1) == want[l] &&
            mfrt_bytes_sent(MFRT_OP_ALL_GATHER, link, 2) == 0 &&
            mfrt_bytes_sent_total(MFRT_OP_ALL_GATHER, link) == 2 * want[l] &&
            mfrt_bytes_sent_total(MFRT_OP_REDUCE_SCATTER, link) == 0,
        std::string("all_gather bytes on ") + (l ? "ib" : "nvlink") + ": " +
            std::to_string(mfrt_bytes_sent(MFRT_OP_ALL_GATHER, link, 3)) +
            ", want " + std::to_string(want[l]));
  }
  mfrt_reset_counters();
  COMMCHECK(mfrt_bytes_sent_total(MFRT_OP_ALL_GATHER, MFRT_LINK_IB) == 0,
            "mfrt_reset_counters");
}

//===----------------------------------------------------------------------===//
// Dispatch / combine
//===----------------------------------------------------------------------===//

enum class RoutingKind {
  Random, ///< top-k distinct experts, uniformly at random
  Skewed, ///< every token to the same experts
  Empty,  ///< no tokens anywhere
  Idle,   ///< some ranks have no tokens (an idle DP replica)
  Repeat, ///< every token chooses one expert k times
};

struct Routing {
  int64_t nTokens = 0;
  std::vector<int64_t> experts;
  std::vector<float> weights;
};

/// The routing of `rank` (a pure function of its arguments).
inline Routing routingOf(int64_t rank, RoutingKind kind, int64_t baseTokens,
                         int64_t k, int64_t nExperts, uint64_t seed) {
  Routing r;
  switch (kind) {
  case RoutingKind::Empty:
    return r;
  case RoutingKind::Idle:
    r.nTokens = rank % 3 == 0 ? 0 : baseTokens + rank % 5;
    break;
  case RoutingKind::Random:
  case RoutingKind::Skewed:
  case RoutingKind::Repeat:
    r.nTokens = baseTokens + rank % 3;
    break;
  }
  for (int64_t t = 0; t < r.nTokens; ++t) {
    std::vector<int64_t> chosen;
    for (int64_t j = 0; j < k; ++j) {
      int64_t e;
      if (kind == RoutingKind::Skewed) {
        e = (j == 0 ? 7 : 20 + j) % nExperts;
      } else if (kind == RoutingKind::Repeat) {
        e = (rank + t) % nExperts;
      } else {
        uint64_t h = mix(seed ^ (uint64_t(rank) << 40) ^ (uint64_t(t) << 8) ^
                         uint64_t(j));
        do {
          e = int64_t(h % uint64_t(nExperts));
          h = mix(h + 1);
        } while (std::find(chosen.begin(), chosen.end(), e) != chosen.end() &&
                 int64_t(chosen.size()) < nExperts);
      }
      chosen.push_back(e);
      r.experts.push_back(e);
      r.weights.push_back(
          0.25f +
          float(mix(seed + uint64_t(rank * 977 + t * k + j)) % (1u << 20)) /
              float(1 << 21));
    }
  }
  return r;
}

/// The expert function the test applies: out = x * (1 + (e % 5) / 4) + e / 16
/// in f32, stored in the dtype.
inline float expertValue(int64_t e, float x) {
  return x * (1.0f + float(e % 5) * 0.25f) + float(e) * 0.0625f;
}

struct DispatchCase {
  RoutingKind kind = RoutingKind::Random;
  int64_t baseTokens = 24, hidden = 16, k = 2, nExperts = 32;
  mfrt_dtype dtype = MFRT_F32;
  uint64_t seed = 1;
};

/// Dispatches, checks the received rows, applies the expert function,
/// combines and checks y against the plain computation; in both modes, which
/// must agree bit for bit. Returns y of the hierarchical mode through `yOut`
/// (if non-null).
inline void checkDispatch(const MeshLayout &layout, Failures &fails,
                          const DispatchCase &c) {
  const int rank = mfrt_rank();
  const int64_t g = mfrt_group("ep");
  COMMREQUIRE(g >= 0, "no ep group");
  const int n = mfrt_group_size(g), me = mfrt_group_rank(g);
  const int64_t perRank = c.nExperts / n;
  const size_t elem = dtypeSize(c.dtype), rowBytes = size_t(c.hidden) * elem;
  const int64_t stage = layout.stageOf(rank);
  auto ownerRank = [&](int64_t e) {
    return layout.expertOwner(e, c.nExperts, stage);
  };
  const std::string what = std::string(mfrt::comm::dtypeName(c.dtype)) +
                           " k=" + std::to_string(c.k) +
                           " kind=" + std::to_string(int(c.kind));

  const Routing mine =
      routingOf(rank, c.kind, c.baseTokens, c.k, c.nExperts, c.seed);
  const std::vector<char> x =
      makeData(c.dtype, mine.nTokens * c.hidden, rank, 8 + c.seed);

  // Expected rows at this owner: by (source, token, j).
  std::vector<char> wantRows;
  std::vector<int64_t> wantExperts;
  for (int s = 0; s < n; ++s) {
    const int src = mfrt_group_member(g, s);
    const Routing r =
        routingOf(src, c.kind, c.baseTokens, c.k, c.nExperts, c.seed);
    const std::vector<char> xs =
        makeData(c.dtype, r.nTokens * c.hidden, src, 8 + c.seed);
    for (int64_t t = 0; t < r.nTokens; ++t)
      for (int64_t j = 0; j < c.k; ++j) {
        const int64_t e = r.experts[size_t(t * c.k + j)];
        if (ownerRank(e) != rank)
          continue;
        wantRows.insert(wantRows.end(), xs.begin() + long(size_t(t) * rowBytes),
                        xs.begin() + long(size_t(t + 1) * rowBytes));
        wantExperts.push_back(e - int64_t(me) * perRank);
      }
  }

  // Expected y: node partials (ascending node), each rounded to the dtype.
  std::vector<char> wantY(size_t(mine.nTokens) * rowBytes + 1);
  for (int64_t t = 0; t < mine.nTokens; ++t) {
    std::vector<std::pair<int64_t, int64_t>> byNode;
    for (int64_t j = 0; j < c.k; ++j)
      byNode.push_back(
          {layout.node(ownerRank(mine.experts[size_t(t * c.k + j)])), j});
    std::sort(byNode.begin(), byNode.end());
    for (int64_t col = 0; col < c.hidden; ++col) {
      float yAcc = 0.0f;
      for (size_t a = 0; a < byNode.size();) {
        size_t b = a;
        float acc = 0.0f;
        for (; b < byNode.size() && byNode[b].first == byNode[a].first; ++b) {
          const int64_t slot = t * c.k + byNode[b].second;
          const int64_t e = mine.experts[size_t(slot)];
          std::vector<char> tmp(4);
          storeElement(tmp.data(), 0,
                       expertValue(e, loadElement(x.data(), t * c.hidden + col,
                                                  c.dtype)),
                       c.dtype);
          acc +=
              mine.weights[size_t(slot)] * loadElement(tmp.data(), 0, c.dtype);
        }
        std::vector<char> tmp(4);
        storeElement(tmp.data(), 0, acc, c.dtype);
        yAcc += 1.0f * loadElement(tmp.data(), 0, c.dtype);
        a = b;
      }
      storeElement(wantY.data(), t * c.hidden + col, yAcc, c.dtype);
    }
  }

  std::vector<char> ys[2];
  for (mfrt_dispatch_mode mode :
       {MFRT_DISPATCH_FLAT, MFRT_DISPATCH_HIERARCHICAL}) {
    const std::string where =
        what + (mode == MFRT_DISPATCH_FLAT ? " flat" : " hierarchical");
    mfrt_dispatch *h = nullptr;
    COMMCALL(mfrt_dispatch_tokens(g, mode, x.data(), mine.nTokens, c.hidden,
                                  c.dtype, mine.experts.data(),
                                  mine.weights.data(), c.k, c.nExperts, &h));
    const int64_t count = mfrt_dispatch_count(h);
    const int64_t *experts = mfrt_dispatch_experts(h);
    if (count != int64_t(wantExperts.size())) {
      fails.add(where + ": received " + std::to_string(count) + " rows, want " +
                std::to_string(wantExperts.size()));
    } else {
      COMMCHECK(count == 0 ||
                    std::memcmp(mfrt_dispatch_rows(h), wantRows.data(),
                                size_t(count) * rowBytes) == 0,
                where + ": received rows differ");
      for (int64_t i = 0; i < count; ++i)
        COMMCHECK(experts[i] == wantExperts[size_t(i)],
                  where + ": local expert of row " + std::to_string(i));
    }
    // The experts: out = f(global expert, row).
    std::vector<char> out(static_cast<size_t>(count) * rowBytes + 1);
    const void *rows = mfrt_dispatch_rows(h);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = int64_t(me) * perRank + experts[i];
      for (int64_t col = 0; col < c.hidden; ++col)
        storeElement(
            out.data(), i * c.hidden + col,
            expertValue(e, loadElement(rows, i * c.hidden + col, c.dtype)),
            c.dtype);
    }
    std::vector<char> &y = ys[mode == MFRT_DISPATCH_FLAT ? 0 : 1];
    y.assign(size_t(mine.nTokens) * rowBytes + 1, 0);
    COMMCALL(mfrt_combine_tokens(h, out.data(), y.data()));
    for (int64_t t = 0; t < mine.nTokens; ++t)
      COMMCHECK(std::memcmp(y.data() + size_t(t) * rowBytes,
                            wantY.data() + size_t(t) * rowBytes, rowBytes) == 0,
                where + ": y of token " + std::to_string(t) +
                    " differs from the plain computation");
  }
  COMMCHECK(ys[0] == ys[1], what + ": flat and hierarchical y differ");
}

inline void checkDispatchCases(const MeshLayout &layout, Failures &fails) {
  for (RoutingKind kind :
       {RoutingKind::Random, RoutingKind::Skewed, RoutingKind::Empty,
        RoutingKind::Idle, RoutingKind::Repeat})
    for (mfrt_dtype dtype : kDtypes) {
      DispatchCase c;
      c.kind = kind;
      c.dtype = dtype;
      checkDispatch(layout, fails, c);
    }
  DispatchCase k1;
  k1.k = 1;
  k1.kind = RoutingKind::Skewed;
  checkDispatch(layout, fails, k1);
  // With 3+ experts of a token on one node, a relay's partial sum has 3+
  // terms and its order shows in f32.
  for (mfrt_dtype dtype : {MFRT_F32, MFRT_BF16}) {
    DispatchCase k4;
    k4.k = 4;
    k4.dtype = dtype;
    checkDispatch(layout, fails, k4);
  }
}

/// Dispatch under an expert placement with replicas (experts 7 and 21, the
/// Skewed routing's, hot): received local ids are slots of this rank's EP
/// coordinate, every replica of a hot expert gets rows, and y equals the
/// contiguous placement's (f32; the nodes' partials may group differently).
inline void checkPlacedDispatch(const MeshLayout &layout, Failures &fails) {
  const int rank = mfrt_rank();
  const int64_t g = mfrt_group("ep");
  COMMREQUIRE(g >= 0, "no ep group");
  const int n = mfrt_group_size(g);
  const int64_t nExperts = 32, hidden = 8, k = 2;
  std::vector<double> load(size_t(nExperts), 1.0);
  load[7] = load[21] = 1000;
  const meshfold::ExpertPlacement p =
      meshfold::balanceExperts(load, n, /*redundant=*/n);
  COMMREQUIRE(p.check().empty(), "placement: " + p.check());
  const int64_t coord = layout.coord(rank, "ep");
  for (RoutingKind kind : {RoutingKind::Skewed, RoutingKind::Random}) {
    const Routing mine = routingOf(rank, kind, 24, k, nExperts, 3);
    const std::vector<char> x =
        makeData(MFRT_F32, mine.nTokens * hidden, rank, 5);
    std::vector<float> ys[2];
    std::vector<float> hotRows(size_t(n), 0.0f);
    for (int placed = 0; placed < 2; ++placed) {
      mfrt_dispatch *h = nullptr;
      COMMCALL(mfrt_dispatch_tokens_placed(
          g, MFRT_DISPATCH_HIERARCHICAL, x.data(), mine.nTokens, hidden,
          MFRT_F32, mine.experts.data(), mine.weights.data(), k, nExperts,
          placed ? p.experts.data() : nullptr,
          placed ? int64_t(p.experts.size()) : 0, &h));
      const int64_t count = mfrt_dispatch_count(h);
      const int64_t *local = mfrt_dispatch_experts(h);
      const float *rows = static_cast<const float *>(mfrt_dispatch_rows(h));
      std::vector<float> out(size_t(count * hidden) + 1);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t slots = placed ? p.slots : nExperts / n;
        COMMCHECK(local[i] >= 0 && local[i] < slots,
                  "placed dispatch: local slot " + std::to_string(local[i]));
        const int64_t e = placed ? p.experts[size_t(coord * p.slots + local[i])]
                                 : coord * slots + local[i];
        if (placed && e == 7)
          hotRows[size_t(mfrt_group_rank(g))] += 1.0f;
        for (int64_t col = 0; col < hidden; ++col)
          out[size_t(i * hidden + col)] =
              expertValue(e, rows[size_t(i * hidden + col)]);
      }
      ys[placed].assign(size_t(mine.nTokens * hidden) + 1, 0.0f);
      COMMCALL(mfrt_combine_tokens(h, out.data(), ys[placed].data()));
    }
    for (size_t i = 0; i + 1 < ys[0].size(); ++i)
      COMMCHECK(std::fabs(ys[1][i] - ys[0][i]) <=
                    1e-6f * std::max(1.0f, std::fabs(ys[0][i])),
                "placed dispatch: y differs from the contiguous one at " +
                    std::to_string(i));
    if (kind != RoutingKind::Skewed)
      continue;
    // Every replica of expert 7 received some of its rows.
    std::vector<float> all(size_t(n), 0.0f);
    COMMCALL(mfrt_all_reduce(g, hotRows.data(), all.data(), n, MFRT_F32));
    for (int64_t slot : p.replicasOf(7))
      for (int m = 0; m < n; ++m)
        if (layout.coord(mfrt_group_member(g, m), "ep") == p.coordOf(slot))
          COMMCHECK(all[size_t(m)] > 0,
                    "placed dispatch: the replica of expert 7 on EP rank " +
                        std::to_string(p.coordOf(slot)) + " got no rows");
  }
}

#undef COMMCHECK
#undef COMMREQUIRE
/// Two pools (mfrt_options.second_plan) of `first` then `second`: each
/// rank's pool and sizes; the same axes name each pool's own groups, in
/// global ranks; a sum over each pool's ep group; and transfers: first-pool
/// rank r sends 100 floats of r to second-pool rank r mod D, which takes
/// its messages in rank order, counted as kv_transfer over IB only.
inline void checkPools(const MeshLayout &first, const MeshLayout &second,
                       Failures &fails) {
  const int p = int(first.numDevices()), d = int(second.numDevices());
  const int rank = mfrt_rank(), pool = rank < p ? 0 : 1;
  const std::string me = "rank " + std::to_string(rank) + ": ";
  if (mfrt_world_size() != p + d || mfrt_pool_size(0) != p ||
      mfrt_pool_size(1) != d || mfrt_pool() != pool)
    fails.add(me + "pool " + std::to_string(mfrt_pool()) + " of sizes " +
              std::to_string(mfrt_pool_size(0)) + ", " +
              std::to_string(mfrt_pool_size(1)));
  const MeshLayout &layout = pool == 0 ? first : second;
  const int base = pool == 0 ? 0 : p;
  for (const char *axes : {"tp", "dp", "ep"}) {
    int64_t g = mfrt_group(axes);
    std::vector<int64_t> want = layout.group(rank - base, {axes});
    bool same = mfrt_group_size(g) == int(want.size());
    for (size_t i = 0; same && i < want.size(); ++i)
      same = mfrt_group_member(g, int(i)) == int(want[i]) + base;
    if (!same)
      fails.add(me + "group " + axes);
  }
  float v = float(rank), sum = 0, want = 0;
  COMMCALL(mfrt_all_reduce(mfrt_group("ep"), &v, &sum, 1, MFRT_F32));
  for (int64_t m : layout.group(rank - base, {"ep"}))
    want += float(m + base);
  if (sum != want)
    fails.add(me + "ep sum " + std::to_string(sum) + ", want " +
              std::to_string(want));
  std::vector<float> buf(100, float(rank));
  if (pool == 0) {
    COMMCALL(mfrt_transfer_send(p + rank % d, buf.data(), 100, MFRT_F32));
    if (mfrt_bytes_sent_total(MFRT_OP_KV_TRANSFER, MFRT_LINK_IB) != 400 ||
        mfrt_bytes_sent_total(MFRT_OP_KV_TRANSFER, MFRT_LINK_NVLINK) != 0)
      fails.add(me + "transfer bytes");
    return;
  }
  for (int from = rank - p; from < p; from += d) {
    COMMCALL(mfrt_transfer_recv(from, buf.data(), 100, MFRT_F32));
    if (buf[0] != float(from) || buf[99] != float(from))
      fails.add(me + "got " + std::to_string(buf[0]) + " from " +
                std::to_string(from));
  }
}

#undef COMMCALL

} // namespace commcheck

#endif // MESHFOLD_UNITTESTS_RUNTIME_COMMCHECKS_H
