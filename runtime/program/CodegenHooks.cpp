//===- CodegenHooks.cpp - The runtime calls of emitted programs -----------===//
//
// Every function generated code calls (mfrt/CodegenABI.def), defined with
// the declarations of mfrt/CodegenABI.h: the weights (mfrt_weight), the
// outputs (K/V cache entries, last-token and prompt logits, written into the
// request's RequestOutput) and the collectives. convert-mf-to-runtime lowers
// every mf collective to one of these calls on buffers (unranked memref
// descriptors); they resolve the manifest's group ids to the runtime's
// groups and call the mfrt C ABI of mfrt.h.
//
// CUDA mode (DeviceBuffers.h): the program's buffers are managed memory;
// every call first waits for the rank's stream (the kernels that wrote its
// operands), and the calls' own temporaries are managed memory too, because
// the nccl backend moves device memory only. Dispatch and combine run the
// runtime's generic algorithms: under the local backend their packing and
// weighted sums run on the host, on managed memory (the pages migrate to the
// host and back), which is correct but not fast.
//
//===----------------------------------------------------------------------===//

#include "mfrt/CodegenABI.h"
#include "mfrt/mfrt.h"
#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/ProgramRank.h"
#include "mfrt/program/Trace.h"

#include "meshfold/Support/Manifest.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

using namespace mfrt;
using meshfold::Manifest;

namespace {
int64_t group(int64_t id) {
  ProgramRank &rs = programRank();
  if (id < 0 || size_t(id) >= rs.groups.size())
    fatal("internal: group id " + std::to_string(id) +
          " is not in the manifest");
  return rs.groups[id];
}

void check(mfrt_status status, const char *what) {
  if (status != MFRT_OK)
    fatal(std::string(what) + ": " + mfrt_last_error());
}

/// Token tracing: whether the row at global position `position` holds the
/// traced token, computed in its own phase (prefill computes the prompt's
/// positions, where positions past the prompt are padding; decode steps
/// the generated ones).
bool tracedPosition(ProgramRank &rs, int64_t position) {
  const TraceConfig &c = traceConfig();
  if (!c.traceToken)
    return false;
  int64_t place = 0;
  Sequence *s = rs.sequenceOf(position, &place);
  return s && s->request == c.request && place == c.position &&
         (place < s->output->tokens) == !rs.stepping;
}

/// The rows among `positions` (of `n`) that hold the traced token.
std::vector<int64_t> tracedRows(ProgramRank &rs, const int64_t *positions,
                                int64_t n) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i)
    if (tracedPosition(rs, positions[i]))
      rows.push_back(i);
  return rows;
}

/// Marks, for the next collective, the rows of a buffer of `rows` rows
/// (`count` elements) laid out by `positions` that hold the traced token.
/// A buffer of another row count is not in that layout: nothing is marked.
void markRows(ProgramRank &rs, const std::vector<int64_t> &positions,
              int64_t rows, int64_t count) {
  if (!traceConfig().traceToken || rows != int64_t(positions.size()) ||
      rows == 0)
    return;
  std::vector<int64_t> marks =
      tracedRows(rs, positions.data(), int64_t(positions.size()));
  if (!marks.empty())
    mfrt_trace_mark(marks.data(), int64_t(marks.size()), count / rows);
}

/// Whether the rank's rows of `layout` hold the traced token at a position
/// the LM head reads: the prompt's last, or a decode step's row.
bool holdsTracedLastRow(ProgramRank &rs, const std::vector<int64_t> &layout) {
  for (int64_t position : layout) {
    int64_t place = 0;
    if (!tracedPosition(rs, position))
      continue;
    Sequence *s = rs.sequenceOf(position, &place);
    if (place == s->length - 1)
      return true;
  }
  return false;
}

void copyPositions(UnrankedMemRefType<int64_t> *m, std::vector<int64_t> &out) {
  MemRefBuffer<int64_t> b(m);
  out.assign(b.data, b.data + b.count);
}
/// Copies row `t` of `x [rows, heads, head_dim]` (all its heads) to `to`,
/// contiguous.
void copyRowIn(float *to, const StridedMemRefType<float, 3> *x, int64_t t) {
  int64_t heads = x->sizes[1], dim = x->sizes[2];
  const float *from = x->data + x->offset + t * x->strides[0];
  for (int64_t h = 0; h < heads; ++h) {
    const float *head = from + h * x->strides[1];
    if (x->strides[2] == 1)
      std::memcpy(to + h * dim, head, size_t(dim) * sizeof(float));
    else
      for (int64_t d = 0; d < dim; ++d)
        to[h * dim + d] = head[d * x->strides[2]];
  }
}

/// Calls `f(sequence, global position, slot, own)` for each cached row of
/// `layer` that a decode step at positions `sp` reads (`slot`: its row in
/// the rank's KVPool, Sequence::cachedPositions): every sequence's of the
/// step (one, prefill's, when prefill runs as a step), in slot order and
/// each in the order this rank recorded them. `own` says the row is one of
/// the step's (recorded just before its attention).
template <typename F>
void forEachCached(ProgramRank &rs, int64_t layer,
                   StridedMemRefType<int64_t, 1> *sp, F f) {
  // The step's positions, sorted once: each cached row is looked up in
  // them (the cache grows with every step, the step's rows do not).
  std::vector<int64_t> own(size_t(sp->sizes[0]));
  for (size_t t = 0; t < own.size(); ++t)
    own[t] = sp->data[sp->offset + int64_t(t) * sp->strides[0]];
  std::sort(own.begin(), own.end());
  for (size_t slot = 0; slot < rs.sequences.size(); ++slot) {
    Sequence &s = rs.sequences[slot];
    if (!s.output || (rs.stepping ? !s.inStep : int64_t(slot) != rs.prefill))
      continue;
    int64_t base = rs.stepping ? globalPosition(int64_t(slot), 0) : 0;
    const std::vector<int64_t> &cached = s.cachedPositions[size_t(layer)];
    for (size_t i = 0; i < cached.size(); ++i)
      f(s, base + cached[i], int64_t(i),
        std::binary_search(own.begin(), own.end(), base + cached[i]));
  }
}

/// --report decode, per request and step: the most of its rows whose K/V
/// a layer computed (the step's rows, KeyTiles::stepSequences) and the most
/// of its cached rows a layer read (its rows of the key tiles but those),
/// from the rank's KeyTiles of the step.
void countHistoryRows(ProgramRank &rs) {
  if (!rs.stepping)
    return;
  std::map<Sequence *, std::pair<int64_t, int64_t>> counts;
  for (Sequence *s : rs.keyTiles.sequences)
    ++counts[s].second;
  for (Sequence *s : rs.keyTiles.stepSequences) {
    if (s) {
      ++counts[s].first;
      --counts[s].second;
    }
  }
  for (auto &[s, c] : counts) {
    if (s->generated < 1 || s->recompute)
      continue; // prefill run as a step, or a prompt's (or recomputed) chunk
    // The step computes generated token s->generated (>= 1).
    size_t at = size_t(s->generated - 1);
    RequestOutput *out = s->output;
    std::lock_guard<std::mutex> lock(out->mutex);
    if (out->stepRows.size() <= at) {
      out->stepRows.resize(at + 1, 0);
      out->historyRows.resize(at + 1, 0);
    }
    out->stepRows[at] = std::max(out->stepRows[at], c.first);
    out->historyRows[at] = std::max(out->historyRows[at], c.second);
  }
}

/// Prefill pool of a two-pool program: sends the decode pool the blocks of
/// `s`'s K/V of `layer` that this rank holds (transferBlocks), now that it
/// recorded them: K then V, by head, position and element.
void sendRecordedKV(ProgramRank &rs, Sequence &s, int64_t layer) {
  const Manifest &m = *rs.manifest;
  if (!s.sendsPlanned) {
    for (const meshfold::KVBlock &b : transferBlocks(program(), s.request))
      if (b.from == mfrt_rank())
        s.sends.push_back(b);
    s.sendsPlanned = true;
  }
  // The rank's slot of each place it recorded for the layer.
  std::map<int64_t, int64_t> slots;
  const std::vector<int64_t> &cached = s.cachedPositions[size_t(layer)];
  for (size_t i = 0; i < cached.size(); ++i)
    slots[cached[i]] = int64_t(i);
  int64_t first = rs.kv.headOffset(layer);
  std::vector<float> buf;
  for (const meshfold::KVBlock &b : s.sends) {
    if (b.layer != layer)
      continue;
    int64_t positions = b.positionEnd - b.positionBegin;
    buf.assign(size_t(b.elements(m.headDim)), 0.0f);
    // K, then V unless one tensor is both.
    float *kOut = buf.data(), *vOut = kOut + buf.size() / size_t(b.kvCopies);
    for (int64_t h = b.headBegin; h < b.headEnd; ++h)
      for (int64_t pos = b.positionBegin; pos < b.positionEnd; ++pos) {
        auto it = slots.find(pos);
        if (it == slots.end() || h < first || h >= first + rs.kv.heads(layer))
          fatal("internal: the K/V of layer " + std::to_string(layer) +
                " position " + std::to_string(pos) + " head " +
                std::to_string(h) + " is not here to send");
        int64_t at = (h - first) * m.headDim;
        int64_t to =
            ((h - b.headBegin) * positions + pos - b.positionBegin) * m.headDim;
        std::copy_n(rs.kv.row(s.blocks, layer, it->second, 0) + at, m.headDim,
                    kOut + to);
        if (b.kvCopies == 2)
          std::copy_n(rs.kv.row(s.blocks, layer, it->second, 1) + at, m.headDim,
                      vOut + to);
      }
    // --trace-token: the block that carries the traced token's K/V.
    const TraceConfig &c = traceConfig();
    if (c.traceToken && s.request == c.request &&
        b.positionBegin <= c.position && c.position < b.positionEnd) {
      int64_t row = c.position - b.positionBegin;
      mfrt_trace_mark(&row, 1, int64_t(buf.size()) / positions);
    }
    if (sendHost(mfrt_pool_size(0) + int(b.to), buf.data(), int64_t(buf.size()),
                 MFRT_F32) != MFRT_OK)
      fatal(std::string("sending K/V to the decode pool: ") +
            mfrt_last_error());
  }
}

/// Keeps `logits [vocab]` (elements `stride` apart) as the ones the next
/// token of `s` is chosen from.
void keepLogits(const Manifest &m, Sequence &s, const float *logits,
                int64_t stride) {
  s.recordedLogits = true;
  s.logits.resize(size_t(m.vocab));
  for (int64_t i = 0; i < m.vocab; ++i)
    s.logits[size_t(i)] = logits[i * stride];
}

/// Records `logits [vocab]` as the request's (req{r}.logits) and as the
/// ones its next token is chosen from.
void recordLogits(ProgramRank &rs, Sequence &s, const float *logits,
                  int64_t stride) {
  const Manifest &m = *rs.manifest;
  RequestOutput *out = s.output;
  std::lock_guard<std::mutex> lock(out->mutex);
  if (out->haveLogits)
    fatal("internal: two ranks recorded logits for one request");
  keepLogits(m, s, logits, stride);
  out->logits = s.logits;
  out->haveLogits = true;
}

/// The sequence whose next token the row at `position` of a decode step
/// chooses; null for padding, a prompt chunk's row before the prompt's last
/// and a preempted request's recomputed place.
Sequence *choosingSequence(ProgramRank &rs, int64_t position) {
  int64_t p = 0;
  Sequence *s = rs.sequenceOf(position, &p);
  if (!s || !s->output || p != s->length - 1 || p + 1 < s->output->tokens ||
      s->recompute)
    return nullptr;
  return s;
}

} // namespace

extern "C" {
/// The data of weight `id` of the manifest: this rank's slice, in the
/// storage type the manifest names (f32 or bf16), row-major (CUDA mode: managed
/// memory on the rank's device). The runtime owns it; the program only reads
/// it.
void *mfrt_weight(int64_t id) { return weightData(programRank(), id); }

/// K/V cache entries of `layer` for the tokens at `positions`, KV heads
/// `headOffset ..` of the model's, each into its request's outputs and this
/// rank's cache of it; padding rows (past their request's length, or of a
/// dummy batch) are dropped.
void _mlir_ciface_mfrt_kv_cache_f32(int64_t layer,
                                    StridedMemRefType<float, 3> *k,
                                    StridedMemRefType<float, 3> *v,
                                    StridedMemRefType<int64_t, 1> *positions,
                                    int64_t headOffset) {
  syncForHost();
  ProgramRank &rs = programRank();
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
  int64_t row = m.kvHeads * m.headDim;
  countCompute(rs, layer, kKVRows, uint64_t(k->sizes[0]));
  rs.kv.useHeads(layer, headOffset, heads);
  std::set<Sequence *> recorded;
  for (int64_t t = 0; t < k->sizes[0]; ++t) {
    int64_t position =
        positions->data[positions->offset + t * positions->strides[0]];
    if (position < 0)
      fatal("internal: negative K/V position " + std::to_string(position));
    int64_t pos = 0;
    Sequence *s = rs.sequenceOf(position, &pos);
    if (!s)
      continue; // padding, or a dummy batch
    recorded.insert(s);
    if (tracedPosition(rs, position)) {
      TraceSightings &seen = traceSightings();
      std::lock_guard<std::mutex> lock(seen.mutex);
      seen.kv.insert(mfrt_rank());
    }
    // The row into the rank's cache (its next slot), and with --out's K/V
    // into the request's outputs.
    int64_t slot = int64_t(s->cachedPositions[size_t(layer)].size());
    s->cachedPositions[size_t(layer)].push_back(pos);
    copyRowIn(rs.kv.row(s->blocks, layer, slot, 0), k, t);
    if (!m.kvShared)
      copyRowIn(rs.kv.row(s->blocks, layer, slot, 1), v, t);
    if (!program().kvOutputs)
      continue;
    RequestOutput *out = s->output;
    std::lock_guard<std::mutex> lock(out->mutex);
    for (int64_t h = 0; h < heads; ++h) {
      out->written[layer][pos * m.kvHeads + headOffset + h] = 1;
      for (int64_t d = 0; d < m.headDim; ++d) {
        int64_t kIdx = k->offset + t * k->strides[0] + h * k->strides[1] +
                       d * k->strides[2];
        int64_t vIdx = v->offset + t * v->strides[0] + h * v->strides[1] +
                       d * v->strides[2];
        int64_t at = pos * row + (headOffset + h) * m.headDim + d;
        out->keys[layer][at] = k->data[kIdx];
        if (!m.kvShared)
          out->values[layer][at] = v->data[vIdx];
      }
    }
  }
  if (program().pools && mfrt_pool() == 0)
    for (Sequence *s : recorded)
      sendRecordedKV(rs, *s, layer);
}

/// A decode step's key tiles of `layer` (the rows of the rank's K/V cache
/// its attention reads in place, KVPool::rows): every cached row of each
/// request the step runs, the step's own included (recorded just before),
/// in runs of at most `capacity` rows of one request that lie one after
/// the other in the pool. A batch-invariant program's (a manifest history
/// tile) also start at every block and at every multiple of the history
/// tile of the request's own slots, so a request's tiles, and the order its
/// attention adds them in, do not depend on the other requests of the step
/// or on where its blocks are. Returns the tile count; the table waits in
/// the rank's KeyTiles for mfrt_kv_key_tiles_fill.
int64_t _mlir_ciface_mfrt_kv_key_tiles(int64_t layer,
                                       StridedMemRefType<int64_t, 1> *sp,
                                       int64_t capacity) {
  syncForHost(); // the step's positions
  ProgramRank &rs = programRank();
  const Manifest &m = *rs.manifest;
  if (layer < 0 || layer >= m.layers || capacity < 1)
    fatal("internal: key tiles of layer " + std::to_string(layer) +
          " outside the model's " + std::to_string(m.layers) + " layers");
  // The table of the last layer makes way (its buffers are kept).
  KeyTiles &kt = rs.keyTiles;
  kt.tiles.clear();
  kt.positions.clear();
  kt.sequences.clear();
  kt.stepSequences.clear();
  kt.layer = layer;
  kt.capacity = capacity;
  bool fixed = m.historyTile > 1;
  int64_t blockRows = rs.kv.blockTokens(), lastRow = -2, ownRows = 0;
  const Sequence *last = nullptr;
  forEachCached(rs, layer, sp,
                [&](Sequence &s, int64_t position, int64_t slot, bool own) {
                  int64_t row = rs.kv.poolRow(s.blocks, slot);
                  bool starts = &s != last || row != lastRow + 1 ||
                                kt.tiles.back().rows == capacity ||
                                (fixed && (slot % blockRows == 0 ||
                                           slot % m.historyTile == 0));
                  if (starts)
                    kt.tiles.push_back({row, 0, int64_t(kt.positions.size())});
                  ++kt.tiles.back().rows;
                  kt.positions.push_back(position);
                  kt.sequences.push_back(&s);
                  ownRows += own;
                  last = &s;
                  lastRow = row;
                });
  // Every row of the step whose request runs was recorded before its
  // attention (moe.kv_cache precedes moe.kv_history).
  int64_t expected = 0;
  for (int64_t t = 0; t < sp->sizes[0]; ++t) {
    int64_t place = 0;
    kt.stepSequences.push_back(
        rs.sequenceOf(sp->data[sp->offset + t * sp->strides[0]], &place));
    expected += kt.stepSequences.back() != nullptr;
  }
  if (ownRows != expected)
    fatal("internal: " + std::to_string(expected - ownRows) +
          " of a step's rows of layer " + std::to_string(layer) +
          " were not in the K/V cache before its attention");
  return int64_t(kt.tiles.size());
}

/// Fills the key tiles mfrt_kv_key_tiles made: `tiles [n, 2]` the first
/// row in the pool and the row count of each, `positions [n, capacity]`
/// their rows' global positions (the rest of a tile's row of positions is
/// the tile's last, unread). Also counts, per request and step, the most
/// of its rows whose K/V a layer computed and the most of its cached rows a
/// layer read (--report decode).
void _mlir_ciface_mfrt_kv_key_tiles_fill(
    int64_t layer, StridedMemRefType<int64_t, 1> *sp,
    StridedMemRefType<int64_t, 2> *tiles,
    StridedMemRefType<int64_t, 2> *positions) {
  syncForHost(); // the buffers it writes may be a kernel's before
  ProgramRank &rs = programRank();
  KeyTiles &kt = rs.keyTiles;
  int64_t n = int64_t(kt.tiles.size());
  if (kt.layer != layer || tiles->sizes[0] != n || tiles->sizes[1] != 2 ||
      positions->sizes[0] != n || positions->sizes[1] != kt.capacity ||
      sp->sizes[0] != int64_t(kt.stepSequences.size()))
    fatal("internal: the key tiles of layer " + std::to_string(layer) +
          " have an unexpected shape");
  auto at = [](StridedMemRefType<int64_t, 2> *x, int64_t i,
               int64_t j) -> int64_t & {
    return x->data[x->offset + i * x->strides[0] + j * x->strides[1]];
  };
  for (int64_t t = 0; t < n; ++t) {
    const KeyTiles::Tile &tile = kt.tiles[size_t(t)];
    at(tiles, t, 0) = tile.row;
    at(tiles, t, 1) = tile.rows;
    for (int64_t j = 0; j < kt.capacity; ++j)
      at(positions, t, j) =
          kt.positions[size_t(tile.first + std::min(j, tile.rows - 1))];
  }
  countHistoryRows(rs);
}

/// The rows of `layer` in the rank's K/V cache that a step's key tiles
/// (mfrt_kv_key_tiles, just before) name: every block's (0 without tiles).
int64_t _mlir_ciface_mfrt_kv_cache_rows(int64_t layer) {
  ProgramRank &rs = programRank();
  if (rs.keyTiles.layer != layer)
    fatal("internal: the K/V rows of layer " + std::to_string(layer) +
          " asked for before its key tiles");
  return rs.keyTiles.tiles.empty() ? 0
                                   : rs.kv.blocksMade() * rs.kv.blockTokens();
}

/// mf.kv_rows: tensor `tensor` (0: K, 1: V) of `layer`'s rows in the rank's
/// K/V cache, KV heads `headOffset ..` (`heads` of them), [rows, heads,
/// head_dim] contiguous; read in place by the step's attention through its
/// key tiles.
void *mfrt_kv_rows_f32(int64_t layer, int64_t tensor, int64_t headOffset,
                       int64_t heads) {
  syncForHost(); // CUDA mode: the array may grow (KVPool::Rows)
  ProgramRank &rs = programRank();
  static float none[1];
  if (_mlir_ciface_mfrt_kv_cache_rows(layer) == 0)
    return none; // no tile reads a row
  if (tensor < 0 || tensor > 1 || rs.kv.headOffset(layer) != headOffset ||
      rs.kv.heads(layer) != heads)
    fatal("internal: the K/V history of layer " + std::to_string(layer) +
          " asks for heads the rank's cache does not hold");
  return rs.kv.rows(layer, tensor);
}

/// Logits of every prompt position a rank holds (prompt logprobs).
void _mlir_ciface_mfrt_prompt_logits_f32(StridedMemRefType<float, 2> *logits,
                                         StridedMemRefType<int64_t, 1> *pos) {
  syncForHost();
  ProgramRank &rs = programRank();
  const Manifest &m = *rs.manifest;
  if (logits->sizes[1] != m.vocab || logits->sizes[0] != pos->sizes[0])
    fatal("internal: prompt logits have an unexpected shape");
  for (int64_t t = 0; t < logits->sizes[0]; ++t) {
    int64_t p = 0;
    Sequence *s =
        rs.sequenceOf(pos->data[pos->offset + t * pos->strides[0]], &p);
    if (!s || p >= s->output->tokens)
      continue; // padding
    RequestOutput *out = s->output;
    std::lock_guard<std::mutex> lock(out->mutex);
    if (out->promptWritten.empty()) {
      out->promptLogits.assign(size_t(out->tokens * m.vocab), 0.0f);
      out->promptWritten.assign(size_t(out->tokens), 0);
    }
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
  ProgramRank &rs = programRank();
  const Manifest &m = *rs.manifest;
  if (!valid || rs.prefill < 0 || !rs.sequences[size_t(rs.prefill)].output)
    return;
  if (logits->sizes[0] != m.vocab)
    fatal("internal: logits have " + std::to_string(logits->sizes[0]) +
          " entries, expected " + std::to_string(m.vocab));
  recordLogits(rs, rs.sequences[size_t(rs.prefill)],
               logits->data + logits->offset, logits->strides[0]);
}

/// The count of a decode step's rows whose logits are recorded, at least
/// one where the step has rows (moe.step_head_rows); the rank keeps them
/// for the fill below and for the trace of the head's collectives.
int64_t _mlir_ciface_mfrt_step_head_rows(StridedMemRefType<int64_t, 1> *pos) {
  syncForHost();
  ProgramRank &rs = programRank();
  rs.headRows.clear();
  rs.headPositions.clear();
  for (int64_t t = 0; t < pos->sizes[0]; ++t) {
    int64_t position = pos->data[pos->offset + t * pos->strides[0]];
    if (choosingSequence(rs, position)) {
      rs.headRows.push_back(t);
      rs.headPositions.push_back(position);
    }
  }
  if (rs.headRows.empty() && pos->sizes[0] > 0) {
    rs.headRows.push_back(0);
    rs.headPositions.push_back(pos->data[pos->offset]);
  }
  return int64_t(rs.headRows.size());
}

/// The rows that the count above kept, in order.
void _mlir_ciface_mfrt_step_head_rows_fill(
    StridedMemRefType<int64_t, 1> *rows) {
  const std::vector<int64_t> &picked = programRank().headRows;
  if (rows->sizes[0] != int64_t(picked.size()))
    fatal("internal: step head rows have " + std::to_string(rows->sizes[0]) +
          " entries, expected " + std::to_string(picked.size()));
  for (size_t i = 0; i < picked.size(); ++i)
    rows->data[rows->offset + int64_t(i) * rows->strides[0]] = picked[i];
}

/// The logits of a decode step's rows (`valid` non-zero), each the newest
/// token of its request; when prefill runs as a step, the prompt's last
/// row gives the request's logits.
void _mlir_ciface_mfrt_step_logits_f32(StridedMemRefType<float, 2> *logits,
                                       StridedMemRefType<int64_t, 1> *pos,
                                       int64_t valid) {
  syncForHost();
  ProgramRank &rs = programRank();
  const Manifest &m = *rs.manifest;
  if (logits->sizes[1] != m.vocab || logits->sizes[0] != pos->sizes[0])
    fatal("internal: step logits have an unexpected shape");
  if (!valid)
    return;
  for (int64_t t = 0; t < logits->sizes[0]; ++t) {
    Sequence *s =
        choosingSequence(rs, pos->data[pos->offset + t * pos->strides[0]]);
    if (!s)
      continue;
    const float *row = logits->data + logits->offset + t * logits->strides[0];
    // A prompt's logits (prefill's, or its last chunk's) are an output too.
    if (rs.stepping && s->generated > 0)
      keepLogits(m, *s, row, logits->strides[1]);
    else
      recordLogits(rs, *s, row, logits->strides[1]);
  }
}

/// Tags the rank's following traffic with a layer (-1: none).
void _mlir_ciface_mfrt_cg_set_layer(int64_t layer) {
  mfrt_set_layer(layer);
  ProgramRank &rs = programRank();
  if (layer < 0 && rs.inLayer && countsCompute(rs)) {
    // The layer's queries were its last named CP rows, each attending to
    // the positions of its sequence up to its own.
    uint64_t pairs = 0;
    for (int64_t position : rs.cpRows) {
      int64_t place = 0;
      if (rs.sequenceOf(position, &place))
        pairs += uint64_t(place + 1);
    }
    countCompute(rs, rs.layer, kQueryRows, rs.cpRows.size());
    countCompute(rs, rs.layer, kAttentionPairs, pairs);
  }
  rs.inLayer = layer >= 0;
  if (layer >= 0)
    rs.layer = layer;
}

/// The positions of the current layer's rows, in the SP layout (the hidden
/// state) and the CP layout (after the TP all-gather), for the tracing and
/// routing hooks; the rank the traced token lands on is the first-layer
/// holder of its row.
void _mlir_ciface_mfrt_cg_layer_rows(int64_t layer,
                                     UnrankedMemRefType<int64_t> *sp,
                                     UnrankedMemRefType<int64_t> *cp) {
  // The dispatch reads the SP rows' positions too (it leaves padding rows
  // home); the CP rows' serve tracing, the routing hooks and the compute
  // counters only.
  ProgramRank &rs = programRank();
  copyPositions(sp, rs.spRows);
  bool tracing = traceConfig().needsPositions();
  if (tracing || countsCompute(rs))
    copyPositions(cp, rs.cpRows);
  if (!tracing)
    return;
  if (layer == 0 &&
      !tracedRows(rs, rs.spRows.data(), int64_t(rs.spRows.size())).empty()) {
    TraceSightings &seen = traceSightings();
    std::lock_guard<std::mutex> lock(seen.mutex);
    seen.landing = mfrt_rank();
  }
}

int64_t _mlir_ciface_mfrt_cg_group_rank(int64_t id) {
  return mfrt_group_rank(group(id));
}

void _mlir_ciface_mfrt_cg_all_gather_f32(int64_t id,
                                         UnrankedMemRefType<float> *in,
                                         UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> a(in), b(out);
  markRows(programRank(), programRank().spRows, a.rows, a.count);
  check(mfrt_all_gather(group(id), a.data, b.data, a.count, MFRT_F32),
        "all_gather");
}

void _mlir_ciface_mfrt_cg_reduce_scatter_f32(int64_t id,
                                             UnrankedMemRefType<float> *in,
                                             UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> a(in), b(out);
  markRows(programRank(), programRank().cpRows, a.rows, a.count);
  check(mfrt_reduce_scatter(group(id), a.data, b.data, b.count, MFRT_F32),
        "reduce_scatter");
}

void _mlir_ciface_mfrt_cg_all_reduce_f32(int64_t id,
                                         UnrankedMemRefType<float> *in,
                                         UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> a(in), b(out);
  ProgramRank &rs = programRank();
  // In a layer: elements of each of its CP rows (projection norms' sums of
  // squares, a narrowed last layer's output projection), flattened (an
  // all-reduce's buffer is one dimension); an empty buffer (a rank without
  // surviving rows) carries no row. Between layers, the LM head's
  // all-reduce brings the last position's row to the TP group.
  if (rs.inLayer) {
    int64_t rows = int64_t(rs.cpRows.size());
    if (rows > 0 && a.count > 0 && a.count % rows == 0)
      markRows(rs, rs.cpRows, rows, a.count);
  } else if (holdsTracedLastRow(rs, rs.spRows)) {
    int64_t row = 0;
    mfrt_trace_mark(&row, 1, a.count);
  }
  check(mfrt_all_reduce(group(id), a.data, b.data, a.count, MFRT_F32),
        "all_reduce");
}

void _mlir_ciface_mfrt_cg_gather_f32(int64_t id, int64_t root,
                                     UnrankedMemRefType<float> *in,
                                     UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> a(in), b(out);
  ProgramRank &rs = programRank();
  // The LM head's logits slices: of the last prompt position, on the TP
  // group that holds it; of a decode step's rows that choose a token.
  if (rs.stepping) {
    markRows(rs, rs.headPositions, a.rows, a.count);
  } else if (holdsTracedLastRow(rs, rs.cpRows)) {
    int64_t row = 0;
    mfrt_trace_mark(&row, 1, a.count);
  }
  check(mfrt_gather(group(id), int(root), a.data, b.data, a.count, MFRT_F32),
        "gather");
}

/// Point to point along a group (pipeline stages): the peer is the member
/// `offset` places away.
static int peerOf(int64_t id, int64_t offset) {
  int64_t g = group(id);
  int r = mfrt_group_rank(g), n = mfrt_group_size(g);
  int64_t to = r + offset;
  if (to < 0 || to >= n)
    fatal("internal: pipeline peer " + std::to_string(to) +
          " outside the group of " + std::to_string(n));
  return mfrt_group_member(g, int(to));
}

void _mlir_ciface_mfrt_cg_send_f32(int64_t id, int64_t offset,
                                   UnrankedMemRefType<float> *in) {
  MemRefBuffer<float> a(in);
  markRows(programRank(), programRank().spRows, a.rows, a.count);
  check(mfrt_send(peerOf(id, offset), a.data, a.count, MFRT_F32), "send");
}

void _mlir_ciface_mfrt_cg_recv_f32(int64_t id, int64_t offset,
                                   UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> b(out);
  check(mfrt_recv(peerOf(id, offset), b.data, b.count, MFRT_F32), "recv");
}

/// One ring step of f32 tensors followed by their rows' positions, as one
/// message; the positions say whether it carries the traced token. Counted
/// as a K/V ring step, or with `queries` as pass-Q's.
static void
ringStepWithPositions(int64_t id, bool queries,
                      std::initializer_list<UnrankedMemRefType<float> *> in,
                      UnrankedMemRefType<int64_t> *p,
                      std::initializer_list<UnrankedMemRefType<float> *> out,
                      UnrankedMemRefType<int64_t> *pOut) {
  // Buffers stay put: a MemRefBuffer may point into its own staging copy.
  std::vector<std::unique_ptr<MemRefBuffer<float>>> ins, outs;
  size_t bytes = 0;
  for (UnrankedMemRefType<float> *m : in) {
    ins.push_back(std::make_unique<MemRefBuffer<float>>(m));
    bytes += size_t(ins.back()->count) * 4;
  }
  for (UnrankedMemRefType<float> *m : out)
    outs.push_back(std::make_unique<MemRefBuffer<float>>(m));
  MemRefBuffer<int64_t> c(p), co(pOut);
  size_t pb = size_t(c.count) * 8;
  SharedBuffer send(bytes + pb), recv(send.size());
  size_t at = 0;
  for (const auto &b : ins) {
    copyAny(send.data() + at, b->data, size_t(b->count) * 4);
    at += size_t(b->count) * 4;
  }
  copyAny(send.data() + at, c.data, pb);
  std::vector<int64_t> marks = tracedRows(programRank(), c.data, c.count);
  if (!marks.empty())
    mfrt_trace_mark(marks.data(), int64_t(marks.size()), 0);
  int64_t g = group(id), size = int64_t(send.size());
  check(queries ? mfrt_q_ring_step_bytes(g, send.data(), recv.data(), size)
                : mfrt_ring_step_bytes(g, send.data(), recv.data(), size),
        "ring_step");
  at = 0;
  for (const auto &b : outs) {
    copyAny(b->data, recv.data() + at, size_t(b->count) * 4);
    at += size_t(b->count) * 4;
  }
  copyAny(co.data, recv.data() + at, pb);
}

/// K, V and their positions as one message around the ring.
void _mlir_ciface_mfrt_cg_ring_step_f32_f32_i64(
    int64_t id, UnrankedMemRefType<float> *k, UnrankedMemRefType<float> *v,
    UnrankedMemRefType<int64_t> *p, UnrankedMemRefType<float> *kOut,
    UnrankedMemRefType<float> *vOut, UnrankedMemRefType<int64_t> *pOut) {
  ringStepWithPositions(id, /*queries=*/false, {k, v}, p, {kOut, vOut}, pOut);
}

/// One tensor that is both key and value (MLA's latent) and its positions.
void _mlir_ciface_mfrt_cg_ring_step_f32_i64(int64_t id,
                                            UnrankedMemRefType<float> *kv,
                                            UnrankedMemRefType<int64_t> *p,
                                            UnrankedMemRefType<float> *kvOut,
                                            UnrankedMemRefType<int64_t> *pOut) {
  ringStepWithPositions(id, /*queries=*/false, {kv}, p, {kvOut}, pOut);
}

/// A decode step's queries, partial output and log-sum-exp, and the
/// queries' positions, as one message around the ring (pass-Q).
void _mlir_ciface_mfrt_cg_q_ring_step_f32_f32_f32_i64(
    int64_t id, UnrankedMemRefType<float> *q, UnrankedMemRefType<float> *o,
    UnrankedMemRefType<float> *lse, UnrankedMemRefType<int64_t> *p,
    UnrankedMemRefType<float> *qOut, UnrankedMemRefType<float> *oOut,
    UnrankedMemRefType<float> *lseOut, UnrankedMemRefType<int64_t> *pOut) {
  ringStepWithPositions(id, /*queries=*/true, {q, o, lse}, p,
                        {qOut, oOut, lseOut}, pOut);
}

/// The merged outputs of a decode step's queries and their positions, back
/// to the queries' rank (pass-Q's last step).
void _mlir_ciface_mfrt_cg_q_ring_step_f32_i64(
    int64_t id, UnrankedMemRefType<float> *o, UnrankedMemRefType<int64_t> *p,
    UnrankedMemRefType<float> *oOut, UnrankedMemRefType<int64_t> *pOut) {
  ringStepWithPositions(id, /*queries=*/true, {o}, p, {oOut}, pOut);
}

void _mlir_ciface_mfrt_cg_ring_step_f32(int64_t id,
                                        UnrankedMemRefType<float> *x,
                                        UnrankedMemRefType<float> *out) {
  MemRefBuffer<float> a(x), b(out);
  check(mfrt_ring_step_bytes(group(id), a.data, b.data, a.count * 4),
        "ring_step");
}

void _mlir_ciface_mfrt_cg_ring_step_i64(int64_t id,
                                        UnrankedMemRefType<int64_t> *x,
                                        UnrankedMemRefType<int64_t> *out) {
  MemRefBuffer<int64_t> a(x), b(out);
  check(mfrt_ring_step_bytes(group(id), a.data, b.data, a.count * 8),
        "ring_step");
}

/// Dispatch: the handle keeps the routing; rows wait in it until fetched.
int64_t _mlir_ciface_mfrt_cg_dispatch_f32(int64_t id, int64_t hierarchical,
                                          int64_t numExperts,
                                          UnrankedMemRefType<float> *x,
                                          UnrankedMemRefType<int64_t> *experts,
                                          UnrankedMemRefType<float> *weights) {
  MemRefBuffer<float> a(x), w(weights);
  MemRefBuffer<int64_t> e(experts);
  // A rank may have no rows (a narrowed last layer's): it still takes part.
  int64_t tokens = a.rows, k = e.rowElems, hidden = a.rowElems;
  ProgramRank &rs = programRank();
  const TraceConfig &c = traceConfig();
  const int64_t *choices = e.data;
  std::vector<int64_t> routed, traceMarks;
  if (c.needsPositions() && tokens > 0 && int64_t(rs.spRows.size()) != tokens)
    fatal("--trace-token / --force-routing: the dispatch's " +
          std::to_string(tokens) + " rows are not the layer's " +
          std::to_string(rs.spRows.size()) +
          " rows (this program's layers do not say their rows' positions)");
  if (c.needsPositions() && int64_t(rs.spRows.size()) == tokens) {
    // The routing hooks (--force-routing): random experts for every token,
    // or fixed ones for the traced token in the layers the file lists.
    std::vector<int64_t> marks =
        tracedRows(rs, rs.spRows.data(), int64_t(rs.spRows.size()));
    auto forced = c.forced.find(rs.layer);
    if (c.randomRouting || (!marks.empty() && forced != c.forced.end())) {
      routed.assign(e.data, e.data + e.count);
      if (c.randomRouting)
        for (int64_t t = 0; t < tokens; ++t) {
          int64_t place = rs.spRows[size_t(t)];
          Sequence *s = rs.sequenceOf(place, &place);
          randomExperts(c.seed, s ? s->request : -1, place, rs.layer,
                        numExperts, k, &routed[size_t(t * k)], c.zipf);
        }
      if (forced != c.forced.end())
        for (int64_t t : marks)
          std::copy(forced->second.begin(), forced->second.end(),
                    routed.begin() + t * k);
      choices = routed.data();
    }
    traceMarks = std::move(marks);
  }
  // Padding rows (positions at or past their request's length; every row
  // of a dummy batch) stay home: no expert computes them, their outputs are 0.
  const float *rows = a.data, *rowWeights = w.data;
  int64_t sent = tokens;
  std::vector<int64_t> real;
  SharedBuffer packedRows;
  std::vector<int64_t> packedChoices;
  std::vector<float> packedWeights;
  if (int64_t(rs.spRows.size()) == tokens) {
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t place = 0;
      if (rs.sequenceOf(rs.spRows[size_t(t)], &place))
        real.push_back(t);
    }
    if (int64_t(real.size()) < tokens) {
      sent = int64_t(real.size());
      packedRows.resize(size_t(sent * hidden) * sizeof(float));
      float *to = reinterpret_cast<float *>(packedRows.data());
      for (int64_t i = 0; i < sent; ++i) {
        int64_t t = real[size_t(i)];
        copyAny(to + i * hidden, a.data + t * hidden, size_t(hidden) * 4);
        packedChoices.insert(packedChoices.end(), choices + t * k,
                             choices + (t + 1) * k);
        packedWeights.insert(packedWeights.end(), w.data + t * k,
                             w.data + (t + 1) * k);
      }
      rows = to;
      choices = packedChoices.data();
      rowWeights = packedWeights.data();
      // The traced token's row, where the packing put it.
      for (int64_t &m : traceMarks)
        m = std::lower_bound(real.begin(), real.end(), m) - real.begin();
    } else {
      real.clear();
    }
  }
  if (!traceMarks.empty())
    mfrt_trace_mark(traceMarks.data(), int64_t(traceMarks.size()), hidden);
  mfrt_dispatch *h = nullptr;
  // The layer's expert placement, where the compiler placed it from routing.
  const std::map<int64_t, meshfold::ExpertPlacement> &placements =
      rs.manifest->placements;
  auto placed = placements.find(rs.layer);
  const std::vector<int64_t> *table =
      placed == placements.end() ? nullptr : &placed->second.experts;
  check(mfrt_dispatch_tokens_placed(
            group(id),
            hierarchical ? MFRT_DISPATCH_HIERARCHICAL : MFRT_DISPATCH_FLAT,
            rows, sent, hidden, MFRT_F32, choices, rowWeights, k, numExperts,
            table ? table->data() : nullptr, table ? int64_t(table->size()) : 0,
            &h),
        "dispatch");
  if (sent < tokens)
    rs.packedDispatches[int64_t(reinterpret_cast<intptr_t>(h))] = {
        std::move(real), tokens, hidden};
  if (program().reportRouting)
    countRouting(rs, choices, sent * k, numExperts);
  countCompute(rs, rs.layer, kMoERows, uint64_t(tokens));
  countCompute(rs, rs.layer, kExpertRows, uint64_t(mfrt_dispatch_count(h)));
  return int64_t(reinterpret_cast<intptr_t>(h));
}

int64_t _mlir_ciface_mfrt_cg_dispatch_count(int64_t handle) {
  return mfrt_dispatch_count(
      reinterpret_cast<const mfrt_dispatch *>(intptr_t(handle)));
}

void _mlir_ciface_mfrt_cg_dispatch_fetch(int64_t handle,
                                         UnrankedMemRefType<float> *rows,
                                         UnrankedMemRefType<int64_t> *local) {
  auto *h = reinterpret_cast<const mfrt_dispatch *>(intptr_t(handle));
  MemRefBuffer<float> r(rows);
  MemRefBuffer<int64_t> l(local);
  // Rows are device memory under nccl; expert ids are host memory.
  copyAny(r.data, mfrt_dispatch_rows(h), size_t(r.count) * sizeof(float));
  copyAny(l.data, mfrt_dispatch_experts(h), size_t(l.count) * sizeof(int64_t));
}

void _mlir_ciface_mfrt_cg_combine_f32(int64_t handle,
                                      UnrankedMemRefType<float> *out,
                                      UnrankedMemRefType<float> *y) {
  auto *h = reinterpret_cast<mfrt_dispatch *>(intptr_t(handle));
  MemRefBuffer<float> o(out), r(y);
  ProgramRank &rs = programRank();
  auto packed = rs.packedDispatches.find(handle);
  if (packed == rs.packedDispatches.end()) {
    check(mfrt_combine_tokens(h, o.data, r.data), "combine");
    return;
  }
  // The dispatch left padding rows home: combine the others, then put them
  // back in their rows, padding rows 0.
  PackedDispatch p = std::move(packed->second);
  rs.packedDispatches.erase(packed);
  size_t row = size_t(p.hidden) * sizeof(float);
  SharedBuffer sent(p.real.size() * row);
  check(mfrt_combine_tokens(h, o.data, sent.data()), "combine");
  std::vector<float> zero(size_t(p.hidden), 0.0f);
  for (int64_t t = 0; t < p.tokens; ++t)
    copyAny(r.data + t * p.hidden, zero.data(), row);
  for (size_t i = 0; i < p.real.size(); ++i)
    copyAny(r.data + p.real[i] * p.hidden, sent.data() + i * row, row);
}

// --gemm-backend cublaslt's products are libmfrt_cublaslt.a's; a program
// that calls them without that library linked (never one meshfold-compile
// links) ends here.
__attribute__((weak)) void
_mlir_ciface_mfrt_cg_gemm_bf16(UnrankedMemRefType<uint16_t> *,
                               UnrankedMemRefType<uint16_t> *,
                               UnrankedMemRefType<float> *) {
  fatal("this program calls cuBLASLt (--gemm-backend cublaslt) but was "
        "linked without libmfrt_cublaslt.a");
}
} // extern "C"
