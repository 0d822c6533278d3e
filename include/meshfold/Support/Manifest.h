//===- Manifest.h - The compiled model's manifest ---------------*- C++ -*-===//
//
// The compiler embeds a manifest in every executable (symbol __mf_manifest):
// the model's dimensions, the plan, the groups the program uses and the
// weight table (id, Hugging Face name, storage dtype f32 or bf16, shape,
// slice, stages). The runtime checks the weights file and the outputs against
// it. Written (formatManifest, by the compiler) and parsed (parseManifest, by
// the runtime) in one file.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_MANIFEST_H
#define MESHFOLD_SUPPORT_MANIFEST_H

#include "meshfold/Support/ExpertPlacement.h"
#include <cstdint>

#include <map>
#include <string>
#include <vector>

namespace meshfold {

/// One split of a weight: `parts` equal slices along `dim`, slice
/// i = coord(axis) * parts / size(axis).
struct ManifestShard {
  int64_t dim = 0, parts = 1;
  std::string mesh, axis;
};

struct ManifestParam {
  int64_t id = 0;
  /// Hugging Face name; "{e}" stands for the expert index of a stacked weight.
  std::string name;
  /// Full shape; for a stacked weight the leading dimension counts experts.
  std::vector<int64_t> shape;
  /// Storage type of the program's buffer: the runtime converts the
  /// checkpoint's tensor to it (bf16: rounded to nearest even).
  bool bf16 = false;
  bool isStacked() const { return name.find("{e}") != std::string::npos; }
  /// The slice this program holds: one slice per split, each along its own
  /// dim (none: the whole tensor).
  std::vector<ManifestShard> shards;
  /// The pipeline stages that read it (empty: every stage).
  std::vector<int64_t> stages;
  /// For expert weights placed from routing: the layer whose placement
  /// (Manifest::placements) says which experts the leading dim holds on
  /// this rank's EP coordinate, and the model's number of experts; -1, 0:
  /// not placed.
  int64_t placedLayer = -1, placedExperts = 0;

  /// The whole tensor's shape: `shape` with the sharded dims unsliced.
  std::vector<int64_t> globalShape() const;
  /// The checkpoint name of expert `e` of a stacked weight.
  std::string expertName(int64_t e) const;
};

/// A group the program uses: its mesh and comma-separated axes.
struct ManifestGroup {
  std::string mesh, axes;
};

struct Manifest {
  std::string entry;
  int64_t hidden = 0, vocab = 0, layers = 0, heads = 0, kvHeads = 0,
          headDim = 0, experts = 0, topK = 0, ffn = 0;
  /// The model's max_position_embeddings; 0 when the config had none (or
  /// the manifest predates the field): prompts are then not checked.
  int64_t maxPositions = 0;
  /// The layers with routed experts where some are dense; 0: every layer.
  int64_t moeLayers = 0;
  /// Whether each cached row is one tensor, both key and value (MLA's
  /// latent): the runtime stores, and sends to the decode pool, it once.
  bool kvShared = false;
  /// How many tensors each cached row holds: K and V, or the one shared.
  int64_t kvCopies() const { return kvShared ? 1 : 2; }
  /// Whether the query and key are normalised over their whole projection
  /// (OLMoE): TP all-reduces each row's sums of squares.
  bool projNorms = false;
  /// Whether the entry's last layer computes attention and MoE only for the
  /// rows that reach an output (mf-narrow-last-layer).
  bool narrowedLast = false;
  /// Whether prefill records every prompt position's logits
  /// (meshfold-compile --prompt-logprobs).
  bool promptLogits = false;
  /// A batch-invariant program's (the attention's key tile there, else 1):
  /// a decode step's key tiles over a request's cached K/V also start at
  /// each multiple of it of the request's own rows (and at each block), so
  /// that they do not depend on the rest of the batch.
  int64_t historyTile = 1;
  /// The decode step function ("" when the program has none: prefill only).
  std::string decode;
  /// The model's end-of-sequence token ids (config.json and
  /// generation_config.json); empty when it names none.
  std::vector<int64_t> eosTokens;
  std::vector<ManifestParam> params;
  /// The plan in the runtime's text form ("" for a one-rank program).
  std::string plan;
  std::vector<ManifestGroup> groups;
  /// The expert placements of the layers placed from routing (by layer):
  /// which experts each EP rank holds, and where the dispatch sends rows.
  std::map<int64_t, ExpertPlacement> placements;
};

/// The module attribute (i64) that carries the config's
/// max_position_embeddings from the importer to the manifest (maxPositions).
inline const char *getMaxPositionsAttrName() { return "moe.max_positions"; }

/// The module attribute (array of i64) that carries the model's
/// end-of-sequence token ids from the importer to the manifest (eosTokens).
inline const char *getEosTokensAttrName() { return "moe.eos_token_ids"; }

/// The manifest as text, the form parseManifest reads.
std::string formatManifest(const Manifest &manifest);

/// Parses the manifest text; returns false and sets `error` on bad input.
bool parseManifest(const char *text, Manifest &out, std::string &error);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_MANIFEST_H
