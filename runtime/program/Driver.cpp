//===- Driver.cpp - the emitted executable's main and runtime hooks -------===//
//
// Every executable meshfold emits links this file: it parses the command
// line, checks the weights file against the embedded manifest, reads the
// prompts and runs the compiled `prefill` SPMD program on every rank of the
// plan (threads of the local backend, or MPI processes). Each rank loads
// only its slices of the weights; requests are spread over the DP replicas
// by a load balancer, a replica without a request runs a dummy batch so the
// MoE rendezvous completes; the outputs (last-token logits and the KV cache)
// are assembled and written once.
//
//===----------------------------------------------------------------------===//

#include "mfrt/CodegenABI.h"
#include "mfrt/program/DeviceBuffers.h"
#include "meshfold/Support/Manifest.h"
#include "meshfold/Support/PlanText.h"
#include "mfrt/io/Prompts.h"
#include "mfrt/program/RankState.h"
#include "mfrt/io/Safetensors.h"
#include "mfrt/program/Trace.h"
#include "mfrt/mfrt.h"

#include "meshfold/Support/DType.h"
#include "meshfold/Support/TrafficModel.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using namespace mfrt;
using namespace meshfold;

extern "C" {
/// The manifest the compiler embeds.
extern const char __mf_manifest[];
/// The compiled entry point (C interface of `func.func @prefill`).
void _mlir_ciface_prefill(StridedMemRefType<int64_t, 1> *tokens);
}

namespace {
const char *gProgram = "prefill";
thread_local RankState tRank;

/// What every rank shares: the manifest, the mapped weights file, the
/// requests and their outputs.
struct Program {
  /// Bytes each rank sent: [rank][layer + 1][kind][link] (layer -1 first).
  bool reportTraffic = false;
  std::vector<std::vector<uint64_t>> traffic;
  Manifest manifest;
  std::unique_ptr<SafetensorsFile> weights;
  std::vector<std::vector<int64_t>> requests;
  std::vector<std::unique_ptr<RequestOutput>> outputs;
};
Program gProgramState;

[[noreturn]] void die(const std::string &msg) {
  // Ranks are threads: the first one to fail speaks for the process.
  static std::mutex once;
  once.lock();
  std::fprintf(stderr, "%s: error: %s\n", gProgram, msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The checkpoint tensor `name`, after checking its presence, dtype and
/// shape; the first failed check is the error.
const TensorInfo *findTensor(const SafetensorsFile &file,
                             const std::string &name,
                             const std::vector<int64_t> &shape,
                             std::string &error) {
  const TensorInfo *t = file.find(name);
  if (!t) {
    error = file.path() + ": weight '" + name +
            "' is missing (expected shape " + formatShape(shape) + ")";
    return nullptr;
  }
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 &&
      t->dtype != DType::F16) {
    error = file.path() + ": weight '" + name + "' has dtype " +
            dtypeName(t->dtype) + ", expected F32, BF16 or F16";
    return nullptr;
  }
  if (t->shape != shape) {
    error = file.path() + ": weight '" + name + "' has shape " +
            formatShape(t->shape) + ", the model expects " +
            formatShape(shape) + " (a weights file for a different model?)";
    return nullptr;
  }
  return t;
}

/// The checkpoint names and whole (unsharded) shapes of `p`: one tensor, or
/// one per expert of a stacked weight.
std::vector<std::pair<std::string, std::vector<int64_t>>>
checkpointTensors(const ManifestParam &p) {
  std::vector<int64_t> global = p.globalShape();
  if (!p.isStacked())
    return {{p.name, global}};
  std::vector<int64_t> one(global.begin() + 1, global.end());
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (int64_t e = 0; e < global[0]; ++e)
    out.push_back({p.expertName(e), one});
  return out;
}

/// Checks the dtype and shape of every tensor the model reads (all stages,
/// all experts) that the checkpoint holds, before any rank starts: a file
/// for another model gets the same error, the first wrong tensor in the
/// model's order, on every run. A missing tensor is left to the ranks that
/// read it, so that the error names the rank that needed it.
void checkWeights(const Manifest &m, const SafetensorsFile &file) {
  std::string error;
  for (const ManifestParam &p : m.params)
    for (const auto &[name, shape] : checkpointTensors(p))
      if (file.find(name) && !findTensor(file, name, shape, error))
        die(error);
}

/// Reads one checkpoint tensor whole, checking presence, dtype and shape.
std::vector<float> readTensor(const SafetensorsFile &file,
                              const std::string &name,
                              const std::vector<int64_t> &shape) {
  std::string error;
  const TensorInfo *t = findTensor(file, name, shape, error);
  if (!t)
    fatal(error);
  std::vector<float> out(size_t(product(shape)));
  if (!readAsF32(*t, out.data(), out.size(), &error))
    fatal(error);
  return out;
}

/// Slice `index` of `parts` of `full` (shape `shape`) along `dim`.
std::vector<float> sliceAlong(const std::vector<float> &full,
                              const std::vector<int64_t> &shape, int64_t dim,
                              int64_t parts, int64_t index) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  int64_t len = shape[dim] / parts;
  std::vector<float> out(size_t(outer * len * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(&out[size_t(o * len * inner)],
                &full[size_t((o * shape[dim] + index * len) * inner)],
                size_t(len * inner) * sizeof(float));
  return out;
}

/// The runtime group of `axes` for this rank, made once per rank.
int64_t groupOf(std::map<std::string, int64_t> &cache,
                const std::string &axes) {
  auto it = cache.find(axes);
  if (it != cache.end())
    return it->second;
  int64_t g = mfrt_group(axes.c_str());
  if (g < 0)
    fatal(std::string("group '") + axes + "': " + mfrt_last_error());
  cache[axes] = g;
  return g;
}

/// `values` rounded to bf16 (nearest even). A bf16 checkpoint's values,
/// widened exactly to f32 on reading, come back bit for bit.
std::vector<uint16_t> toBF16(const std::vector<float> &values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = f32ToBF16(values[i]);
  return out;
}

/// Loads this rank's slice of every weight, in the storage type the
/// manifest names for it.
void loadWeights(RankState &rs, std::map<std::string, int64_t> &groups) {
  const Program &prog = gProgramState;
  rs.params.resize(prog.manifest.params.size());
  // Only the weights of this rank's pipeline stage.
  int64_t stage = 0;
  if (prog.manifest.plan.find("pp:") != std::string::npos)
    stage = mfrt_group_rank(groupOf(groups, "pp"));
  for (const ManifestParam &p : prog.manifest.params) {
    if (!p.stages.empty() &&
        std::find(p.stages.begin(), p.stages.end(), stage) == p.stages.end())
      continue;
    std::vector<int64_t> global = p.globalShape();
    int64_t index = 0;
    if (p.shardDim >= 0) {
      int64_t g = groupOf(groups, p.shardAxis);
      index = int64_t(mfrt_group_rank(g)) * p.shardParts / mfrt_group_size(g);
    }
    WeightSlice &slice = rs.params[p.id];
    std::vector<float> &buf = slice.f32;
    if (!p.isStacked()) {
      std::vector<float> full = readTensor(*prog.weights, p.name, global);
      buf = p.shardDim >= 0
                ? sliceAlong(full, global, p.shardDim, p.shardParts, index)
                : std::move(full);
    } else {
      // Stacked experts: this rank's block, one checkpoint tensor per expert.
      std::vector<int64_t> oneGlobal(global.begin() + 1, global.end());
      int64_t first = p.shardDim == 0 ? index * p.shape[0] : 0;
      for (int64_t e = 0; e < p.shape[0]; ++e) {
        std::vector<float> full =
            readTensor(*prog.weights, p.expertName(first + e), oneGlobal);
        if (p.shardDim > 0)
          full =
              sliceAlong(full, oneGlobal, p.shardDim - 1, p.shardParts, index);
        buf.insert(buf.end(), full.begin(), full.end());
      }
    }
    if (int64_t(buf.size()) != product(p.shape))
      fatal("internal: weight '" + p.name + "' slice has the wrong size");
    if (p.bf16) {
      slice.bf16 = toBF16(buf);
      std::vector<float>().swap(buf);
    }
  }
}

/// Requests per DP replica: longest first, each to the replica with the
/// least work so far (token counts), so that replicas finish together.
std::vector<std::vector<int64_t>>
balance(const std::vector<std::vector<int64_t>> &requests, int64_t replicas) {
  std::vector<int64_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return requests[a].size() > requests[b].size();
  });
  std::vector<std::vector<int64_t>> assigned(static_cast<size_t>(replicas));
  std::vector<int64_t> load(static_cast<size_t>(replicas), 0);
  for (int64_t r : order) {
    size_t best =
        size_t(std::min_element(load.begin(), load.end()) - load.begin());
    assigned[best].push_back(r);
    load[best] += int64_t(requests[r].size());
  }
  // Each replica runs its requests in prompt order.
  for (auto &list : assigned)
    std::sort(list.begin(), list.end());
  return assigned;
}

/// Processes of a multi-process run each hold the outputs their ranks
/// wrote; rank 0 collects them: every other rank sends its K/V entries and
/// logits as one message (its size first).
bool gCollectOutputs = false;
/// Hops of the traced token that rank 0 received from the other processes.
std::vector<mfrt_trace_hop> gTraceHops;

/// One message of any size to rank 0: its size in 4-byte words, then the
/// words (the last one zero-padded).
void sendToRoot(const void *data, size_t bytes, const char *what) {
  int64_t words = int64_t((bytes + 3) / 4);
  std::vector<char> padded(size_t(words) * 4, 0);
  if (bytes)
    std::memcpy(padded.data(), data, bytes);
  float size[2];
  std::memcpy(size, &words, sizeof(words));
  if (sendHost(0, size, 2, MFRT_F32) != MFRT_OK ||
      (words && sendHost(0, padded.data(), words, MFRT_F32) != MFRT_OK))
    fatal(std::string(what) + ": " + mfrt_last_error());
}

/// Receives one sendToRoot message from `peer`.
std::vector<char> recvFromRank(int peer, const char *what) {
  float size[2];
  int64_t words = 0;
  if (recvHost(peer, size, 2, MFRT_F32) != MFRT_OK)
    fatal(std::string(what) + ": " + mfrt_last_error());
  std::memcpy(&words, size, sizeof(words));
  std::vector<char> in(size_t(words) * 4);
  if (words > 0 && recvHost(peer, in.data(), words, MFRT_F32) != MFRT_OK)
    fatal(std::string(what) + ": " + mfrt_last_error());
  return in;
}

void collectOutputs(Program &prog) {
  const Manifest &m = prog.manifest;
  int world = mfrt_world_size(), me = mfrt_rank();
  // Serialise: per written (request, layer, position, head): 4 int64 then
  // K and V (d_h floats each); per recorded logits: -1 and the request.
  std::vector<char> blob;
  auto put = [&](const void *p, size_t n) {
    blob.insert(blob.end(), static_cast<const char *>(p),
                static_cast<const char *>(p) + n);
  };
  if (me != 0) {
    for (size_t r = 0; r < prog.outputs.size(); ++r) {
      RequestOutput &o = *prog.outputs[r];
      for (int64_t l = 0; l < m.layers; ++l)
        for (int64_t ph = 0; ph < o.tokens * m.kvHeads; ++ph) {
          if (!o.written[l][ph])
            continue;
          int64_t hdr[4] = {int64_t(r), l, ph / m.kvHeads, ph % m.kvHeads};
          put(hdr, sizeof(hdr));
          put(&o.keys[l][ph * m.headDim], m.headDim * sizeof(float));
          put(&o.values[l][ph * m.headDim], m.headDim * sizeof(float));
        }
      if (o.haveLogits) {
        int64_t hdr[4] = {-1, int64_t(r), 0, 0};
        put(hdr, sizeof(hdr));
        put(o.logits.data(), o.logits.size() * sizeof(float));
      }
      for (size_t p = 0; p < o.promptWritten.size(); ++p)
        if (o.promptWritten[p]) {
          int64_t hdr[4] = {-2, int64_t(r), int64_t(p), 0};
          put(hdr, sizeof(hdr));
          put(&o.promptLogits[p * size_t(m.vocab)],
              size_t(m.vocab) * sizeof(float));
        }
    }
    sendToRoot(blob.data(), blob.size(), "sending outputs to rank 0");
    return;
  }
  for (int peer = 1; peer < world; ++peer) {
    std::vector<char> in = recvFromRank(peer, "collecting outputs");
    size_t at = 0;
    while (at + 4 * sizeof(int64_t) <= in.size()) {
      int64_t hdr[4];
      std::memcpy(hdr, &in[at], sizeof(hdr));
      at += sizeof(hdr);
      if (hdr[0] == -2) {
        RequestOutput &o = *prog.outputs[size_t(hdr[1])];
        if (o.promptWritten.empty()) {
          o.promptLogits.assign(size_t(o.tokens * m.vocab), 0.0f);
          o.promptWritten.assign(size_t(o.tokens), 0);
        }
        std::memcpy(&o.promptLogits[size_t(hdr[2] * m.vocab)], &in[at],
                    size_t(m.vocab) * 4);
        at += size_t(m.vocab) * 4;
        o.promptWritten[size_t(hdr[2])] = 1;
        continue;
      }
      if (hdr[0] < 0) {
        RequestOutput &o = *prog.outputs[size_t(hdr[1])];
        o.logits.resize(size_t(m.vocab));
        std::memcpy(o.logits.data(), &in[at], size_t(m.vocab) * 4);
        at += size_t(m.vocab) * 4;
        o.haveLogits = true;
        continue;
      }
      RequestOutput &o = *prog.outputs[size_t(hdr[0])];
      int64_t ph = hdr[2] * m.kvHeads + hdr[3];
      std::memcpy(&o.keys[hdr[1]][ph * m.headDim], &in[at], m.headDim * 4);
      at += size_t(m.headDim) * 4;
      std::memcpy(&o.values[hdr[1]][ph * m.headDim], &in[at], m.headDim * 4);
      at += size_t(m.headDim) * 4;
      o.written[hdr[1]][ph] = 1;
    }
  }
}

/// Under MPI each process saw its own part of the traced token's journey:
/// every rank sends rank 0 its sightings and hops (as int64 words).
void collectTrace() {
  TraceSightings &seen = traceSightings();
  int world = mfrt_world_size(), me = mfrt_rank();
  if (me != 0) {
    std::vector<int64_t> words{seen.landing, int64_t(seen.kv.size())};
    words.insert(words.end(), seen.kv.begin(), seen.kv.end());
    int64_t n = mfrt_trace_hops(nullptr, 0);
    std::vector<mfrt_trace_hop> hops(static_cast<size_t>(n));
    mfrt_trace_hops(hops.data(), n);
    for (const mfrt_trace_hop &h : hops)
      words.insert(words.end(), {h.layer, h.op, h.kind, h.from, h.to});
    sendToRoot(words.data(), words.size() * sizeof(int64_t),
               "sending the token trace to rank 0");
    return;
  }
  for (int peer = 1; peer < world; ++peer) {
    std::vector<char> in = recvFromRank(peer, "collecting the token trace");
    std::vector<int64_t> words(in.size() / sizeof(int64_t));
    if (!words.empty())
      std::memcpy(words.data(), in.data(), words.size() * sizeof(int64_t));
    if (words.size() < 2)
      fatal("internal: a short token trace from rank " + std::to_string(peer));
    if (words[0] >= 0)
      seen.landing = int(words[0]);
    size_t at = 2;
    for (int64_t i = 0; i < words[1] && at < words.size(); ++i)
      seen.kv.insert(int(words[at++]));
    for (; at + 5 <= words.size(); at += 5)
      gTraceHops.push_back(
          mfrt_trace_hop{words[at], words[at + 1], int32_t(words[at + 2]),
                         int32_t(words[at + 3]), int32_t(words[at + 4])});
  }
}

/// Under MPI each process has its own rank's byte counters: rank 0 collects
/// them for --report traffic (read before any of these messages).
void collectTraffic(Program &prog) {
  int world = mfrt_world_size(), me = mfrt_rank();
  if (me != 0) {
    const std::vector<uint64_t> &t = prog.traffic[size_t(me)];
    sendToRoot(t.data(), t.size() * sizeof(uint64_t),
               "sending the traffic counters to rank 0");
    return;
  }
  for (int peer = 1; peer < world; ++peer) {
    std::vector<char> in = recvFromRank(peer, "collecting traffic counters");
    std::vector<uint64_t> &t = prog.traffic[size_t(peer)];
    t.assign(in.size() / sizeof(uint64_t), 0);
    if (t.size() != prog.traffic[0].size())
      fatal("internal: rank " + std::to_string(peer) + " sent " +
            std::to_string(t.size()) + " traffic counters, expected " +
            std::to_string(prog.traffic[0].size()));
    std::memcpy(t.data(), in.data(), t.size() * sizeof(uint64_t));
  }
}

int rankMain(void *) {
  Program &prog = gProgramState;
  RankState &rs = tRank;
  rs.manifest = &prog.manifest;
  rs.rank = mfrt_rank();
  std::map<std::string, int64_t> groups;
  for (const ManifestGroup &g : prog.manifest.groups)
    rs.groups.push_back(groupOf(groups, g.axes));
  loadWeights(rs, groups);
  uploadWeights(rs); // CUDA mode: to the rank's device

  int64_t replicas = 1, replica = 0;
  if (prog.manifest.plan.find("dp:") != std::string::npos) {
    int64_t dp = groupOf(groups, "dp");
    replicas = mfrt_group_size(dp);
    replica = mfrt_group_rank(dp);
  }
  std::vector<std::vector<int64_t>> assigned = balance(prog.requests, replicas);
  size_t rounds = 0;
  for (const auto &list : assigned)
    rounds = std::max(rounds, list.size());
  std::vector<int64_t> dummy = {0};
  for (size_t round = 0; round < rounds; ++round) {
    const std::vector<int64_t> &mine = assigned[replica];
    bool real = round < mine.size();
    std::vector<int64_t> tokens = real ? prog.requests[mine[round]] : dummy;
    rs.output = real ? prog.outputs[mine[round]].get() : nullptr;
    rs.request = real ? mine[round] : -1;
    mfrt_trace_new_request();
    // Kernels may read the token ids (CUDA mode: managed memory).
    SharedBuffer tokenBuf(tokens.size() * sizeof(int64_t));
    std::memcpy(tokenBuf.data(), tokens.data(), tokenBuf.size());
    StridedMemRefType<int64_t, 1> in;
    in.basePtr = in.data = reinterpret_cast<int64_t *>(tokenBuf.data());
    in.offset = 0;
    in.sizes[0] = int64_t(tokens.size());
    in.strides[0] = 1;
    _mlir_ciface_prefill(&in);
  }
  rs.output = nullptr;
  rs.request = -1;
  if (prog.reportTraffic) {
    std::vector<uint64_t> &t = prog.traffic[size_t(rs.rank)];
    t.assign(size_t((prog.manifest.layers + 1) * MFRT_OP_KIND_COUNT *
                    MFRT_LINK_COUNT),
             0);
    size_t at = 0;
    for (int64_t l = -1; l < prog.manifest.layers; ++l)
      for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
        for (int n = 0; n < MFRT_LINK_COUNT; ++n)
          t[at++] = mfrt_bytes_sent(mfrt_op_kind(k), mfrt_link(n), l);
  }
  if (gCollectOutputs && prog.reportTraffic)
    collectTraffic(prog);
  if (gCollectOutputs && traceConfig().traceToken)
    collectTrace();
  if (gCollectOutputs)
    collectOutputs(prog);
  releaseWeights(rs);
  return 0;
}

/// --report traffic: per GPU and layer, the elements each collective sent
/// over each link class, measured by the runtime's counters (mean and max
/// over the GPUs that sent any), also in units of T*d.
void printTraffic(const Program &prog, const std::string &plan) {
  const Manifest &m = prog.manifest;
  std::string error;
  std::optional<meshfold::MeshLayout> layout =
      meshfold::layoutFromPlanText(plan, &error);
  if (!layout)
    return;
  int64_t replicas = layout->axisSize("dp");
  int64_t tokens = 0;
  for (const auto &r : prog.requests)
    tokens += int64_t(r.size());
  double td = double(tokens) / double(replicas) * double(m.hidden);
  std::printf("traffic per GPU per layer, f32 elements sent (T*d: T = %.1f "
              "prompt tokens per DP replica, d = %lld)\n",
              double(tokens) / double(replicas), (long long)m.hidden);
  std::printf("  %-6s %-15s %-7s %14s %14s %10s\n", "layer", "collective",
              "link", "mean/GPU", "max/GPU", "mean/T*d");
  const char *links[] = {"nvlink", "ib"};
  for (int64_t l = -1; l < m.layers; ++l)
    for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
      for (int n = 0; n < MFRT_LINK_COUNT; ++n) {
        size_t at =
            size_t(((l + 1) * MFRT_OP_KIND_COUNT + k) * MFRT_LINK_COUNT + n);
        uint64_t sum = 0, max = 0;
        int64_t senders = 0;
        for (const auto &t : prog.traffic) {
          uint64_t e = t.empty() ? 0 : t[at] / sizeof(float);
          sum += e;
          max = std::max(max, e);
          senders += e > 0;
        }
        if (!senders)
          continue;
        double mean = double(sum) / double(senders);
        std::printf("  %-6s %-15s %-7s %14.1f %14llu %10.4f\n",
                    l < 0 ? "-" : std::to_string(l).c_str(),
                    mfrt_op_kind_name(mfrt_op_kind(k)), links[n], mean,
                    (unsigned long long)max, mean / td);
      }
  // Beside it, the analytic figures for this plan (uniform routing).
  meshfold::TrafficModelInput model{m.hidden, m.kvHeads, m.headDim, m.experts,
                                    m.topK,   m.layers,  true};
  std::vector<meshfold::TrafficRow> rows =
      meshfold::analyticTraffic(*layout, model);
  std::printf("analytic per GPU per layer (uniform routing; PP amortized over "
              "a stage), in T*d, and time at %g / %g GB/s, bf16, for T = "
              "%.1f:\n",
              layout->bandwidthGBps(meshfold::LinkClass::NVLink),
              layout->bandwidthGBps(meshfold::LinkClass::IB),
              double(tokens) / double(replicas));
  for (const meshfold::TrafficRow &r : rows) {
    double us = meshfold::trafficSeconds(*layout, {r},
                                         double(tokens) / double(replicas),
                                         m.hidden, 2.0) *
                1e6;
    std::printf("  %-15s nvlink %8.4f  ib %8.4f  %10.3f us\n",
                r.collective.c_str(), r.nvlink, r.ib, us);
  }

  // Side by side, in the analytic figures' units: all GPUs' elements of a
  // collective over all layers, per GPU per layer of its stage (the PP send
  // amortized the same way), in T*d. Measured bytes include what travels
  // with the rows (routing metadata, K/V positions, counts); the analytic
  // figures count the rows only.
  const double gpuLayers = double(layout->numDevices()) * double(m.layers) /
                           double(layout->axisSize("pp"));
  auto measured = [&](mfrt_op_kind kind, int link) {
    uint64_t sum = 0;
    for (const auto &t : prog.traffic)
      for (int64_t l = -1; !t.empty() && l < m.layers; ++l)
        sum +=
            t[size_t(((l + 1) * MFRT_OP_KIND_COUNT + kind) * MFRT_LINK_COUNT +
                     link)] /
            sizeof(float);
    return double(sum) / gpuLayers / td;
  };
  std::printf("measured vs analytic, per GPU per layer in T*d:\n");
  const double perReplica = double(tokens) / double(replicas);
  std::printf("  %-22s %-7s %10s %10s %8s %12s\n", "collective", "link",
              "measured", "analytic", "diff", "time (bf16)");
  auto line = [&](const std::string &what, const char *link, double got,
                  double want) {
    const bool ib = std::strcmp(link, "ib") == 0;
    const double us = got * perReplica * double(m.hidden) * 2.0 /
                      (layout->bandwidthGBps(ib ? meshfold::LinkClass::IB
                                                : meshfold::LinkClass::NVLink) *
                       1e9) *
                      1e6;
    if (got == 0 && want == 0)
      return;
    std::string diff = "-";
    if (want > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%+.1f%%", (got / want - 1.0) * 100.0);
      diff = buf;
    }
    std::printf("  %-22s %-7s %10.4f %10.4f %8s %9.3f us\n", what.c_str(), link,
                got, want, diff.c_str(), us);
  };
  const std::pair<const char *, mfrt_op_kind> kinds[] = {
      {"all_gather", MFRT_OP_ALL_GATHER},
      {"kv_ring", MFRT_OP_KV_RING},
      {"reduce_scatter", MFRT_OP_REDUCE_SCATTER},
      {"dispatch", MFRT_OP_DISPATCH},
      {"combine", MFRT_OP_COMBINE},
      {"pp", MFRT_OP_PP}};
  double epIB = 0, epIBWant = 0;
  for (auto [name, kind] : kinds) {
    auto row = std::find_if(rows.begin(), rows.end(), [&](const auto &r) {
      return r.collective == name;
    });
    double wantNV = row == rows.end() ? 0 : row->nvlink;
    double wantIB = row == rows.end() ? 0 : row->ib;
    line(name, "nvlink", measured(kind, MFRT_LINK_NVLINK), wantNV);
    line(name, "ib", measured(kind, MFRT_LINK_IB), wantIB);
    if (kind == MFRT_OP_DISPATCH || kind == MFRT_OP_COMBINE) {
      epIB += measured(kind, MFRT_LINK_IB);
      epIBWant += wantIB;
    }
  }
  line("ep (dispatch+combine)", "ib", epIB, epIBWant);
}

/// --trace-token: the travel log (and --trace-svg's map) from the hops the
/// runtime recorded.
void reportTrace(const Program &prog, const std::string &plan) {
  std::string error;
  std::optional<meshfold::MeshLayout> layout =
      meshfold::layoutFromPlanText(plan, &error);
  if (!layout)
    die(error);
  const TraceConfig &c = traceConfig();
  std::vector<mfrt_trace_hop> hops(
      static_cast<size_t>(mfrt_trace_hops(nullptr, 0)));
  mfrt_trace_hops(hops.data(), int64_t(hops.size()));
  hops.insert(hops.end(), gTraceHops.begin(), gTraceHops.end());
  TraceSightings &seen = traceSightings();
  TraceLog log = buildTraceLog(*layout, hops, seen.landing, seen.kv);
  int64_t replica = seen.landing >= 0 && layout->hasAxis("dp")
                        ? layout->coord(seen.landing, "dp")
                        : 0;
  printTraceLog(*layout, log, replica,
                int64_t(prog.requests[size_t(c.request)].size()));
  if (!c.svgPath.empty() && !writeTraceSvg(c.svgPath, *layout, log, &error))
    die(error);
}

void usage() {
  std::printf(
      "usage: %s --weights W.safetensors --prompts PROMPTS.txt --out "
      "OUT.safetensors [--backend local|mpi|nccl] [--timeout S] [--quiet]\n\n"
      "Runs prefill for every prompt (one request per line, token ids "
      "separated by spaces)\non every rank of the compiled plan and writes, "
      "per request r, req{r}.logits [V]\n(last prompt position) and "
      "req{r}.layers.{i}.k / .v [T, n_kv, d_h] (K after RoPE), f32.\n\n"
      "  --weights FILE   safetensors with Hugging Face Mixtral names (F32, "
      "BF16 or F16)\n"
      "  --prompts FILE   prompts, one request per line\n"
      "  --out FILE       output safetensors (written only on success)\n"
      "  --backend NAME   local (default: every rank a thread of this "
      "process) or mpi\n"
      "                   (one process per rank under mpirun) or nccl "
      "(--target cuda\n"
      "                   programs: one process per GPU under mpirun)\n"
      "  --timeout S      seconds a collective waits for its peers (default "
      "60)\n"
      "  --report traffic print, per GPU and layer, the elements each "
      "collective sent\n"
      "                   over NVLink and IB (the runtime's counters; "
      "under mpi\n"
      "                   rank 0 collects them), beside the analytic "
      "figures\n"
      "  --trace-token REQ:POS\n"
      "                   follow the data of prompt position POS of request "
      "REQ (0-based)\n"
      "                   through the collectives: one travel-log line per "
      "comm op it\n"
      "                   took part in (GPUs that held any of it, node "
      "crossings split\n"
      "                   into EP and PP, comm ops), recorded by the runtime "
      "from the\n"
      "                   messages that carried it; the whole trip last\n"
      "  --trace-svg FILE a map of the traced token's route (SVG)\n"
      "  --force-routing FILE|random[:SEED]\n"
      "                   benchmarking and test hook: FILE fixes the traced "
      "token's\n"
      "                   experts, one line per layer 'LAYER: E1 E2 ...' "
      "(layers from 1,\n"
      "                   expert ids 0..n_experts-1, top_k of them); random "
      "draws every\n"
      "                   token's experts uniformly (the same on every "
      "plan); the chosen\n"
      "                   experts keep the router's weights\n"
      "  --nvlink-gbps N, --ib-gbps N\n"
      "                   link speeds for the report's times (default: the "
      "plan's, 450 and 50)\n"
      "  --quiet          print nothing but errors\n"
      "  --help           this text\n",
      gProgram);
}
} // namespace

RankState &mfrt::currentRank() { return tRank; }

void mfrt::fatal(const std::string &msg) {
  if (tRank.manifest && !tRank.manifest->plan.empty())
    die("rank " + std::to_string(tRank.rank) + ": " + msg);
  die(msg);
}

extern "C" {
/// The data of weight `id` of the manifest: this rank's slice, in the
/// storage type the manifest names (f32 or bf16), row-major (CUDA mode: managed
/// memory on the rank's device). The runtime owns it; the program only reads
/// it.
void *mfrt_weight(int64_t id) { return weightData(tRank, id); }

/// K/V cache entries of `layer` for the tokens at `positions`, KV heads
/// `headOffset ..` of the model's; positions past the prompt (padding) are
/// dropped, and so is everything of a dummy batch.
void _mlir_ciface_mfrt_kv_cache_f32(int64_t layer,
                                    StridedMemRefType<float, 3> *k,
                                    StridedMemRefType<float, 3> *v,
                                    StridedMemRefType<int64_t, 1> *positions,
                                    int64_t headOffset) {
  syncForHost();
  RankState &rs = tRank;
  const Manifest &m = *rs.manifest;
  if (layer < 0 || layer >= m.layers)
    fatal("internal: K/V for layer " + std::to_string(layer) +
          " outside the model's " + std::to_string(m.layers) + " layers");
  int64_t heads = k->sizes[1];
  if (k->sizes[2] != m.headDim || v->sizes[0] != k->sizes[0] ||
      v->sizes[1] != heads || v->sizes[2] != m.headDim ||
      positions->sizes[0] != k->sizes[0] || headOffset < 0 ||
      headOffset + heads > m.kvHeads)
    fatal("internal: K/V entries of layer " + std::to_string(layer) +
          " have an unexpected shape");
  RequestOutput *out = rs.output;
  if (!out)
    return;
  const TraceConfig &trace = traceConfig();
  if (trace.traceToken && rs.request == trace.request)
    for (int64_t t = 0; t < k->sizes[0]; ++t)
      if (positions->data[positions->offset + t * positions->strides[0]] ==
          trace.position) {
        TraceSightings &seen = traceSightings();
        std::lock_guard<std::mutex> lock(seen.mutex);
        seen.kv.insert(rs.rank);
      }
  std::lock_guard<std::mutex> lock(out->mutex);
  int64_t row = m.kvHeads * m.headDim;
  for (int64_t t = 0; t < k->sizes[0]; ++t) {
    int64_t pos =
        positions->data[positions->offset + t * positions->strides[0]];
    if (pos < 0)
      fatal("internal: negative K/V position " + std::to_string(pos));
    if (pos >= out->tokens)
      continue; // padding
    for (int64_t h = 0; h < heads; ++h) {
      out->written[layer][pos * m.kvHeads + headOffset + h] = 1;
      for (int64_t d = 0; d < m.headDim; ++d) {
        int64_t kIdx = k->offset + t * k->strides[0] + h * k->strides[1] +
                       d * k->strides[2];
        int64_t vIdx = v->offset + t * v->strides[0] + h * v->strides[1] +
                       d * v->strides[2];
        int64_t at = pos * row + (headOffset + h) * m.headDim + d;
        out->keys[layer][at] = k->data[kIdx];
        out->values[layer][at] = v->data[vIdx];
      }
    }
  }
}

/// Logits of every prompt position a rank holds (prompt logprobs).
void _mlir_ciface_mfrt_prompt_logits_f32(StridedMemRefType<float, 2> *logits,
                                         StridedMemRefType<int64_t, 1> *pos) {
  syncForHost();
  RankState &rs = tRank;
  const Manifest &m = *rs.manifest;
  if (logits->sizes[1] != m.vocab || logits->sizes[0] != pos->sizes[0])
    fatal("internal: prompt logits have an unexpected shape");
  RequestOutput *out = rs.output;
  if (!out)
    return;
  std::lock_guard<std::mutex> lock(out->mutex);
  if (out->promptWritten.empty()) {
    out->promptLogits.assign(size_t(out->tokens * m.vocab), 0.0f);
    out->promptWritten.assign(size_t(out->tokens), 0);
  }
  for (int64_t t = 0; t < logits->sizes[0]; ++t) {
    int64_t p = pos->data[pos->offset + t * pos->strides[0]];
    if (p < 0 || p >= out->tokens)
      continue; // padding
    out->promptWritten[p] = 1;
    for (int64_t v = 0; v < m.vocab; ++v)
      out->promptLogits[p * m.vocab + v] =
          logits->data[logits->offset + t * logits->strides[0] +
                       v * logits->strides[1]];
  }
}

/// The request's last-token logits, recorded when `valid` is non-zero.
void _mlir_ciface_mfrt_logits_f32(StridedMemRefType<float, 1> *logits,
                                  int64_t valid) {
  syncForHost();
  RankState &rs = tRank;
  const Manifest &m = *rs.manifest;
  if (!valid || !rs.output)
    return;
  if (logits->sizes[0] != m.vocab)
    fatal("internal: logits have " + std::to_string(logits->sizes[0]) +
          " entries, expected " + std::to_string(m.vocab));
  RequestOutput *out = rs.output;
  std::lock_guard<std::mutex> lock(out->mutex);
  if (out->haveLogits)
    fatal("internal: two ranks recorded logits for one request");
  out->logits.resize(size_t(m.vocab));
  for (int64_t i = 0; i < m.vocab; ++i)
    out->logits[i] = logits->data[logits->offset + i * logits->strides[0]];
  out->haveLogits = true;
}
} // extern "C"

int main(int argc, char **argv) {
  if (argc > 0 && argv[0]) {
    const char *slash = std::strrchr(argv[0], '/');
    gProgram = slash ? slash + 1 : argv[0];
  }
  std::string weights, prompts, out, backend = "local", timeout;
  std::string traceToken, forceRouting, traceSvg, nvlinkGBps, ibGBps;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &dst) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        dst = arg.substr(eq + 1);
        return;
      }
      if (i + 1 >= argc)
        die("option '" + arg + "' needs a value");
      dst = argv[++i];
    };
    std::string name = arg.substr(0, arg.find('='));
    if (name == "--help" || name == "-h") {
      usage();
      return 0;
    }
    const std::map<std::string, std::string *> valued = {
        {"--weights", &weights},
        {"--prompts", &prompts},
        {"--out", &out},
        {"--backend", &backend},
        {"--timeout", &timeout},
        {"--trace-token", &traceToken},
        {"--force-routing", &forceRouting},
        {"--trace-svg", &traceSvg},
        {"--nvlink-gbps", &nvlinkGBps},
        {"--ib-gbps", &ibGBps}};
    if (auto it = valued.find(name); it != valued.end())
      value(*it->second);
    else if (name == "--quiet")
      quiet = true;
    else if (name == "--report") {
      std::string what;
      value(what);
      if (what != "traffic")
        die("--report must be traffic, got '" + what + "'");
      gProgramState.reportTraffic = true;
    } else
      die("unknown option '" + arg + "' (see --help)");
  }
  for (auto [flag, value] :
       {std::pair<const char *, std::string *>{"--weights", &weights},
        {"--prompts", &prompts},
        {"--out", &out}})
    if (value->empty())
      die(std::string("missing ") + flag + " (see --help)");
  mfrt_options options{};
  if (backend == "local")
    options.backend = MFRT_BACKEND_LOCAL;
  else if (backend == "mpi")
    options.backend = MFRT_BACKEND_MPI;
  else if (backend == "nccl" && programUsesDevice())
    options.backend = MFRT_BACKEND_NCCL;
  else if (backend == "nccl")
    die("--backend nccl needs a program compiled with --target cuda");
  else
    die("--backend must be local, mpi or nccl, got '" + backend + "'");
  bool timeoutGiven = false;
  for (int i = 1; i < argc; ++i)
    timeoutGiven |= std::strncmp(argv[i], "--timeout", 9) == 0;
  if (timeoutGiven) {
    char *end = nullptr;
    bool digits =
        !timeout.empty() &&
        (std::isdigit((unsigned char)timeout[0]) || timeout[0] == '.');
    options.timeout_s = digits ? std::strtod(timeout.c_str(), &end) : 0;
    if (!digits || !end || *end || !(options.timeout_s >= 0.001))
      die("--timeout must be a number of seconds of at least 0.001, got '" +
          timeout + "'");
  }
  // Fail before the work, not after it, when an output cannot be written.
  for (auto [flag, file] :
       {std::pair<const char *, std::string *>{"--out", &out},
        {"--trace-svg", &traceSvg}}) {
    if (file->empty())
      continue;
    std::string dir = file->find('/') == std::string::npos
                          ? std::string(".")
                          : file->substr(0, file->rfind('/') + 1);
    if (access(dir.c_str(), W_OK) != 0)
      die(std::string(flag) + " " + *file + ": directory '" + dir +
          "' is not writable (" + std::strerror(errno) + ")");
    struct stat info;
    if (stat(file->c_str(), &info) == 0 && S_ISDIR(info.st_mode))
      die(std::string(flag) + " " + *file + ": is a directory");
  }

  Program &prog = gProgramState;
  std::string error;
  if (!parseManifest(__mf_manifest, prog.manifest, error))
    die(error);
  const Manifest &m = prog.manifest;
  if (!parsePrompts(prompts, m.vocab, prog.requests, &error))
    die(error);
  prog.weights = SafetensorsFile::open(weights, &error);
  if (!prog.weights)
    die(error);
  checkWeights(m, *prog.weights);
  for (const std::vector<int64_t> &r : prog.requests) {
    auto o = std::make_unique<RequestOutput>();
    o->tokens = int64_t(r.size());
    size_t row = size_t(m.kvHeads * m.headDim);
    o->keys.assign(m.layers, std::vector<float>(r.size() * row));
    o->values.assign(m.layers, std::vector<float>(r.size() * row));
    o->written.assign(m.layers,
                      std::vector<uint8_t>(r.size() * size_t(m.kvHeads), 0));
    prog.outputs.push_back(std::move(o));
  }

  TraceConfig &trace = traceConfig();
  if (!traceToken.empty()) {
    if (!parseTraceToken(traceToken, trace.request, trace.position, &error))
      die(error);
    if (trace.request >= int64_t(prog.requests.size()))
      die("--trace-token " + traceToken + ": there are " +
          std::to_string(prog.requests.size()) + " requests (0.." +
          std::to_string(prog.requests.size() - 1) + ")");
    int64_t len = int64_t(prog.requests[size_t(trace.request)].size());
    if (trace.position >= len)
      die("--trace-token " + traceToken + ": request " +
          std::to_string(trace.request) + " has " + std::to_string(len) +
          " tokens (positions 0.." + std::to_string(len - 1) + ")");
    trace.traceToken = true;
    trace.svgPath = traceSvg;
    mfrt_trace_enable(1);
  } else if (!traceSvg.empty()) {
    die("--trace-svg needs --trace-token REQUEST:POSITION");
  }
  if (!forceRouting.empty()) {
    if (forceRouting == "random" || forceRouting.rfind("random:", 0) == 0) {
      trace.randomRouting = true;
      if (forceRouting != "random") {
        std::string seed = forceRouting.substr(7);
        char *end = nullptr;
        errno = 0;
        trace.seed = std::strtoull(seed.c_str(), &end, 10);
        if (seed.empty() || !std::isdigit((unsigned char)seed[0]) || *end ||
            errno == ERANGE)
          die("--force-routing random:SEED needs a number, got '" + seed + "'");
      }
    } else {
      if (!trace.traceToken)
        die("--force-routing FILE fixes the traced token's experts: it needs "
            "--trace-token REQUEST:POSITION");
      if (!parseRoutingFile(forceRouting, m.layers, m.experts, m.topK,
                            trace.forced, &error))
        die(error);
    }
  }

  gCollectOutputs = options.backend != MFRT_BACKEND_LOCAL;
  std::string plan = m.plan.empty() ? "devices=1 gpus_per_node=1 "
                                      "attention=tp:1,cp:1,dp:1,pp:1 "
                                      "experts=ep:1:tp+cp+dp,pp:1:pp"
                                    : m.plan;
  options.plan = plan.c_str();
  // The report's link speeds: the plan's, or --nvlink-gbps / --ib-gbps.
  std::string reportPlan = plan;
  for (auto [flag, key, text] :
       {std::tuple<const char *, const char *, std::string *>{
            "--nvlink-gbps", "nvlink_gbps", &nvlinkGBps},
        {"--ib-gbps", "ib_gbps", &ibGBps}}) {
    if (text->empty())
      continue;
    char *end = nullptr;
    double v = std::strtod(text->c_str(), &end);
    if (!end || *end || !(v > 0) || !std::isfinite(v))
      die(std::string(flag) + " must be a positive number of GB/s, got '" +
          *text + "'");
    if (!prog.reportTraffic)
      die(std::string(flag) + " sets the link speed of --report traffic");
    reportPlan += std::string(" ") + key + "=" + *text;
  }
  if (reportPlan != plan && !meshfold::layoutFromPlanText(reportPlan, &error))
    die("--nvlink-gbps / --ib-gbps: " + error);
  if (prog.reportTraffic) {
    std::optional<meshfold::MeshLayout> layout =
        meshfold::layoutFromPlanText(plan, &error);
    if (!layout)
      die(error);
    prog.traffic.resize(size_t(layout->numDevices()));
  }
  auto t0 = std::chrono::steady_clock::now();
  if (mfrt_launch(&options, rankMain, nullptr) != MFRT_OK)
    die(mfrt_last_error());
  if (options.backend != MFRT_BACKEND_LOCAL && mfrt_rank() > 0)
    return 0; // Under MPI, rank 0 writes the outputs.

  SafetensorsWriter writer;
  writer.setMetadata("format", "meshfold-prefill-output");
  for (size_t r = 0; r < prog.requests.size(); ++r) {
    RequestOutput &o = *prog.outputs[r];
    int64_t t = o.tokens;
    if (!o.haveLogits)
      die("internal: no rank recorded logits for request " + std::to_string(r));
    for (int64_t l = 0; l < m.layers; ++l)
      for (int64_t p = 0; p < t * m.kvHeads; ++p)
        if (!o.written[l][p])
          die("internal: no K/V for request " + std::to_string(r) + " layer " +
              std::to_string(l) + " position " + std::to_string(p / m.kvHeads) +
              " head " + std::to_string(p % m.kvHeads));
    std::string prefix = "req" + std::to_string(r);
    writer.addF32(prefix + ".logits", {m.vocab}, o.logits);
    if (!o.promptWritten.empty()) {
      for (int64_t p = 0; p < t; ++p)
        if (!o.promptWritten[p])
          die("internal: no prompt logits for request " + std::to_string(r) +
              " position " + std::to_string(p));
      writer.addF32(prefix + ".prompt_logits", {t, m.vocab}, o.promptLogits);
    }
    for (int64_t l = 0; l < m.layers; ++l) {
      std::string layer = prefix + ".layers." + std::to_string(l);
      writer.addF32(layer + ".k", {t, m.kvHeads, m.headDim}, o.keys[l]);
      writer.addF32(layer + ".v", {t, m.kvHeads, m.headDim}, o.values[l]);
    }
    if (!quiet) {
      int64_t best = 0;
      for (int64_t i = 1; i < m.vocab; ++i)
        if (o.logits[i] > o.logits[best])
          best = i;
      std::printf("req %zu: %lld tokens -> next token %lld (logit %.4f)\n", r,
                  (long long)t, (long long)best, o.logits[best]);
    }
  }
  // The trace (and its map) before the outputs: nothing is written when
  // the map cannot be.
  if (trace.traceToken)
    reportTrace(prog, plan);
  if (!writer.write(out, &error))
    die(error);
  if (prog.reportTraffic)
    printTraffic(prog, reportPlan);
  if (!quiet) {
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf("wrote %s: %zu requests, %lld layers (%.3f s)\n", out.c_str(),
                prog.requests.size(), (long long)m.layers, s);
  }
  return 0;
}
