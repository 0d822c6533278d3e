//===- Weights.cpp - The checkpoint against the manifest, and the slices --===//
//
// The weights file is checked against the manifest before any rank starts
// (every tensor's dtype and shape); each rank then takes only its slices:
// the weights of its pipeline stage, sliced along the manifest's shard
// dimension by its index in the shard group, a stacked expert weight as its
// block of the per-expert checkpoint tensors.
//
// The checkpoint (one file, or shards named by an index) is memory-mapped
// (Checkpoint, SafetensorsFile). A slice that is one run of
// the file's bytes, aligned for its element type and already in the storage
// type, is handed to the program where it lies in the mapping; any other is
// copied (and converted) into a buffer of its own, and the mapped pages it
// was read from are dropped from the process again, so that a run holds
// each weight once.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Weights.h"

#include "mfrt/io/RandomWeights.h"
#include "mfrt/program/Program.h"

#include "meshfold/Support/DType.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

using namespace mfrt;
using namespace meshfold;

namespace {
int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// fp8 weights are quantized in blocks of this many rows and columns, each
/// with one f32 scale: DeepSeek-V3's format (quantization_config's
/// weight_block_size [128, 128], the one the importer accepts).
constexpr int64_t kFp8Block = 128;

/// The name of the scales of the fp8 weight `name` ("...weight" ->
/// "...weight_scale_inv").
std::string scaleName(const std::string &name) { return name + "_scale_inv"; }

/// The scales of the fp8 weight `t`: `t`'s name + "_scale_inv", a float
/// tensor of one value per 128 x 128 block (a partial block at the end of
/// each dim has its own), which multiplies the block's values.
const TensorInfo *findScales(const Checkpoint &file, const TensorInfo &t,
                             std::string &error, bool map) {
  std::string where = file.fileOf(t.name) + ": weight '" + t.name + "'";
  if (t.shape.size() != 2) {
    error = where + " has dtype F8_E4M3 but is not 2-D (only matrices are "
                    "stored as fp8 in 128 x 128 blocks)";
    return nullptr;
  }
  std::string name = scaleName(t.name);
  const TensorInfo *s = map ? file.find(name, &error) : file.header(name);
  if (!s && !error.empty())
    return nullptr;
  std::vector<int64_t> shape = {(t.shape[0] + kFp8Block - 1) / kFp8Block,
                                (t.shape[1] + kFp8Block - 1) / kFp8Block};
  if (!s) {
    error = where + " has dtype F8_E4M3 but its scales '" + name +
            "' are missing (expected shape " + formatShape(shape) +
            ": one per 128 x 128 block)";
    return nullptr;
  }
  if (s->dtype != DType::F32 && s->dtype != DType::BF16 &&
      s->dtype != DType::F16) {
    error = file.fileOf(name) + ": scales '" + name + "' have dtype " +
            dtypeName(s->dtype) + ", expected F32, BF16 or F16";
    return nullptr;
  }
  if (s->shape != shape) {
    error = file.fileOf(name) + ": scales '" + name + "' have shape " +
            formatShape(s->shape) + ", expected " + formatShape(shape) +
            " for weight " + formatShape(t.shape) + " in 128 x 128 blocks";
    return nullptr;
  }
  return s;
}

/// The checkpoint tensor `name`, after checking its presence, dtype and
/// shape (and, for an fp8 one, its scales', which go to `scales` when
/// given); the first failed check is the error. With `map`, its shard is
/// mapped (its data is read next); else only its header is looked at.
const TensorInfo *findTensor(const Checkpoint &file, const std::string &name,
                             const std::vector<int64_t> &shape,
                             std::string &error, bool map = true,
                             const TensorInfo **scales = nullptr) {
  const TensorInfo *t = map ? file.find(name, &error) : file.header(name);
  if (!t && !error.empty())
    return nullptr; // Its shard could not be mapped.
  if (!t) {
    error = file.path() + ": weight '" + name +
            "' is missing (expected shape " + formatShape(shape) + ")";
    return nullptr;
  }
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 &&
      t->dtype != DType::F16 && t->dtype != DType::F8_E4M3) {
    error = file.fileOf(name) + ": weight '" + name + "' has dtype " +
            dtypeName(t->dtype) + ", expected F32, BF16, F16 or F8_E4M3";
    return nullptr;
  }
  if (t->shape != shape) {
    error = file.fileOf(name) + ": weight '" + name + "' has shape " +
            formatShape(t->shape) + ", the model expects " +
            formatShape(shape) + " (a weights file for a different model?)";
    return nullptr;
  }
  if (t->dtype == DType::F8_E4M3) {
    const TensorInfo *s = findScales(file, *t, error, map);
    if (!s)
      return nullptr;
    if (scales)
      *scales = s;
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

/// One checkpoint tensor, after the checks of findTensor, and its scales
/// when it is fp8 (else null).
std::pair<const TensorInfo *, const TensorInfo *>
checkedTensor(const Checkpoint &file, const std::string &name,
              const std::vector<int64_t> &shape) {
  std::string error;
  const TensorInfo *scales = nullptr;
  const TensorInfo *t =
      findTensor(file, name, shape, error, /*map=*/true, &scales);
  if (!t)
    fatal(error);
  return {t, scales};
}

/// A run of consecutive elements of one checkpoint tensor (with the tensor's
/// block scales when it is fp8).
struct Run {
  const TensorInfo *tensor;
  int64_t first, count;
  const TensorInfo *scales = nullptr;
  const uint8_t *begin() const {
    return tensor->data + size_t(first) * dtypeSize(tensor->dtype);
  }
  size_t bytes() const { return size_t(count) * dtypeSize(tensor->dtype); }
};

/// Appends the runs of the slice of `t` that holds elements
/// [start[d], start[d] + len[d]) along each dim d, in row-major order of the
/// slice.
void appendSliceRuns(std::pair<const TensorInfo *, const TensorInfo *> tensor,
                     const std::vector<int64_t> &start,
                     const std::vector<int64_t> &len, std::vector<Run> &runs) {
  const TensorInfo &t = *tensor.first;
  const TensorInfo *scales = tensor.second;
  const size_t rank = t.shape.size();
  // Trailing dims taken whole join the run of the last dim that is not.
  size_t cut = rank;
  int64_t inner = 1;
  while (cut > 0 && start[cut - 1] == 0 && len[cut - 1] == t.shape[cut - 1])
    inner *= t.shape[--cut];
  if (cut == 0) {
    runs.push_back({&t, 0, t.numElements(), scales});
    return;
  }
  --cut;
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    stride[d - 1] = stride[d] * t.shape[d];
  // Every index of the dims before `cut`, last fastest.
  std::vector<int64_t> at(cut, 0);
  while (true) {
    int64_t first = start[cut] * stride[cut];
    for (size_t d = 0; d < cut; ++d)
      first += (start[d] + at[d]) * stride[d];
    runs.push_back({&t, first, len[cut] * inner, scales});
    size_t d = cut;
    while (d > 0 && ++at[d - 1] == len[d - 1])
      at[--d] = 0;
    if (d == 0)
      return;
  }
}

/// The runs of this rank's slice of `p` (slice index[i] of shard i; the
/// experts `placed` along dim 0 of a placed weight), in the order of the
/// program's buffer.
std::vector<Run> sliceRuns(const Checkpoint &file, const ManifestParam &p,
                           const std::vector<int64_t> &index,
                           const std::vector<int64_t> &placed) {
  std::vector<int64_t> global = p.globalShape();
  std::vector<int64_t> start(global.size(), 0), len = global;
  for (size_t i = 0; i < p.shards.size(); ++i) {
    const ManifestShard &shard = p.shards[i];
    len[size_t(shard.dim)] = p.shape[size_t(shard.dim)];
    start[size_t(shard.dim)] = index[i] * len[size_t(shard.dim)];
  }
  std::vector<Run> runs;
  // The experts along dim 0: those placed on this rank, or the block.
  std::vector<int64_t> experts = placed;
  if (p.placedLayer < 0 && p.isStacked())
    for (int64_t e = start[0]; e < start[0] + len[0]; ++e)
      experts.push_back(e);
  if (!p.isStacked()) {
    auto t = checkedTensor(file, p.name, global);
    if (p.placedLayer < 0) {
      appendSliceRuns(t, start, len, runs);
      return runs;
    }
    len[0] = 1;
    for (int64_t e : experts) {
      start[0] = e;
      appendSliceRuns(t, start, len, runs);
    }
    return runs;
  }
  // Stacked experts: one checkpoint tensor per expert.
  std::vector<int64_t> oneGlobal(global.begin() + 1, global.end());
  std::vector<int64_t> oneStart(start.begin() + 1, start.end());
  std::vector<int64_t> oneLen(len.begin() + 1, len.end());
  for (int64_t e : experts)
    appendSliceRuns(checkedTensor(file, p.expertName(e), oneGlobal), oneStart,
                    oneLen, runs);
  return runs;
}

/// The bytes of `runs` when they follow each other in the file in one
/// dtype (the slice can then be used where it lies), else null.
const uint8_t *contiguous(const std::vector<Run> &runs) {
  if (runs.empty())
    return nullptr;
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].tensor->dtype != runs[0].tensor->dtype ||
        runs[i].begin() != runs[i - 1].begin() + runs[i - 1].bytes())
      return nullptr;
  return runs[0].begin();
}

/// Converts `count` elements of `dtype` at `src` (any alignment) to f32.
void toF32(DType dtype, const uint8_t *src, float *dst, size_t count) {
  switch (dtype) {
  case DType::F32:
    std::memcpy(dst, src, count * sizeof(float));
    return;
  case DType::BF16:
    for (size_t i = 0; i < count; ++i)
      dst[i] =
          bf16ToF32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
    return;
  case DType::F16:
    for (size_t i = 0; i < count; ++i)
      dst[i] =
          f16ToF32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
    return;
  case DType::I64:
  case DType::I32:
  case DType::F8_E4M3: // rejected by findTensor; fp8 is read by runToF32
    break;
  }
  fatal("internal: weight of dtype " + std::string(dtypeName(dtype)) +
        " read as f32");
}

/// Converts the elements of `r` to f32; an fp8 run is dequantized, each
/// value times its 128 x 128 block's scale (the product rounded once, in
/// f32).
void runToF32(const Run &r, float *dst) {
  if (r.tensor->dtype != DType::F8_E4M3) {
    toF32(r.tensor->dtype, r.begin(), dst, size_t(r.count));
    return;
  }
  // Every e4m3 code's value, decoded once.
  static const std::array<float, 256> decoded = [] {
    std::array<float, 256> table;
    for (size_t code = 0; code < table.size(); ++code)
      table[code] = f8E4M3ToF32(uint8_t(code));
    return table;
  }();
  const TensorInfo &t = *r.tensor, &s = *r.scales;
  const int64_t cols = t.shape[1], scaleCols = s.shape[1];
  for (int64_t at = r.first, end = r.first + r.count; at < end;) {
    // The elements from `at` to the end of its block's row segment.
    int64_t row = at / cols, col = at % cols;
    int64_t blockEnd = std::min(cols, (col / kFp8Block + 1) * kFp8Block);
    int64_t stop = std::min(end, row * cols + blockEnd);
    float scale;
    toF32(s.dtype,
          s.data + size_t((row / kFp8Block) * scaleCols + col / kFp8Block) *
                       dtypeSize(s.dtype),
          &scale, 1);
    for (int64_t i = at; i < stop; ++i)
      dst[i - r.first] = decoded[t.data[i]] * scale;
    at = stop;
  }
}

/// Converts the elements of `r` to bf16 (nearest even, from their f32
/// value: an f16 value goes through its exact f32 widening, an fp8 one
/// through its dequantized f32); a bf16 checkpoint's values are copied.
void runToBF16(const Run &r, uint16_t *dst) {
  if (r.tensor->dtype == DType::BF16) {
    std::memcpy(dst, r.begin(), r.bytes());
    return;
  }
  constexpr int64_t chunk = 4096;
  float buf[chunk];
  for (int64_t at = 0; at < r.count; at += chunk) {
    int64_t n = std::min(chunk, r.count - at);
    runToF32({r.tensor, r.first + at, n, r.scales}, buf);
    for (int64_t i = 0; i < n; ++i)
      dst[at + i] = f32ToBF16(buf[i]);
  }
}

size_t pageSize() {
  static const size_t size = size_t(::sysconf(_SC_PAGESIZE));
  return size;
}

/// The pages wholly inside [begin, begin + bytes), as an address and length.
std::pair<uint8_t *, size_t> innerPages(const uint8_t *begin, size_t bytes) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(begin);
  uintptr_t hi = lo + bytes;
  uintptr_t mask = pageSize() - 1;
  lo = (lo + mask) & ~mask;
  hi &= ~mask;
  if (hi <= lo)
    return {nullptr, 0};
  return {reinterpret_cast<uint8_t *>(lo), size_t(hi - lo)};
}

//===----------------------------------------------------------------------===//
// Progress on a terminal
//===----------------------------------------------------------------------===//

/// What the ranks of this process have loaded: every rank adds the bytes of
/// its slices when it starts and counts them off as it goes.
struct LoadCounters {
  std::atomic<uint64_t> total{0}, done{0};
  std::atomic<int> loading{0};
};

LoadCounters &loadCounters() {
  static LoadCounters counters;
  return counters;
}

std::atomic<bool> lineOpen{false};

/// The granule of the progress counter: big enough to cost nothing, small
/// enough for a smooth percentage.
constexpr size_t progressStep = size_t(16) << 20;

/// "600 MB", "1.4 GB".
std::string formatBytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof(buf), "%.1f GB", double(bytes) / (1 << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.0f MB", double(bytes) / (1 << 20));
  return buf;
}

/// Touches every page of a slice used in place, so that reading it from the
/// file is part of loading (and its progress), not of the first layer.
void prefault(const uint8_t *begin, size_t bytes) {
  LoadCounters &c = loadCounters();
  // Read ahead the whole range; then one read per page maps it.
  auto [pages, length] = innerPages(begin, bytes);
  if (length)
    (void)::madvise(pages, length, MADV_WILLNEED);
  size_t step = pageSize();
  for (size_t at = 0; at < bytes; at += progressStep) {
    size_t end = std::min(bytes, at + progressStep);
    for (size_t b = at; b < end; b += step)
      (void)*static_cast<const volatile uint8_t *>(begin + b);
    c.done += end - at;
  }
}

/// Copies (converting) `runs` into `dst`, of `bf16` or f32, then drops the
/// mapped pages read: the program reads the copy only.
void copyRuns(const std::vector<Run> &runs, bool bf16, void *dst) {
  LoadCounters &c = loadCounters();
  size_t at = 0, pending = 0;
  for (const Run &r : runs) {
    size_t n = size_t(r.count);
    if (bf16)
      runToBF16(r, static_cast<uint16_t *>(dst) + at);
    else
      runToF32(r, static_cast<float *>(dst) + at);
    at += n;
    pending += r.bytes();
    if (pending >= progressStep) {
      c.done += pending;
      pending = 0;
    }
  }
  c.done += pending;
  // The file's pages stay in the page cache; other slices that read them
  // fault them in again.
  for (const Run &r : runs) {
    auto [pages, length] = innerPages(r.begin(), r.bytes());
    if (length)
      (void)::madvise(pages, length, MADV_DONTNEED);
  }
}
} // namespace

/// A file for another model gets the same error, the first wrong tensor in
/// the model's order (all stages, all experts), on every run. A missing
/// tensor is left to the ranks that read it, so that the error names the
/// rank that needed it.
void mfrt::checkWeights(const Manifest &m, const Checkpoint &file) {
  std::string error;
  for (const ManifestParam &p : m.params)
    for (const auto &[name, shape] : checkpointTensors(p))
      if (file.header(name) &&
          !findTensor(file, name, shape, error, /*map=*/false))
        die(error);
}

std::unique_ptr<Checkpoint>
mfrt::generateWeights(const std::vector<const Manifest *> &manifests,
                      uint64_t seed) {
  std::vector<RandomTensor> tensors;
  std::set<std::string> seen;
  for (const Manifest *m : manifests)
    for (const ManifestParam &p : m->params)
      for (auto &[name, shape] : checkpointTensors(p))
        if (seen.insert(name).second)
          tensors.push_back({name, p.bf16 ? DType::BF16 : DType::F32, shape});
  std::string error;
  std::unique_ptr<Checkpoint> weights = randomCheckpoint(
      tensors, seed, "random weights (seed " + std::to_string(seed) + ")",
      std::max(1u, std::thread::hardware_concurrency()), &error);
  if (!weights)
    die(error);
  return weights;
}

int64_t mfrt::groupOf(std::map<std::string, int64_t> &cache,
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

namespace {
/// The experts this rank holds of placed weight `p`, by its EP coordinate
/// and the placement of its layer; empty for a weight not placed.
std::vector<int64_t> placedExperts(const Manifest &m, const ManifestParam &p,
                                   std::map<std::string, int64_t> &groups) {
  if (p.placedLayer < 0)
    return {};
  auto it = m.placements.find(p.placedLayer);
  const int64_t g = groupOf(groups, "ep");
  if (it == m.placements.end() || it->second.ep != mfrt_group_size(g) ||
      it->second.slots != p.shape[0] ||
      it->second.numExperts != p.placedExperts)
    fatal("internal: weight '" + p.name + "' is placed by layer " +
          std::to_string(p.placedLayer) +
          ", whose placement does not match it");
  const ExpertPlacement &placement = it->second;
  auto first = placement.experts.begin() +
               long(mfrt_group_rank(g) * placement.slots);
  return std::vector<int64_t>(first, first + long(placement.slots));
}
} // namespace

void mfrt::loadWeights(ProgramRank &rs,
                       std::map<std::string, int64_t> &groups) {
  const Program &prog = program();
  LoadCounters &counters = loadCounters();
  const Manifest &m = *rs.manifest;
  rs.params.resize(m.params.size());
  // Only the weights of this rank's pipeline stage.
  int64_t stage = 0;
  if (m.plan.find("pp:") != std::string::npos)
    stage = mfrt_group_rank(groupOf(groups, "pp"));
  std::vector<std::pair<const ManifestParam *, std::vector<Run>>> slices;
  uint64_t total = 0;
  for (const ManifestParam &p : m.params) {
    if (!p.stages.empty() &&
        std::find(p.stages.begin(), p.stages.end(), stage) == p.stages.end())
      continue;
    std::vector<int64_t> index;
    for (const ManifestShard &shard : p.shards) {
      int64_t g = groupOf(groups, shard.axis);
      index.push_back(int64_t(mfrt_group_rank(g)) * shard.parts /
                      mfrt_group_size(g));
    }
    std::vector<Run> runs =
        sliceRuns(*prog.weights, p, index, placedExperts(m, p, groups));
    int64_t elements = 0;
    for (const Run &r : runs) {
      elements += r.count;
      total += r.bytes();
    }
    if (elements != product(p.shape))
      fatal("internal: weight '" + p.name + "' slice has the wrong size");
    slices.push_back({&p, std::move(runs)});
  }
  counters.total += total;
  ++counters.loading;

  // --report load: the files this rank reads and how its slices are held.
  std::set<std::string> files;
  uint64_t inPlace = 0, copied = 0;
  if (prog.reportLoad)
    for (const auto &[p, runs] : slices)
      for (const Run &r : runs)
        files.insert(prog.weights->fileOf(r.tensor->name));
  for (auto &[p, runs] : slices) {
    WeightSlice &slice = rs.params[p->id];
    DType storage = p->bf16 ? DType::BF16 : DType::F32;
    const uint8_t *in = contiguous(runs);
    if (in && runs[0].tensor->dtype == storage &&
        reinterpret_cast<uintptr_t>(in) % dtypeSize(storage) == 0) {
      size_t bytes = size_t(product(p->shape)) * dtypeSize(storage);
      slice.mapped = in;
      slice.mappedBytes = bytes;
      inPlace += bytes;
      prefault(in, bytes);
      continue;
    }
    copied += size_t(product(p->shape)) * dtypeSize(storage);
    if (p->bf16) {
      slice.bf16.resize(size_t(product(p->shape)));
      copyRuns(runs, true, slice.bf16.data());
    } else {
      slice.f32.resize(size_t(product(p->shape)));
      copyRuns(runs, false, slice.f32.data());
    }
  }
  --counters.loading;
  if (prog.reportLoad && mfrt_rank() >= 0 &&
      size_t(mfrt_rank()) < prog.loads.size()) {
    // The shards this process has mapped (under mpirun, this rank's).
    auto [mappedFiles, mappedBytes] = prog.weights->mapped();
    program().loads[size_t(mfrt_rank())] = {uint64_t(files.size()),
                                            total,
                                            inPlace,
                                            copied,
                                            mappedFiles,
                                            mappedBytes};
  }
}

void mfrt::showLoadProgress(std::atomic<bool> &stop) {
  // Silent for a load that takes under a second.
  auto start = std::chrono::steady_clock::now();
  LoadCounters &c = loadCounters();
  bool shown = false;
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bool loading = c.loading.load() > 0;
    if (!shown && (!loading || std::chrono::steady_clock::now() - start <
                                   std::chrono::seconds(1)))
      continue;
    uint64_t total = c.total.load(), done = std::min(c.done.load(), total);
    if (total == 0)
      continue;
    std::fprintf(stderr, "\rloading weights: %3d%% (%s of %s)",
                 int(done * 100 / total), formatBytes(done).c_str(),
                 formatBytes(total).c_str());
    shown = true;
    lineOpen = true;
    if (!loading)
      break;
    std::fflush(stderr);
  }
  if (shown && lineOpen.exchange(false))
    std::fputc('\n', stderr);
}

bool mfrt::progressLineOpen() { return lineOpen.exchange(false); }
