//===- MemoryReport.cpp - per-rank memory of a partitioned program --------===//

#include "meshfold/Analysis/MemoryReport.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace meshfold;

int64_t meshfold::parseByteSize(StringRef text) {
  text = text.trim();
  uint64_t scale = 1;
  for (auto [suffix, mult] : {std::pair<StringRef, uint64_t>{"GiB", 1ull << 30},
                              {"MiB", 1ull << 20},
                              {"KiB", 1ull << 10},
                              {"GB", 1000000000ull},
                              {"MB", 1000000ull},
                              {"KB", 1000ull},
                              {"B", 1ull}})
    if (text.consume_back(suffix)) {
      scale = mult;
      break;
    }
  double value;
  if (text.trim().getAsDouble(value) || !(value > 0))
    return -1;
  return int64_t(value * double(scale));
}

FailureOr<std::vector<RankMemory>>
meshfold::computeMemoryReport(ModuleOp module, int64_t maxPrompt,
                              int64_t bytesPerElement, StringRef entry) {
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
    });
    fn.walk([&](moe::KVCacheOp c) {
      auto k = c.getKey().getType();
      m.kvBytes +=
          2 * tokens * k.getDimSize(1) * k.getDimSize(2) * bytesPerElement;
    });
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
    if (m.weightBytes + m.kvBytes > largest->weightBytes + largest->kvBytes)
      largest = &m;
  return *largest;
}

void meshfold::printMemoryReport(raw_ostream &os, ArrayRef<RankMemory> memory,
                                 StringRef dtype, int64_t maxPrompt) {
  os << llvm::format(
      "memory per rank (%s, KV cache for a %lld-token prompt):\n",
      dtype.str().c_str(), (long long)maxPrompt);
  os << "  rank stage  weights (bytes)  KV cache (bytes)     total GB\n";
  for (const RankMemory &m : memory)
    os << llvm::format("  %4lld %5lld %16lld %17lld %12.3f\n",
                       (long long)m.rank, (long long)m.stage,
                       (long long)m.weightBytes, (long long)m.kvBytes,
                       toGB(m.weightBytes + m.kvBytes));
}

LogicalResult meshfold::checkDeviceMemory(ArrayRef<RankMemory> memory,
                                          int64_t deviceBytes,
                                          StringRef deviceMemory,
                                          std::string &error) {
  const RankMemory &largest = findLargestRank(memory);
  int64_t need = largest.weightBytes + largest.kvBytes;
  if (deviceBytes <= 0 || need <= deviceBytes)
    return success();
  error = llvm::formatv("rank {0} needs {1:F3} GB (weights {2:F3} GB, KV cache "
                        "{3:F3} GB), more than the device memory {4}",
                        largest.rank, toGB(need), toGB(largest.weightBytes),
                        toGB(largest.kvBytes), deviceMemory)
              .str();
  return failure();
}
