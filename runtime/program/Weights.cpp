//===- Weights.cpp - The checkpoint against the manifest, and the slices --===//
//
// The weights file is checked against the manifest before any rank starts
// (every tensor's dtype and shape); each rank then reads only its slices:
// the weights of its pipeline stage, sliced along the manifest's shard
// dimension by its index in the shard group, a stacked expert weight as its
// block of the per-expert checkpoint tensors.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Program.h"

#include "meshfold/Support/DType.h"

#include <algorithm>
#include <cstring>

using namespace mfrt;
using namespace meshfold;

namespace {
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

/// `values` rounded to bf16 (nearest even). A bf16 checkpoint's values,
/// widened exactly to f32 on reading, come back bit for bit.
std::vector<uint16_t> toBF16(const std::vector<float> &values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = f32ToBF16(values[i]);
  return out;
}

/// This rank's slice of `p`, slice `index` along its shard dimension, in
/// f32.
std::vector<float> readSlice(const SafetensorsFile &file,
                             const ManifestParam &p, int64_t index) {
  std::vector<int64_t> global = p.globalShape();
  if (!p.isStacked()) {
    std::vector<float> full = readTensor(file, p.name, global);
    if (p.shardDim < 0)
      return full;
    return sliceAlong(full, global, p.shardDim, p.shardParts, index);
  }
  // Stacked experts: this rank's block, one checkpoint tensor per expert.
  std::vector<float> buf;
  std::vector<int64_t> oneGlobal(global.begin() + 1, global.end());
  int64_t first = p.shardDim == 0 ? index * p.shape[0] : 0;
  for (int64_t e = 0; e < p.shape[0]; ++e) {
    std::vector<float> full =
        readTensor(file, p.expertName(first + e), oneGlobal);
    if (p.shardDim > 0)
      full = sliceAlong(full, oneGlobal, p.shardDim - 1, p.shardParts, index);
    buf.insert(buf.end(), full.begin(), full.end());
  }
  return buf;
}
} // namespace

/// A file for another model gets the same error, the first wrong tensor in
/// the model's order (all stages, all experts), on every run. A missing
/// tensor is left to the ranks that read it, so that the error names the
/// rank that needed it.
void mfrt::checkWeights(const Manifest &m, const SafetensorsFile &file) {
  std::string error;
  for (const ManifestParam &p : m.params)
    for (const auto &[name, shape] : checkpointTensors(p))
      if (file.find(name) && !findTensor(file, name, shape, error))
        die(error);
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

void mfrt::loadWeights(ProgramRank &rs,
                       std::map<std::string, int64_t> &groups) {
  const Program &prog = program();
  rs.params.resize(prog.manifest.params.size());
  // Only the weights of this rank's pipeline stage.
  int64_t stage = 0;
  if (prog.manifest.plan.find("pp:") != std::string::npos)
    stage = mfrt_group_rank(groupOf(groups, "pp"));
  for (const ManifestParam &p : prog.manifest.params) {
    if (!p.stages.empty() &&
        std::find(p.stages.begin(), p.stages.end(), stage) == p.stages.end())
      continue;
    int64_t index = 0;
    if (p.shardDim >= 0) {
      int64_t g = groupOf(groups, p.shardAxis);
      index = int64_t(mfrt_group_rank(g)) * p.shardParts / mfrt_group_size(g);
    }
    WeightSlice &slice = rs.params[p.id];
    slice.f32 = readSlice(*prog.weights, p, index);
    if (int64_t(slice.f32.size()) != product(p.shape))
      fatal("internal: weight '" + p.name + "' slice has the wrong size");
    if (p.bf16) {
      slice.bf16 = toBF16(slice.f32);
      std::vector<float>().swap(slice.f32);
    }
  }
}
