//===- MeshLayout.h - Group math for the folded meshes ----------*- C++ -*-===//
//
// The one place in meshfold where group math lives: coordinates of a rank,
// members of an axis group, node of a rank, relay of a rank on a node, and
// expert placement. Passes, the runtime and the reports all use it.
//
// Pure C++17 with no LLVM/MLIR dependency, so the runtime can link it too.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_MESHLAYOUT_H
#define MESHFOLD_SUPPORT_MESHLAYOUT_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshfold {

/// A named axis of the attention mesh.
struct MeshAxis {
  std::string name;
  int64_t size;
};

/// An expert-mesh axis is a composite of attention axes (first listed varies
/// fastest), e.g. ep = {tp, cp, dp}, pp = {pp}. Expert axes listed with the
/// same components are folded over them (MoE Parallel Folding): they split
/// the components' linear index i in expert-mesh order, first fastest, and
/// their sizes multiply to the components'. With etp = 2 and ep = 8, both of
/// {tp, cp, dp} and tp*cp*dp = 16: etp = i % 2, ep = i / 2. Axes folded over
/// different components share none.
struct ExpertAxis {
  std::string name;
  int64_t size;
  std::vector<std::string> composedOf;
};

/// The flags a plan is built from (meshfold-compile's, mf-set-plan's).
struct PlanFlags {
  int64_t tp = 1, cp = 1, dp = 1, pp = 1;
  /// Expert tensor, expert and expert data parallel sizes (ep 0: the rest of
  /// tp*cp*dp).
  int64_t etp = 1, ep = 0, edp = 1;
  std::string order = "tp,cp,dp,pp";
  std::string expertOrder = "etp,ep,edp";
  int64_t gpusPerNode = 8;

  /// The flags of a one-rank program: every axis of size 1 on a node of
  /// one GPU. The one definition of the one-device plan
  /// (PlanSpec::singleDevice() is built from it).
  static PlanFlags singleDevice();
};

/// A parallelism plan: devices, topology and two meshes folded on the same
/// devices.
struct PlanSpec {
  int64_t devices = 1;
  int64_t gpusPerNode = 8;
  double nvlinkGBps = 450, ibGBps = 50;
  /// First axis varies fastest: rank = tp + 2*cp + 4*dp + 16*pp.
  std::vector<MeshAxis> attention;
  std::vector<ExpertAxis> experts;

  /// The plan of a one-rank program: PlanFlags::singleDevice()'s.
  static PlanSpec singleDevice();

  /// Build the usual plan from CLI-style flags: attention axes in `order` (a
  /// permutation of tp,cp,dp,pp; comma separated), expert mesh ep = the non-pp
  /// attention axes in that order, then pp. ep must equal tp*cp*dp;
  /// devices = tp*cp*dp*pp. All four attention axes are kept, even those of
  /// size 1. The result is also validated with MeshLayout::create. Returns
  /// false, leaves `out` untouched and sets *error (naming the rule) on bad
  /// input: sizes < 1 ('axis-size'), duplicate names in order
  /// ('duplicate-axis'), unknown or missing names in order ('fold'), ep
  /// mismatch ('mesh-size'), bad gpusPerNode ('node-size').
  static bool fromFlags(int64_t tp, int64_t cp, int64_t dp, int64_t pp,
                        int64_t ep, const std::string &order,
                        int64_t gpusPerNode, PlanSpec &out, std::string *error);
  /// The same from all the plan flags, the expert mesh's too: etp, ep and
  /// edp are folded over the non-pp attention axes in `expertOrder` (a
  /// permutation of etp,ep,edp), then pp; etp*ep*edp must equal tp*cp*dp
  /// ('mesh-size', with a fix where one exists); ep 0 means tp*cp*dp /
  /// (etp*edp). Expert axes of size 1 other than ep are left out of the plan.
  static bool fromFlags(const PlanFlags &flags, PlanSpec &out,
                        std::string *error);
};

/// How two ranks are connected: same rank / same node / different node.
enum class LinkClass { Self, NVLink, IB };

/// "self", "nvlink" or "ib".
const char *linkClassName(LinkClass link);

/// The KV heads each TP rank holds: n_kv / TP, or one (shared by TP / n_kv
/// ranks) when n_kv < TP (rule gqa).
inline int64_t kvHeadsPerRank(int64_t numKVHeads, int64_t tp) {
  return numKVHeads >= tp ? numKVHeads / tp : 1;
}

/// The model dimensions that the plan rules constrain.
struct ModelDims {
  int64_t numHeads, numKVHeads, numExperts, numLayers;
  /// The LM head's vocab, split over TP (0: not checked).
  int64_t vocab = 0;
  /// An expert's FFN width, split over ETP (0: not checked).
  int64_t expertFFN = 0;
};

/// Answers every question about groups for one validated plan.
///
/// Axis names: attention axes are looked up first, then expert axes. An axis
/// the plan does not have has size 1 and coordinate 0 everywhere. The expert
/// mesh is expected to have axes named "ep" and (when pipelining) "pp".
class MeshLayout {
public:
  /// Validates the plan; on failure returns std::nullopt and sets *error to a
  /// one-line message that starts with the rule name in this form:
  /// "plan rule 'mesh-size': attention mesh axes multiply to 16, but the plan
  /// has 32 devices". Rules: axis-size, duplicate-axis, mesh-size, node-size,
  /// fold, pp-groups. A plan with fewer devices than gpusPerNode is accepted
  /// as one partly filled node.
  static std::optional<MeshLayout> create(const PlanSpec &spec,
                                          std::string *error);

  /// Checks a model against the plan (rules tp-heads, gqa, ep-experts,
  /// etp-ffn, pp-layers, tp-vocab); returns "" when fine, else the first
  /// violation as a message in the same form as create()'s ("plan rule
  /// 'tp-heads': ...").
  std::string checkModel(const ModelDims &m) const;

  int64_t numDevices() const { return plan.devices; }
  int64_t gpusPerNode() const { return plan.gpusPerNode; }
  int64_t numNodes() const { return nodeCount; }
  const PlanSpec &spec() const { return plan; }

  /// True if the attention or the expert mesh has an axis `name`.
  bool hasAxis(const std::string &name) const;
  /// Size of an attention or expert axis by name; 1 for an axis the plan does
  /// not have (e.g. "cp" in DP32/EP32 written without cp).
  int64_t axisSize(const std::string &name) const;
  /// Coordinate of `rank` on an attention axis or on an expert (composite)
  /// axis (linearized from its components, first fastest). 0 for absent axes;
  /// -1 for a rank outside [0, numDevices()).
  int64_t coord(int64_t rank, const std::string &axis) const;
  /// All attention coordinates of `rank`, by axis name.
  std::map<std::string, int64_t> coords(int64_t rank) const;
  /// "tp 1, cp 1, dp 2, pp 0": the attention coordinates of `rank`, in mesh
  /// order.
  std::string describe(int64_t rank) const;
  /// Rank from attention coordinates (missing axes = 0). A key may also name
  /// an expert axis, whose coordinate is split over its components. Returns
  /// -1 if a coordinate is out of range (a key the plan does not have counts
  /// as a size-1 axis, so only 0 is in range).
  int64_t rankOf(const std::map<std::string, int64_t> &coords) const;

  /// Members of the group of `rank` along `axes` (attention or expert axis
  /// names): all ranks that share every OTHER coordinate with `rank`. Ordered
  /// by their linearized coordinate along `axes` (first axis fastest), so
  /// index i in the result is the member with group-rank i. Absent axes add
  /// nothing; an attention axis reached twice (e.g. {"ep", "tp"}) counts once.
  /// Empty for a rank outside [0, numDevices()).
  std::vector<int64_t> group(int64_t rank,
                             const std::vector<std::string> &axes) const;
  /// Index of `rank` within group(rank, axes); -1 for a rank out of range.
  int64_t groupRank(int64_t rank, const std::vector<std::string> &axes) const;
  /// Number of members of any group along `axes`.
  int64_t groupSize(const std::vector<std::string> &axes) const;

  /// rank / gpusPerNode.
  int64_t node(int64_t rank) const { return rank / plan.gpusPerNode; }
  /// rank % gpusPerNode.
  int64_t localIndex(int64_t rank) const { return rank % plan.gpusPerNode; }
  /// The GPU on `node` with the same local index as `rank` (same IB rail):
  /// DeepSeek/DeepEP relay.
  int64_t relay(int64_t rank, int64_t node) const;
  /// Self for the same rank, NVLink within a node, IB across nodes.
  LinkClass link(int64_t from, int64_t to) const;
  /// Bandwidth of a link class in GB/s (0 for Self).
  double bandwidthGBps(LinkClass link) const;

  /// Experts are placed in contiguous blocks over the EP group of each pp
  /// stage: expert e lives on the rank whose ep coordinate is
  /// e / (numExperts / EP) and whose pp coordinate is `stage` (other expert
  /// axes, if any, at 0). Returns -1 if EP does not divide numExperts or an
  /// argument is out of range.
  int64_t expertOwner(int64_t expert, int64_t numExperts, int64_t stage) const;
  /// The ranks that hold expert `expert` for the tokens of `rank`: those of
  /// its etp x ep group (same edp and pp coordinates) whose ep coordinate
  /// owns the expert, one per etp slice, in etp order. Empty if EP does not
  /// divide numExperts or an argument is out of range.
  std::vector<int64_t> expertHolders(int64_t rank, int64_t expert,
                                     int64_t numExperts) const;
  /// The members of `rank`'s etp x ep group whose ep coordinate is `coord`
  /// (the holders of that EP rank's experts, one per etp slice), in etp
  /// order. Empty if `coord` or `rank` is out of range.
  std::vector<int64_t> epHolders(int64_t rank, int64_t coord) const;
  /// The experts held by `rank` (first and count). {-1, 0} if EP does not
  /// divide numExperts.
  std::pair<int64_t, int64_t> localExperts(int64_t rank,
                                           int64_t numExperts) const;
  /// Stage (pp coordinate) of a layer (0-based) when numLayers are cut into
  /// PP contiguous stages. -1 if PP does not divide numLayers or the layer is
  /// out of range.
  int64_t stageOfLayer(int64_t layer, int64_t numLayers) const;
  /// The pp coordinate of `rank`.
  int64_t stageOf(int64_t rank) const { return coord(rank, "pp"); }

  /// Where a request's K/V cache lives (docs/design.md §6), as the
  /// partitioning passes place it. The KV heads [first, first + count) of
  /// `numKVHeads` that `rank` holds: its TP coordinate's n_kv / TP, or, when
  /// n_kv < TP, the one head it shares with TP / n_kv ranks (rule gqa, as
  /// mf-shard-tp slices K and V). {-1, 0} when TP neither divides n_kv nor
  /// is a multiple of it, or for a rank out of range.
  std::pair<int64_t, int64_t> kvHeadRange(int64_t rank,
                                          int64_t numKVHeads) const;
  /// The prompt positions of a `promptLength`-token request that `rank`
  /// holds after prefill, as [begin, end) ranges in order (mf-zigzag-cp):
  /// the prompt, padded to a multiple of 2 * CP * TP, is cut into 2 * CP
  /// chunks, and CP rank r holds chunks r and 2 * CP - 1 - r, clipped to
  /// the prompt (empty ranges left out, adjacent ones merged). Every TP
  /// rank of a CP rank holds the same positions (of its own heads).
  std::vector<std::pair<int64_t, int64_t>>
  promptPositions(int64_t rank, int64_t promptLength) const;

private:
  MeshLayout() = default;

  /// A coordinate of a rank: an attention axis, or a folded expert axis.
  struct Digit {
    int attention = -1, expert = -1;
    bool operator==(const Digit &o) const {
      return attention == o.attention && expert == o.expert;
    }
  };

  /// Index of an attention / expert axis, or -1.
  int attentionIndex(const std::string &name) const;
  int expertIndex(const std::string &name) const;
  /// The digits (first fastest) that `axes` vary, without repeats: an
  /// attention axis; an expert axis folded with others; the components of
  /// any other expert axis.
  std::vector<Digit> digits(const std::vector<std::string> &axes) const;
  int64_t digitSize(Digit d) const;
  int64_t digitValue(int64_t rank, Digit d) const;
  /// The linear index of `rank` over expert axis e's components.
  int64_t foldIndex(int64_t rank, int e) const;
  /// `rank` with the given digits set.
  int64_t withDigits(int64_t rank,
                     const std::vector<std::pair<Digit, int64_t>> &set) const;

  PlanSpec plan;
  int64_t nodeCount = 1;
  /// Stride of each attention axis in the rank.
  std::vector<int64_t> strides;
  /// Per expert axis: folded with another axis; its stride in the linear
  /// index of its components.
  std::vector<bool> folded;
  std::vector<int64_t> foldStride;
};

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_MESHLAYOUT_H
