//===- MFDialect.cpp - mf dialect, plan attribute -------------------------===//

#include "meshfold/Dialect/MF/IR/MF.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

#include "meshfold/Dialect/MF/IR/MFOpsDialect.cpp.inc"

#include "meshfold/Dialect/MF/IR/MFEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "meshfold/Dialect/MF/IR/MFAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "meshfold/Dialect/MF/IR/MFOpsTypes.cpp.inc"

#define GET_OP_CLASSES
#include "meshfold/Dialect/MF/IR/MFOps.cpp.inc"

void MFDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "meshfold/Dialect/MF/IR/MFAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "meshfold/Dialect/MF/IR/MFOpsTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "meshfold/Dialect/MF/IR/MFOps.cpp.inc"
      >();
}

LogicalResult MFDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() == getPlanAttrName()) {
    if (!isa<ModuleOp>(op))
      return op->emitError()
             << "'" << getPlanAttrName() << "' belongs on the module, not on '"
             << op->getName() << "'";
    if (!isa<PlanAttr>(attr.getValue()))
      return op->emitError()
             << "'" << getPlanAttrName() << "' must be an #mf.plan, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == getNarrowedAttrName()) {
    if (op->getName().getStringRef() != "moe.layer" ||
        !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << getNarrowedAttrName()
                             << "' is a unit attribute of a moe.layer";
    return success();
  }
  if (attr.getName() == getPlacementAttrName()) {
    auto table = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (op->getName().getStringRef() != "moe.experts" || !table ||
        table.empty() || llvm::any_of(table.asArrayRef(),
                                      [](int64_t e) { return e < 0; }))
      return op->emitError() << "'" << getPlacementAttrName()
                             << "' is a moe.experts' array of expert ids";
    return success();
  }
  if (attr.getName() == getPlacementsAttrName()) {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !dict ||
        !llvm::all_of(dict, [](NamedAttribute a) {
          return isa<DenseI64ArrayAttr>(a.getValue());
        }))
      return op->emitError() << "'" << getPlacementsAttrName()
                             << "' is a module's dictionary of layer "
                                "placements (arrays of i64)";
    return success();
  }
  if (attr.getName() == getPlacedAttrName()) {
    auto layer = dyn_cast<IntegerAttr>(attr.getValue());
    if (op->getName().getStringRef() != "moe.param" || !layer ||
        layer.getInt() < 0)
      return op->emitError() << "'" << getPlacedAttrName()
                             << "' is a moe.param's layer index";
    return success();
  }
  if (attr.getName() == "mf.groups") {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !list ||
        !llvm::all_of(list, [](Attribute a) { return isa<StringAttr>(a); }))
      return op->emitError("'mf.groups' is a module's list of group names");
    return success();
  }
  if (attr.getName() == getShardAttrName()) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    bool wellFormed =
        isa<ShardAttr>(attr.getValue()) ||
        (list && !list.empty() &&
         llvm::all_of(list, [](Attribute a) { return isa<ShardAttr>(a); }));
    if (!wellFormed)
      return op->emitError() << "'" << getShardAttrName()
                             << "' must be an #mf.shard or an array of them";
    if (op->getNumResults() != 1 ||
        !isa<RankedTensorType>(op->getResult(0).getType()))
      return op->emitError() << "'" << getShardAttrName()
                             << "' belongs on a weight (one tensor result)";
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    llvm::SmallDenseSet<int64_t> dims;
    for (ShardAttr shard : getShards(op)) {
      if (shard.getDim() < 0 || shard.getDim() >= type.getRank() ||
          shard.getParts() < 1)
        return op->emitError()
               << "#mf.shard dim " << shard.getDim() << " / parts "
               << shard.getParts() << " do not fit " << type;
      if (!dims.insert(shard.getDim()).second)
        return op->emitError() << "'" << getShardAttrName() << "' splits dim "
                               << shard.getDim() << " twice";
    }
    return success();
  }
  // The block loop nests of mf-gpu-tile-contractions (see
  // meshfold/Dialect/GPU/Transforms/Phases.h).
  if (attr.getName() == "mf.gpu_phases") {
    auto threads = dyn_cast<IntegerAttr>(attr.getValue());
    if (op->getName().getStringRef() != "scf.parallel" || !threads ||
        threads.getInt() < 1)
      return op->emitError("'mf.gpu_phases' is a block loop's (scf.parallel) "
                           "number of threads");
    return success();
  }
  if (attr.getName() == "mf.gpu_thread_phase" ||
      attr.getName() == "mf.gpu_private") {
    StringRef owner =
        attr.getName() == "mf.gpu_private" ? "memref.alloca" : "scf.parallel";
    if (op->getName().getStringRef() != owner ||
        !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' is a unit attribute of " << owner;
    return success();
  }
  return op->emitError() << "unknown mf attribute '"
                         << attr.getName().getValue() << "'";
}

//===----------------------------------------------------------------------===//
// PlanAttr
//===----------------------------------------------------------------------===//

/// Parses `[name = size (: (part, ...))?, ...]`.
static ParseResult parseAxisList(AsmParser &parser,
                                 SmallVectorImpl<AxisAttr> &axes) {
  MLIRContext *ctx = parser.getContext();
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Square, [&]() -> ParseResult {
        std::string name;
        int64_t size;
        if (parser.parseKeywordOrString(&name) || parser.parseEqual() ||
            parser.parseInteger(size))
          return failure();
        SmallVector<StringAttr> parts;
        if (succeeded(parser.parseOptionalColon())) {
          if (parser.parseCommaSeparatedList(
                  AsmParser::Delimiter::Paren, [&]() -> ParseResult {
                    std::string part;
                    if (parser.parseKeywordOrString(&part))
                      return failure();
                    parts.push_back(StringAttr::get(ctx, part));
                    return success();
                  }))
            return failure();
          if (parts.empty())
            return parser.emitError(parser.getCurrentLocation())
                   << "expert axis '" << name
                   << "' must list the attention axes it is made of";
        }
        axes.push_back(
            AxisAttr::get(ctx, StringAttr::get(ctx, name), size, parts));
        return success();
      });
}

/// Parses a number that may be written as an integer.
static ParseResult parseNumber(AsmParser &parser, double &value) {
  int64_t i;
  OptionalParseResult asInt = parser.parseOptionalInteger(i);
  if (asInt.has_value()) {
    value = double(i);
    return *asInt;
  }
  return parser.parseFloat(value);
}

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  std::optional<int64_t> devices, gpusPerNode;
  double nvlink = 450.0, ib = 50.0;
  SmallVector<AxisAttr> attention, experts;
  llvm::StringSet<> seen;
  if (parser.parseLess())
    return {};
  auto parseField = [&]() -> ParseResult {
    StringRef key;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return parser.emitError(loc)
             << "#mf.plan field '" << key << "' given twice";
    int64_t value;
    if (key == "devices") {
      if (parser.parseInteger(value))
        return failure();
      devices = value;
      return success();
    }
    if (key == "gpus_per_node") {
      if (parser.parseInteger(value))
        return failure();
      gpusPerNode = value;
      return success();
    }
    if (key == "nvlink_gbps")
      return parseNumber(parser, nvlink);
    if (key == "ib_gbps")
      return parseNumber(parser, ib);
    if (key == "attention")
      return parseAxisList(parser, attention);
    if (key == "experts")
      return parseAxisList(parser, experts);
    return parser.emitError(loc) << "unknown #mf.plan field '" << key
                                 << "' (expected devices, gpus_per_node, "
                                    "nvlink_gbps, ib_gbps, attention, experts)";
  };
  if (parser.parseCommaSeparatedList(parseField) || parser.parseGreater())
    return {};
  for (StringRef field : {"devices", "gpus_per_node", "attention", "experts"})
    if (!seen.contains(field)) {
      parser.emitError(parser.getNameLoc())
          << "#mf.plan needs the field '" << field << "'";
      return {};
    }
  return PlanAttr::get(parser.getContext(), *devices, *gpusPerNode,
                       llvm::APFloat(nvlink), llvm::APFloat(ib), attention,
                       experts);
}

static void printAxisList(AsmPrinter &printer, ArrayRef<AxisAttr> axes) {
  printer << "[";
  llvm::interleaveComma(axes, printer, [&](AxisAttr axis) {
    printer.printKeywordOrString(axis.getName().getValue());
    printer << " = " << axis.getSize();
    if (!axis.getParts().empty()) {
      printer << " : (";
      llvm::interleaveComma(axis.getParts(), printer, [&](StringAttr part) {
        printer.printKeywordOrString(part.getValue());
      });
      printer << ")";
    }
  });
  printer << "]";
}

void PlanAttr::print(AsmPrinter &printer) const {
  printer << "<devices = " << getDevices()
          << ", gpus_per_node = " << getGpusPerNode() << ", nvlink_gbps = ";
  printer.printFloat(getNvlinkGBps());
  printer << ", ib_gbps = ";
  printer.printFloat(getIbGBps());
  printer << ", attention = ";
  printAxisList(printer, getAttention());
  printer << ", experts = ";
  printAxisList(printer, getExperts());
  printer << ">";
}

PlanSpec PlanAttr::toPlanSpec() const {
  PlanSpec spec;
  spec.devices = getDevices();
  spec.gpusPerNode = getGpusPerNode();
  spec.nvlinkGBps = getNvlinkGBps().convertToDouble();
  spec.ibGBps = getIbGBps().convertToDouble();
  for (AxisAttr axis : getAttention())
    spec.attention.push_back({axis.getName().str(), axis.getSize()});
  for (AxisAttr axis : getExperts()) {
    ExpertAxis e{axis.getName().str(), axis.getSize(), {}};
    for (StringAttr part : axis.getParts())
      e.composedOf.push_back(part.str());
    spec.experts.push_back(std::move(e));
  }
  return spec;
}

PlanAttr PlanAttr::fromPlanSpec(MLIRContext *ctx, const PlanSpec &spec) {
  SmallVector<AxisAttr> attention, experts;
  for (const MeshAxis &axis : spec.attention)
    attention.push_back(
        AxisAttr::get(ctx, StringAttr::get(ctx, axis.name), axis.size, {}));
  for (const ExpertAxis &axis : spec.experts) {
    SmallVector<StringAttr> parts;
    for (const std::string &part : axis.composedOf)
      parts.push_back(StringAttr::get(ctx, part));
    experts.push_back(
        AxisAttr::get(ctx, StringAttr::get(ctx, axis.name), axis.size, parts));
  }
  return PlanAttr::get(ctx, spec.devices, spec.gpusPerNode,
                       llvm::APFloat(spec.nvlinkGBps),
                       llvm::APFloat(spec.ibGBps), attention, experts);
}

SmallVector<ShardAttr> meshfold::mf::getShards(Operation *op) {
  Attribute attr = op->getAttr(MFDialect::getShardAttrName());
  if (auto shard = dyn_cast_or_null<ShardAttr>(attr))
    return {shard};
  SmallVector<ShardAttr> shards;
  if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
    for (Attribute a : list)
      if (auto shard = dyn_cast<ShardAttr>(a))
        shards.push_back(shard);
  return shards;
}

void meshfold::mf::addShard(Operation *op, ShardAttr shard) {
  SmallVector<ShardAttr> shards = getShards(op);
  if (shards.empty()) {
    op->setAttr(MFDialect::getShardAttrName(), shard);
    return;
  }
  SmallVector<Attribute> list(shards.begin(), shards.end());
  list.push_back(shard);
  op->setAttr(MFDialect::getShardAttrName(),
              ArrayAttr::get(op->getContext(), list));
}
