//===- ExplainPlacement.cpp - routing files and expert placements ---------===//

#include "meshfold/Analysis/ExplainPlacement.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Support/ExpertPlacement.h"
#include "meshfold/Support/MeshLayout.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace meshfold;

namespace {

/// Reads `json` (the parsed file) into `out`; returns the error, or "".
std::string readRouting(const llvm::json::Object &json,
                        const moe::ModelInfo &info, RoutingFile &out) {
  if (json.getString("format") != "meshfold-routing")
    return "it is not a meshfold routing file (\"format\" must be "
           "\"meshfold-routing\")";
  if (json.getInteger("version") != 1)
    return "field 'version' must be 1";
  const llvm::json::Object *model = json.getObject("model");
  if (!model)
    return "it has no 'model' object";
  const std::pair<const char *, int64_t> fields[] = {
      {"layers", info.numLayers},
      {"experts", info.numExperts},
      {"top_k", info.topK},
      {"hidden_size", info.hidden}};
  for (auto [name, want] : fields) {
    std::optional<int64_t> got = model->getInteger(name);
    if (got != want)
      return "it is the routing of another model: 'model." + std::string(name) +
             "' is " + (got ? std::to_string(*got) : std::string("missing")) +
             ", this model has " + std::to_string(want);
  }
  const llvm::json::Array *layers = json.getArray("layers");
  if (!layers)
    return "it has no 'layers' array";
  for (const llvm::json::Value &v : *layers) {
    const llvm::json::Object *layer = v.getAsObject();
    std::optional<int64_t> index =
        layer ? layer->getInteger("layer") : std::nullopt;
    const llvm::json::Array *rows = layer ? layer->getArray("rows") : nullptr;
    if (!index || *index < 0 || *index >= info.numLayers || !rows)
      return "each entry of 'layers' needs a 'layer' of the model (0 .. " +
             std::to_string(info.numLayers - 1) + ") and its 'rows'";
    if (int64_t(rows->size()) != info.numExperts)
      return "layer " + std::to_string(*index) + " counts rows of " +
             std::to_string(rows->size()) + " experts, the model has " +
             std::to_string(info.numExperts);
    if (out.rows.count(*index))
      return "layer " + std::to_string(*index) + " is listed twice";
    std::vector<double> &counts = out.rows[*index];
    for (const llvm::json::Value &r : *rows) {
      std::optional<double> n = r.getAsNumber();
      if (!n || *n < 0)
        return "layer " + std::to_string(*index) +
               ": rows must be counts (numbers, 0 or more)";
      counts.push_back(*n);
    }
  }
  return "";
}

/// The modeled rows per EP rank of one placement: "max M, mean A,
/// max/mean R".
std::string rankFigures(const std::vector<double> &rows) {
  double max = 0, sum = 0;
  for (double r : rows) {
    max = std::max(max, r);
    sum += r;
  }
  double mean = rows.empty() ? 0 : sum / double(rows.size());
  return llvm::formatv("max {0:F1}, mean {1:F1}, max/mean {2:F3}", max, mean,
                       maxOverMean(rows))
      .str();
}
} // namespace

bool meshfold::readRoutingFile(StringRef path, const moe::ModelInfo &info,
                               RoutingFile &out, std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = path.str() + ": cannot read the routing file (" +
            buffer.getError().message() + ")";
    return false;
  }
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  if (!json) {
    error =
        path.str() + ": not JSON (" + llvm::toString(json.takeError()) + ")";
    return false;
  }
  const llvm::json::Object *object = json->getAsObject();
  std::string why = object
                        ? readRouting(*object, info, out)
                        : "it is not a meshfold routing file (a JSON object)";
  if (!why.empty())
    error = path.str() + ": " + why;
  return why.empty();
}

std::string meshfold::readPlacementInput(ModuleOp module,
                                         const moe::ModelInfo &info, int64_t ep,
                                         int64_t redundant, StringRef path,
                                         RoutingFile &out) {
  std::string error = placementRule(info.numExperts, ep, redundant);
  if (!error.empty())
    return "plan rule 'ep-experts': " + error;
  if (!readRoutingFile(path, info, out, error))
    return error;
  std::optional<int64_t> missing;
  module.walk([&](moe::ExpertsOp op) {
    auto layer = op->getParentOfType<moe::LayerOp>();
    if (layer && !out.rows.count(layer.getIndex()) && !missing)
      missing = layer.getIndex();
  });
  if (missing)
    return path.str() + ": the routing file has no rows of layer " +
           std::to_string(*missing) +
           ", which has experts (run the model's every layer)";
  return "";
}

void meshfold::printPlacementExplanation(raw_ostream &os, ModuleOp module,
                                         const RoutingFile &routing,
                                         int64_t elementBytes) {
  auto placements = module->getAttrOfType<DictionaryAttr>(
      mf::MFDialect::getPlacementsAttrName());
  auto plan =
      module->getAttrOfType<mf::PlanAttr>(mf::MFDialect::getPlanAttrName());
  std::optional<MeshLayout> layout =
      plan ? MeshLayout::create(plan.toPlanSpec(), nullptr) : std::nullopt;
  if (!placements || !layout)
    return;
  // Weight elements of one slot (its w1, w2, w3 on one rank) per layer.
  std::map<int64_t, int64_t> slotElements;
  module.walk([&](moe::ParamOp p) {
    if (auto layer =
            p->getAttrOfType<IntegerAttr>(mf::MFDialect::getPlacedAttrName()))
      slotElements[layer.getInt()] +=
          p.getType().getNumElements() / p.getType().getDimSize(0);
  });
  const int64_t ep = layout->axisSize("ep");
  for (NamedAttribute entry : placements) {
    int64_t layer = std::stoll(entry.getName().str());
    auto it = routing.rows.find(layer);
    if (it == routing.rows.end())
      continue;
    const std::vector<double> &rows = it->second;
    ArrayRef<int64_t> table = cast<DenseI64ArrayAttr>(entry.getValue());
    ExpertPlacement placed = ExpertPlacement::fromTable(
        int64_t(rows.size()), ep, std::vector<int64_t>(table));
    ExpertPlacement before = ExpertPlacement::contiguous(placed.numExperts, ep);
    std::vector<double> was = before.rankRows(rows),
                        now = placed.rankRows(rows);
    os << llvm::formatv("layer {0}: {1} experts + {2} replicas on EP={3}, {4} "
                        "per rank\n",
                        layer, placed.numExperts, placed.redundant(), ep,
                        placed.slots);
    for (int64_t c = 0; c < ep; ++c) {
      os << "  EP rank " << c << ":";
      for (int64_t s = 0; s < placed.slots; ++s)
        os << " " << table[size_t(c * placed.slots + s)];
      os << llvm::formatv(" ({0:F1} rows)\n", now[size_t(c)]);
    }
    double wasMax = *std::max_element(was.begin(), was.end()),
           nowMax = *std::max_element(now.begin(), now.end());
    os << "  rows per EP rank, contiguous: " << rankFigures(was) << "\n";
    os << "  rows per EP rank, placed:     " << rankFigures(now) << "\n";
    os << llvm::formatv("  modeled EP time of the layer (its busiest rank's "
                        "rows): {0:F3}x the contiguous placement's\n",
                        wasMax > 0 ? nowMax / wasMax : 1.0);
    int64_t extra = placed.slots - placed.numExperts / ep;
    os << llvm::formatv("  replicas' memory: {0} more experts per EP rank, "
                        "{1} bytes of weights ({2} bytes each)\n",
                        extra, extra * slotElements[layer] * elementBytes,
                        elementBytes);
  }
}
