//===- Outputs.cpp - The requests' outputs: gathering and writing ---------===//
//
// The ranks that hold a part of a request's outputs (its K/V entries, its
// last-token logits, its prompt logits) write them into one RequestOutput
// (CodegenHooks.cpp). In a multi-process run each process holds what its
// rank wrote: rank 0 collects the other ranks' outputs (and their traffic
// counters and token-trace sightings), each sent as one message, its size
// first. Rank 0 then checks that every entry was written and writes them.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Outputs.h"
#include "mfrt/io/Json.h"

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Options.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Sampling.h"
#include "mfrt/program/Trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace mfrt;
using namespace meshfold;

namespace {
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

/// The outputs this process's rank wrote, serialised: per written (request,
/// layer, position, head) 4 int64 then K and V (d_h floats each); per
/// recorded logits -1 and the request, then the logits; per recorded prompt
/// position -2, the request and the position, then its logits.
std::vector<char> serializeOutputs(const Program &prog) {
  const Manifest &m = prog.manifest;
  std::vector<char> blob;
  auto put = [&](const void *p, size_t n) {
    blob.insert(blob.end(), static_cast<const char *>(p),
                static_cast<const char *>(p) + n);
  };
  for (size_t r = 0; r < prog.outputs.size(); ++r) {
    const RequestOutput &o = *prog.outputs[r];
    for (int64_t l = 0; l < (prog.kvOutputs ? m.layers : 0); ++l)
      for (int64_t ph = 0; ph < o.length * m.kvHeads; ++ph) {
        if (!o.written[l][ph])
          continue;
        int64_t hdr[4] = {int64_t(r), l, ph / m.kvHeads, ph % m.kvHeads};
        put(hdr, sizeof(hdr));
        put(&o.keys[l][ph * m.headDim], m.headDim * sizeof(float));
        if (!m.kvShared)
          put(&o.values[l][ph * m.headDim], m.headDim * sizeof(float));
      }
    if (o.haveLogits) {
      int64_t hdr[4] = {-1, int64_t(r), 0, 0};
      put(hdr, sizeof(hdr));
      put(o.logits.data(), o.logits.size() * sizeof(float));
    }
    if (!o.generated.empty() || !o.stepRows.empty() || o.prefillSeconds > 0 ||
        o.length > o.tokens) {
      // Decoding: the generated ids (their step logits), the per-step
      // counters and the timings, from whichever process kept them.
      int64_t hdr[4] = {-3, int64_t(r), o.length, int64_t(o.generated.size())};
      put(hdr, sizeof(hdr));
      put(o.generated.data(), o.generated.size() * sizeof(int32_t));
      int64_t counts[4] = {int64_t(o.stepLogits.size()),
                           int64_t(o.stepRows.size()), o.prefixRows,
                           int64_t(o.tokenSeconds.size())};
      put(counts, sizeof(counts));
      put(o.stepLogits.data(), o.stepLogits.size() * sizeof(float));
      put(o.stepRows.data(), o.stepRows.size() * sizeof(int64_t));
      put(o.historyRows.data(), o.historyRows.size() * sizeof(int64_t));
      put(o.tokenSeconds.data(), o.tokenSeconds.size() * sizeof(double));
      double seconds[3] = {o.prefillSeconds, o.decodeSeconds,
                           o.firstTokenSeconds};
      put(seconds, sizeof(seconds));
    }
    for (size_t p = 0; p < o.promptWritten.size(); ++p)
      if (o.promptWritten[p]) {
        int64_t hdr[4] = {-2, int64_t(r), int64_t(p), 0};
        put(hdr, sizeof(hdr));
        put(&o.promptLogits[p * size_t(m.vocab)],
            size_t(m.vocab) * sizeof(float));
      }
  }
  return blob;
}

/// Adds one serializeOutputs message to the outputs.
void mergeOutputs(Program &prog, const std::vector<char> &in) {
  const Manifest &m = prog.manifest;
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
    if (hdr[0] == -3) {
      RequestOutput &o = *prog.outputs[size_t(hdr[1])];
      auto take = [&](void *to, size_t bytes) {
        std::memcpy(to, &in[at], bytes);
        at += bytes;
      };
      o.length = std::max(o.length, hdr[2]);
      std::vector<int32_t> ids(static_cast<size_t>(hdr[3]));
      take(ids.data(), ids.size() * sizeof(int32_t));
      int64_t counts[4];
      take(counts, sizeof(counts));
      o.prefixRows = std::max(o.prefixRows, counts[2]);
      std::vector<float> stepLogits(static_cast<size_t>(counts[0]));
      take(stepLogits.data(), stepLogits.size() * sizeof(float));
      std::vector<int64_t> stepRows(static_cast<size_t>(counts[1])),
          historyRows(static_cast<size_t>(counts[1]));
      take(stepRows.data(), stepRows.size() * sizeof(int64_t));
      take(historyRows.data(), historyRows.size() * sizeof(int64_t));
      std::vector<double> tokenSeconds(static_cast<size_t>(counts[3]));
      take(tokenSeconds.data(), tokenSeconds.size() * sizeof(double));
      if (!tokenSeconds.empty())
        o.tokenSeconds = std::move(tokenSeconds);
      double seconds[3];
      take(seconds, sizeof(seconds));
      if (!ids.empty()) {
        o.generated = std::move(ids);
        o.stepLogits = std::move(stepLogits);
      }
      if (o.stepRows.size() < stepRows.size()) {
        o.stepRows.resize(stepRows.size(), 0);
        o.historyRows.resize(stepRows.size(), 0);
      }
      for (size_t i = 0; i < stepRows.size(); ++i) {
        o.stepRows[i] = std::max(o.stepRows[i], stepRows[i]);
        o.historyRows[i] = std::max(o.historyRows[i], historyRows[i]);
      }
      o.prefillSeconds = std::max(o.prefillSeconds, seconds[0]);
      o.decodeSeconds = std::max(o.decodeSeconds, seconds[1]);
      o.firstTokenSeconds = std::max(o.firstTokenSeconds, seconds[2]);
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
    if (!m.kvShared) {
      std::memcpy(&o.values[hdr[1]][ph * m.headDim], &in[at], m.headDim * 4);
      at += size_t(m.headDim) * 4;
    }
    o.written[hdr[1]][ph] = 1;
  }
}

/// Adds one rank's token-trace message (see collectTrace) to `seen` and
/// `hops`.
void mergeTrace(int peer, const std::vector<char> &in, TraceSightings &seen,
                std::vector<mfrt_trace_hop> &hops) {
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
    hops.push_back(
        mfrt_trace_hop{words[at], words[at + 1], int32_t(words[at + 2]),
                       int32_t(words[at + 3]), int32_t(words[at + 4])});
}
} // namespace

void mfrt::allocateOutputs(Program &prog) {
  const Manifest &m = prog.manifest;
  for (const std::vector<int64_t> &r : prog.requests) {
    auto o = std::make_shared<RequestOutput>();
    o->tokens = o->length = int64_t(r.size());
    prog.outputs.push_back(std::move(o));
    if (!prog.kvOutputs)
      continue;
    RequestOutput *out = prog.outputs.back().get();
    // Decoding appends the K/V of every generated token but the last.
    size_t rows =
        r.size() +
        size_t(std::max<int64_t>(0, prog.generation.maxNewTokens - 1));
    size_t row = size_t(m.kvHeads * m.headDim);
    out->keys.assign(m.layers, std::vector<float>(rows * row));
    if (!m.kvShared)
      out->values.assign(m.layers, std::vector<float>(rows * row));
    out->written.assign(m.layers,
                        std::vector<uint8_t>(rows * size_t(m.kvHeads), 0));
  }
}

void mfrt::collectOutputs(Program &prog) {
  if (mfrt_rank() != 0) {
    std::vector<char> blob = serializeOutputs(prog);
    sendToRoot(blob.data(), blob.size(), "sending outputs to rank 0");
    return;
  }
  for (int peer = 1; peer < mfrt_world_size(); ++peer)
    mergeOutputs(prog, recvFromRank(peer, "collecting outputs"));
}

/// Under MPI each process saw its own part of the traced token's journey:
/// every rank sends rank 0 its sightings and hops (as int64 words: the
/// landing rank, the count of K/V ranks, the K/V ranks, then 5 words per
/// hop).
void mfrt::collectTrace(Program &prog) {
  TraceSightings &seen = traceSightings();
  if (mfrt_rank() != 0) {
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
  for (int peer = 1; peer < mfrt_world_size(); ++peer)
    mergeTrace(peer, recvFromRank(peer, "collecting the token trace"), seen,
               prog.traceHops);
}

namespace {
/// Under MPI each process has its own rank's row of `rows`: rank 0 collects
/// every rank's, each as long as its own (`what` names them in messages).
void collectRows(std::vector<std::vector<uint64_t>> &rows, const char *what) {
  int me = mfrt_rank();
  if (me != 0) {
    const std::vector<uint64_t> &row = rows[size_t(me)];
    sendToRoot(row.data(), row.size() * sizeof(uint64_t),
               (std::string("sending the ") + what + " to rank 0").c_str());
    return;
  }
  for (int peer = 1; peer < mfrt_world_size(); ++peer) {
    std::vector<char> in =
        recvFromRank(peer, (std::string("collecting ") + what).c_str());
    std::vector<uint64_t> &row = rows[size_t(peer)];
    row.assign(in.size() / sizeof(uint64_t), 0);
    if (row.size() != rows[0].size())
      fatal("internal: rank " + std::to_string(peer) + " sent " +
            std::to_string(row.size()) + " " + what + ", expected " +
            std::to_string(rows[0].size()));
    std::memcpy(row.data(), in.data(), row.size() * sizeof(uint64_t));
  }
}
} // namespace

/// --report traffic's byte counters (read before any of these messages).
void mfrt::collectTraffic(Program &prog) {
  collectRows(prog.traffic, "traffic counters");
  collectRows(prog.compute, "compute counters");
}

void mfrt::collectLoads(Program &prog) {
  collectRows(prog.loads, "load figures");
}

void mfrt::collectRouting(Program &prog) {
  collectRows(prog.routing, "routing counters");
}

void mfrt::printLoadReport(const Program &prog) {
  std::string pools;
  if (prog.pools) {
    int64_t first = layoutOf(prog.manifest).numDevices();
    pools = "; ranks 0.." + std::to_string(first - 1) + " the prefill pool, " +
            std::to_string(first) + ".." +
            std::to_string(prog.loads.size() - 1) + " the decode pool";
  }
  std::printf("weights per rank (%s: %zu file%s%s):\n",
              prog.weights->path().c_str(), prog.weights->shardCount(),
              prog.weights->shardCount() == 1 ? "" : "s", pools.c_str());
  std::printf("  rank  files read   slice bytes   used in place        "
              "copied  files mapped  mapped bytes\n");
  for (size_t r = 0; r < prog.loads.size(); ++r) {
    const std::vector<uint64_t> &l = prog.loads[r];
    if (l.size() != 6)
      continue;
    std::printf("  %4zu  %10llu  %12llu  %14llu  %12llu  %12llu  %12llu\n", r,
                (unsigned long long)l[0], (unsigned long long)l[1],
                (unsigned long long)l[2], (unsigned long long)l[3],
                (unsigned long long)l[4], (unsigned long long)l[5]);
  }
}

void mfrt::addOutputs(const Program &prog, SafetensorsWriter &writer,
                      bool quiet) {
  const Manifest &m = prog.manifest;
  for (size_t r = 0; r < prog.requests.size(); ++r) {
    const RequestOutput &o = *prog.outputs[r];
    int64_t t = o.tokens, rows = o.length;
    if (!o.haveLogits)
      die("internal: no rank recorded logits for request " + std::to_string(r));
    for (int64_t l = 0; l < (prog.kvOutputs ? m.layers : 0); ++l)
      for (int64_t p = 0; p < rows * m.kvHeads; ++p)
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
    for (int64_t l = 0; l < (prog.kvOutputs ? m.layers : 0); ++l) {
      std::string layer = prefix + ".layers." + std::to_string(l);
      size_t used = size_t(rows * m.kvHeads * m.headDim);
      auto firstRows = [&](const std::vector<float> &all) {
        return std::vector<float>(all.begin(), all.begin() + used);
      };
      writer.addF32(layer + ".k", {rows, m.kvHeads, m.headDim},
                    firstRows(o.keys[l]));
      writer.addF32(layer + ".v", {rows, m.kvHeads, m.headDim},
                    firstRows(o.value(size_t(l))));
    }
    if (prog.generation.maxNewTokens > 0) {
      int64_t n = int64_t(o.generated.size());
      writer.add(prefix + ".tokens", DType::I32, {n}, o.generated.data());
      if (prog.generation.stepLogits)
        writer.addF32(prefix + ".step_logits", {n, m.vocab}, o.stepLogits);
      if (!quiet) {
        std::printf("req %zu: %lld tokens -> generated %lld:", r, (long long)t,
                    (long long)n);
        for (int32_t id : o.generated)
          std::printf(" %d", id);
        std::printf("\n");
      }
      continue;
    }
    if (quiet)
      continue;
    int64_t best = 0;
    for (int64_t i = 1; i < m.vocab; ++i)
      if (o.logits[i] > o.logits[best])
        best = i;
    std::printf("req %zu: %lld tokens -> next token %lld (logit %.4f)\n", r,
                (long long)t, (long long)best, o.logits[best]);
  }
}

namespace {
/// The `p`-th percentile of `values` (nearest rank; `values` not empty).
double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  size_t rank = size_t(std::ceil(p / 100.0 * double(values.size())));
  return values[std::min(values.size(), std::max<size_t>(rank, 1)) - 1];
}

/// The steps while every request of the run was decoding: from the last
/// first token to the first last token (steps whose batch is the whole
/// run's, no prompt among them), in ms per step, and their count; {0, 0}
/// without two tokens of every request in the window.
std::pair<double, size_t> steadyDecode(const Program &prog) {
  double start = 0;
  const RequestOutput *first = nullptr; // the first to finish
  for (const std::shared_ptr<RequestOutput> &o : prog.outputs) {
    if (o->tokenSeconds.size() < 2)
      return {0, 0};
    start = std::max(start, o->tokenSeconds.front());
    if (!first || o->tokenSeconds.back() < first->tokenSeconds.back())
      first = o.get();
  }
  if (!first)
    return {0, 0};
  // Its tokens past the start (a step's requests record their tokens one
  // after another: those of the start's step come before it).
  size_t steps = 0;
  for (double t : first->tokenSeconds)
    steps += t > start;
  if (steps == 0)
    return {0, 0};
  return {1e3 * (first->tokenSeconds.back() - start) / double(steps), steps};
}
} // namespace

void mfrt::printDecodeReport(const Program &prog) {
  size_t generated = 0;
  int64_t promptRows = 0, reused = 0;
  for (size_t r = 0; r < prog.outputs.size(); ++r) {
    const RequestOutput &o = *prog.outputs[r];
    generated += o.generated.size();
    promptRows += o.tokens;
    reused += o.prefixRows;
    size_t steps = o.stepRows.size();
    if (steps == 0) {
      std::printf("req %zu: decode: no steps (%zu generated), prefill %.3f "
                  "ms, first token at %.3f ms",
                  r, o.generated.size(), 1e3 * o.prefillSeconds,
                  1e3 * o.firstTokenSeconds);
    } else {
      auto [lo, hi] = std::minmax_element(o.stepRows.begin(), o.stepRows.end());
      std::printf("req %zu: decode: %zu steps, K/V rows computed per layer "
                  "and step %lld..%lld, cached rows read %lld..%lld; prefill "
                  "%.3f ms, first token at %.3f ms, steps %.3f ms per token",
                  r, steps, (long long)*lo, (long long)*hi,
                  (long long)o.historyRows.front(),
                  (long long)o.historyRows.back(), 1e3 * o.prefillSeconds,
                  1e3 * o.firstTokenSeconds,
                  1e3 * o.decodeSeconds / double(steps));
    }
    if (o.tokenSeconds.size() > 1) {
      std::vector<double> gaps;
      for (size_t i = 1; i < o.tokenSeconds.size(); ++i)
        gaps.push_back(o.tokenSeconds[i] - o.tokenSeconds[i - 1]);
      std::printf(", inter-token p50 %.3f ms, p99 %.3f ms",
                  1e3 * percentile(gaps, 50), 1e3 * percentile(gaps, 99));
    }
    if (prog.prefixCache)
      std::printf("; prefix cache: %lld of %lld prompt rows reused",
                  (long long)o.prefixRows, (long long)o.tokens);
    std::printf("\n");
  }
  std::printf("decode: %zu requests, %zu tokens generated in %lld steps "
              "(batches of up to %lld, rank %d), %.3f ms of prefills and "
              "steps: %.1f tokens/s\n",
              prog.outputs.size(), generated, (long long)prog.runSteps,
              (long long)prog.runBatch, prog.runRank, 1e3 * prog.runSeconds,
              prog.runSeconds > 0 ? double(generated) / prog.runSeconds : 0.0);
  auto [steadyMs, steadySteps] = steadyDecode(prog);
  if (steadySteps > 0)
    std::printf(
        "decode steady: all %zu requests running: %zu steps, %.3f ms per "
        "step, %.1f tokens/s\n",
        prog.outputs.size(), steadySteps, steadyMs,
        1e3 * double(prog.outputs.size()) / steadyMs);
  const Generation &g = prog.generation;
  if (g.chunkedPrompts()) {
    std::string budget =
        g.stepTokens > 0
            ? "at most " + std::to_string(g.stepTokens) + " (--max-step-tokens)"
            : std::string("no bound");
    std::printf("prompt chunks: rank %d: %lld steps ran prompt rows; rows "
                "per step: %s, most in a step %lld\n",
                prog.runRank, (long long)prog.runPromptSteps, budget.c_str(),
                (long long)prog.runMostStepRows);
  }
  if (prog.prefixCache)
    std::printf("prefix cache: %lld of %lld prompt rows reused, K/V of %lld "
                "computed\n",
                (long long)reused, (long long)promptRows,
                (long long)(promptRows - reused));
  const std::array<int64_t, 6> &kv = prog.runKV;
  std::string limit =
      kv[0] < 0 ? std::string("no limit")
                : "at most " + std::to_string(kv[0]) + " (--kv-memory)";
  std::printf("kv cache: rank %d: blocks of %lld rows, %s; at most %lld "
              "in use at once, %.3f MB of blocks; requests that waited for "
              "blocks: %lld; preempted: %lld (%lld rows recomputed)\n",
              prog.runRank, (long long)prog.kv.blockTokens, limit.c_str(),
              (long long)kv[1], double(kv[2]) / 1e6, (long long)kv[3],
              (long long)kv[4], (long long)kv[5]);
  // The decode pool's stages in a program of two pools.
  MeshLayout layout =
      layoutOf(prog.pools ? prog.decodeManifest : prog.manifest);
  if (layout.axisSize("pp") == 1)
    return;
  std::printf("pipeline: rank %d made %lld calls: %lld prefills, %lld steps "
              "and %lld waits for later stages; started while earlier calls "
              "were in later stages: %lld steps, %lld prefills beside "
              "prefills, %lld prefills beside steps\n",
              prog.runRank,
              (long long)(prog.runPrefills + prog.runSteps + prog.runWaits),
              (long long)prog.runPrefills, (long long)prog.runSteps,
              (long long)prog.runWaits, (long long)prog.runOverlapped[0],
              (long long)prog.runOverlapped[1],
              (long long)prog.runOverlapped[2]);
}

void mfrt::writeJsonlResults(const Options &options, const Program &prog) {
  if (options.outJsonl.empty())
    return;
  const Manifest &m = prog.manifest;
  const Generation &g = prog.generation;
  const Tokenizer *tokenizer = prog.prompts.tokenizer.get();
  std::string text;
  for (size_t r = 0; r < prog.requests.size(); ++r) {
    const RequestOutput &o = *prog.outputs[r];
    std::vector<int64_t> tokens;
    std::string finish = "length";
    if (g.maxNewTokens > 0) {
      tokens.assign(o.generated.begin(), o.generated.end());
      if (!g.ignoreEos && !tokens.empty() &&
          std::find(m.eosTokens.begin(), m.eosTokens.end(), tokens.back()) !=
              m.eosTokens.end())
        finish = "stop";
    } else {
      // Prefill only: the next token, chosen as the first decode step would.
      tokens.push_back(chooseToken(g, o.logits.data(), m.vocab, int64_t(r), 0));
    }
    nlohmann::ordered_json line;
    line["request"] = r;
    if (r < prog.prompts.texts.size() && !prog.prompts.texts[r].empty())
      line["prompt"] = prog.prompts.texts[r];
    line["prompt_tokens"] = prog.requests[r];
    line["tokens"] = tokens;
    if (tokenizer)
      line["text"] = tokenizer->decode(tokens);
    else
      line["text"] = nullptr;
    line["finish_reason"] = finish;
    text +=
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
  }
  std::string error;
  if (!writeWholeFile(options.outJsonl, text, error))
    die(error);
}
