//===- MemoryReport.cpp - per-rank memory of a partitioned program --------===//

#include "meshfold/Analysis/MemoryReport.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "llvm/ADT/MapVector.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace meshfold;

/// Bytes of a tensor `v` with each dynamic dim `dynamic` long; 0 for
/// anything else.
static int64_t tensorBytes(Value v, int64_t dynamic) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return 0;
  int64_t n = 1;
  for (int64_t d : type.getShape())
    n *= ShapedType::isDynamic(d) ? dynamic : d;
  return n * std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// The temporaries `op`'s lowering allocates besides its results, for
/// `tokens` tokens and `rows` dispatched rows (convert-moe-to-linalg).
static int64_t transientBytes(Operation *op, int64_t tokens, int64_t rows,
                              int64_t topK) {
  constexpr int64_t f32 = 4, i64 = 8;
  // Grouped experts: every (row, slot) in expert order ([slots, d] results
  // and the permutation), one expert's gathered rows and its two hidden
  // states (h1, which then holds silu(h1) * h3, and h3) at a time.
  auto grouped = [&](int64_t slots, int64_t experts, int64_t ffn, int64_t d) {
    int64_t perExpert = (slots + experts - 1) / experts;
    return slots * d * f32 + 2 * slots * i64 + perExpert * d * f32 +
           2 * perExpert * ffn * f32;
  };
  if (auto router = dyn_cast<moe::RouterOp>(op))
    return tokens * router.getGate().getType().getDimSize(0) * f32 +
           2 * topK * tokens * i64;
  if (auto experts = dyn_cast<moe::ExpertsOp>(op)) {
    auto w1 = experts.getW1().getType();
    return grouped(tokens * topK, w1.getDimSize(0), w1.getDimSize(1),
                   w1.getDimSize(2));
  }
  if (auto ffn = dyn_cast<moe::ExpertFFNOp>(op)) {
    auto w1 = ffn.getW1().getType();
    return grouped(rows, w1.getDimSize(0), w1.getDimSize(1), w1.getDimSize(2));
  }
  if (auto mlp = dyn_cast<moe::MLPOp>(op)) {
    // Its two hidden states (g, which then holds silu(g) * u, and u) and
    // the gate's one column.
    int64_t ffn = mlp.getW1().getType().getDimSize(0);
    return 2 * tokens * ffn * f32 + (mlp.getGate() ? tokens * f32 : 0);
  }
  if (auto norm = dyn_cast<moe::RMSNormOp>(op)) {
    // One sum of squares per normalised vector (per token, or per token and
    // head).
    int64_t vectors = tokens;
    for (int64_t d : norm.getType().getShape().drop_front().drop_back())
      vectors *= d;
    return vectors * f32;
  }
  return 0;
}

int64_t meshfold::estimateActivationPeak(func::FuncOp fn, int64_t tokens) {
  int64_t topK = 1;
  fn.walk([&](moe::RouterOp r) {
    topK = std::max<int64_t>(topK, int64_t(r.getTopK()));
  });
  int64_t rows = tokens * topK;

  SmallVector<Operation *> ops;
  DenseMap<Operation *, int64_t> order;
  fn.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (op == fn.getOperation())
      return;
    order[op] = int64_t(ops.size());
    ops.push_back(op);
  });
  // The buffer a value lives in: a reshape's and a layer argument's are
  // those of their source.
  DenseMap<Value, Value> source;
  auto bufferOf = [&](Value v) {
    for (auto it = source.find(v); it != source.end(); it = source.find(v))
      v = it->second;
    return v;
  };
  struct Span {
    int64_t bytes, first, last;
  };
  llvm::MapVector<Value, Span> spans;
  auto define = [&](Value v, int64_t at, int64_t dynamic) {
    if (int64_t bytes = tensorBytes(v, dynamic))
      spans.insert({v, Span{bytes, at, at}});
  };
  for (BlockArgument arg : fn.getArguments())
    define(arg, 0, tokens);
  for (Operation *op : ops) {
    if (auto layer = dyn_cast<moe::LayerOp>(op))
      for (auto [arg, in] :
           llvm::zip(layer.getBody().getArguments(), layer.getInputs()))
        source[arg] = in;
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(
            op)) {
      source[op->getResult(0)] = op->getOperand(0);
      continue;
    }
    if (isa<moe::ParamOp>(op))
      continue;
    // A layer's results exist from its end; everything else from its op.
    int64_t at = order[op];
    if (op->getNumRegions() && !op->getRegion(0).empty())
      at = order[op->getRegion(0).back().getTerminator()];
    int64_t dynamic = isa<mf::DispatchOp, moe::ExpertFFNOp>(op) ? rows : tokens;
    for (Value r : op->getResults())
      define(r, at, dynamic);
  }
  for (Operation *op : ops)
    for (Value v : op->getOperands()) {
      auto it = spans.find(bufferOf(v));
      if (it != spans.end())
        it->second.last = std::max(it->second.last, order[op]);
    }

  int64_t peak = 0;
  for (Operation *op : ops) {
    int64_t at = order[op], live = transientBytes(op, tokens, rows, topK);
    for (auto &[v, span] : spans)
      if (span.first <= at && at <= span.last)
        live += span.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

FailureOr<std::vector<RankMemory>>
meshfold::computeMemoryReport(ModuleOp module, int64_t maxPrompt,
                              int64_t bytesPerElement, StringRef entry,
                              int64_t maxNewTokens) {
  PlanSpec spec;
  if (auto plan =
          module->getAttrOfType<mf::PlanAttr>(mf::MFDialect::getPlanAttrName()))
    spec = plan.toPlanSpec();
  else
    spec = PlanSpec::singleDevice();
  std::string error;
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
  if (!layout)
    return module.emitError() << error;
  int64_t cp = layout->axisSize("cp"), tp = layout->axisSize("tp");
  // Each rank's attention sees its CP rank's tokens: the padded prompt / CP.
  int64_t pad = (cp > 1 || tp > 1) ? 2 * cp * tp : 1;
  int64_t padded = (maxPrompt + pad - 1) / pad * pad;
  int64_t tokens = padded / cp;
  // Decoding appends the K/V of every generated token but the last, one
  // position per CP rank in turn.
  int64_t cached =
      tokens + (std::max<int64_t>(maxNewTokens - 1, 0) + cp - 1) / cp;

  // The model's experts, for the replicas of placed expert weights.
  int64_t experts = 0;
  if (layout->hasAxis("ep"))
    if (FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
        succeeded(info))
      experts = info->numExperts;

  std::vector<RankMemory> out;
  for (int64_t rank = 0; rank < layout->numDevices(); ++rank) {
    RankMemory m;
    m.rank = rank;
    m.stage = layout->coord(rank, "pp");
    auto fn = module.lookupSymbol<func::FuncOp>(
        (entry + "_stage" + Twine(m.stage)).str());
    if (!fn)
      fn = module.lookupSymbol<func::FuncOp>(entry);
    if (!fn)
      return module.emitError() << "memory report: no function @" << entry;
    llvm::StringSet<> seen;
    fn.walk([&](moe::ParamOp p) {
      std::string key = p.getName().str();
      if (auto shard = p->getAttr(mf::MFDialect::getShardAttrName()))
        key += " sharded";
      if (!seen.insert(key).second)
        return;
      m.weightBytes += p.getType().getNumElements() * bytesPerElement;
      if (p->hasAttr(mf::MFDialect::getPlacedAttrName()) && experts > 0) {
        int64_t slots = p.getType().getDimSize(0),
                extra = slots - experts / layout->axisSize("ep");
        m.replicaBytes +=
            p.getType().getNumElements() / slots * extra * bytesPerElement;
      }
    });
    fn.walk([&](moe::KVCacheOp c) {
      // K and V, or one tensor recorded as both (MLA's latent), stored once.
      auto k = c.getKey().getType();
      int64_t copies = c.getKey() == c.getValue() ? 1 : 2;
      m.kvBytes +=
          copies * cached * k.getDimSize(1) * k.getDimSize(2) * bytesPerElement;
      m.kvRowElements += copies * k.getDimSize(1) * k.getDimSize(2);
    });
    // The shared experts' weights (whole on every rank: each runs them on
    // its own rows), and what splitting them over TP would cost instead:
    // the CP rank's rows all-gathered before and reduce-scattered after,
    // each rank sending (TP-1)/TP of them both times.
    llvm::StringSet<> sharedSeen;
    int64_t d = 0;
    fn.walk([&](moe::MLPOp mlp) {
      ++m.sharedLayers;
      d = mlp.getType().getDimSize(1);
      for (Value w : mlp->getOperands().drop_front())
        if (auto p = w.getDefiningOp<moe::ParamOp>();
            p && sharedSeen.insert(p.getName()).second)
          m.sharedBytes += p.getType().getNumElements() * bytesPerElement;
    });
    m.sharedTP = tp;
    m.sharedSplitBytesPerLayer =
        2 * (tp - 1) * tokens / tp * d * bytesPerElement;
    m.activationBytes = estimateActivationPeak(fn, tokens);
    out.push_back(m);
  }
  return out;
}

/// Bytes in GB (10^9), as the report prints them.
static double toGB(int64_t bytes) { return double(bytes) / 1e9; }

/// The rank of `memory` that needs the most bytes (the first of them).
static const RankMemory &findLargestRank(ArrayRef<RankMemory> memory) {
  const RankMemory *largest = &memory.front();
  for (const RankMemory &m : memory)
    if (m.totalBytes() > largest->totalBytes())
      largest = &m;
  return *largest;
}

void meshfold::printMemoryReport(raw_ostream &os, ArrayRef<RankMemory> memory,
                                 StringRef dtype, int64_t maxPrompt,
                                 int64_t maxNewTokens, int64_t decodeBase) {
  os << llvm::format("memory per rank (%s, KV cache and f32 activations for "
                     "a %lld-token prompt",
                     dtype.str().c_str(), (long long)maxPrompt);
  if (maxNewTokens > 0)
    os << llvm::format(", KV cache also for %lld generated tokens%s",
                       (long long)maxNewTokens,
                       decodeBase > 0 ? " on the decode pool" : "");
  os << "):\n";
  os << "  rank " << (decodeBase > 0 ? "   pool " : "")
     << "stage  weights (bytes)  KV cache (bytes)  activations (bytes)"
        "     total GB\n";
  for (const RankMemory &m : memory) {
    os << llvm::format("  %4lld ", (long long)m.rank);
    if (decodeBase > 0)
      os << (m.rank < decodeBase ? "prefill " : " decode ");
    os << llvm::format("%5lld %16lld %17lld %20lld %12.3f\n",
                       (long long)m.stage, (long long)m.weightBytes,
                       (long long)m.kvBytes, (long long)m.activationBytes,
                       toGB(m.totalBytes()));
  }
  // The shared experts' placement: the rank holding the most of them.
  const RankMemory *shared = nullptr;
  for (const RankMemory &m : memory)
    if (m.sharedBytes > 0 && m.sharedTP > 1 &&
        (!shared || m.sharedBytes > shared->sharedBytes))
      shared = &m;
  if (!shared)
    return;
  os << llvm::format(
      "shared experts and dense MLPs: whole on every rank, each running them "
      "on its own "
      "rows (no communication): %lld bytes of rank %lld's weights (%lld "
      "layers); split over TP=%lld like the attention linears they would "
      "take %lld bytes and add an all-gather and a reduce-scatter of the "
      "rows, %lld bytes sent per rank per layer\n",
      (long long)shared->sharedBytes, (long long)shared->rank,
      (long long)shared->sharedLayers, (long long)shared->sharedTP,
      (long long)(shared->sharedBytes / shared->sharedTP),
      (long long)shared->sharedSplitBytesPerLayer);
}

void meshfold::printKVBudget(raw_ostream &os, ArrayRef<RankMemory> memory,
                             int64_t deviceBytes, StringRef deviceMemory,
                             int64_t maxPrompt, int64_t kvBlock) {
  const RankMemory *tightest = nullptr;
  int64_t tokens = 0;
  for (const RankMemory &m : memory) {
    int64_t left = deviceBytes - m.weightBytes - m.activationBytes;
    if (m.kvBytes <= 0 || maxPrompt <= 0 || left < m.kvBytes)
      continue;
    // Tokens whose KV cache fits, at the rank's bytes per prompt token.
    int64_t fit = int64_t(double(left) / double(m.kvBytes) * double(maxPrompt));
    if (!tightest || fit < tokens) {
      tightest = &m;
      tokens = fit;
    }
  }
  if (!tightest)
    return;
  int64_t left =
      deviceBytes - tightest->weightBytes - tightest->activationBytes;
  os << llvm::format("KV budget on a %s device: %lld bytes left on rank %lld "
                     "after its weights and activations, the KV cache of "
                     "%lld prompt tokens (%.1f bytes each on that rank)\n",
                     deviceMemory.str().c_str(), (long long)left,
                     (long long)tightest->rank, (long long)tokens,
                     double(tightest->kvBytes) / double(maxPrompt));
  int64_t blockBytes = kvBlock * tightest->kvRowElements * 4;
  if (blockBytes <= 0)
    return;
  os << llvm::format("paged K/V cache (f32, blocks of %lld of the rank's "
                     "rows, %lld bytes each on rank %lld): %lld blocks in "
                     "those bytes (--kv-memory %lld)\n",
                     (long long)kvBlock, (long long)blockBytes,
                     (long long)tightest->rank, (long long)(left / blockBytes),
                     (long long)left);
}

LogicalResult meshfold::checkDeviceMemory(ArrayRef<RankMemory> memory,
                                          int64_t deviceBytes,
                                          StringRef deviceMemory,
                                          std::string &error) {
  const RankMemory &largest = findLargestRank(memory);
  int64_t need = largest.totalBytes();
  if (deviceBytes <= 0 || need <= deviceBytes)
    return success();
  error = llvm::formatv("rank {0} needs {1:F3} GB (weights {2:F3} GB, KV cache "
                        "{3:F3} GB, activations {4:F3} GB), more than the "
                        "device memory {5}",
                        largest.rank, toGB(need), toGB(largest.weightBytes),
                        toGB(largest.kvBytes), toGB(largest.activationBytes),
                        deviceMemory)
              .str();
  return failure();
}
