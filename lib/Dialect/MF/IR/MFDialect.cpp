//===- MFDialect.cpp - mf dialect, plan attribute -------------------------===//

#include "meshfold/Dialect/MF/IR/MF.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

#include "meshfold/Dialect/MF/IR/MFOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "meshfold/Dialect/MF/IR/MFAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "meshfold/Dialect/MF/IR/MFOps.cpp.inc"

void MFDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "meshfold/Dialect/MF/IR/MFAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "meshfold/Dialect/MF/IR/MFOps.cpp.inc"
      >();
}

LogicalResult MFDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() == getPlanAttrName()) {
    if (!isa<PlanAttr>(attr.getValue()))
      return op->emitError() << "'" << getPlanAttrName()
                             << "' must be an #mf.plan, got "
                             << attr.getValue();
    return success();
  }
  return op->emitError() << "unknown mf attribute '" << attr.getName() << "'";
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
        }
        axes.push_back(AxisAttr::get(ctx, StringAttr::get(ctx, name), size,
                                     parts));
        return success();
      });
}

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  int64_t devices = -1, gpusPerNode = -1;
  double nvlink = 450.0, ib = 50.0;
  SmallVector<AxisAttr> attention, experts;
  bool seenAttention = false, seenExperts = false;
  if (parser.parseLess())
    return {};
  auto parseField = [&]() -> ParseResult {
    StringRef key;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (key == "devices")
      return parser.parseInteger(devices);
    if (key == "gpus_per_node")
      return parser.parseInteger(gpusPerNode);
    if (key == "nvlink_gbps")
      return parser.parseFloat(nvlink);
    if (key == "ib_gbps")
      return parser.parseFloat(ib);
    if (key == "attention") {
      seenAttention = true;
      return parseAxisList(parser, attention);
    }
    if (key == "experts") {
      seenExperts = true;
      return parseAxisList(parser, experts);
    }
    return parser.emitError(loc) << "unknown #mf.plan field '" << key
                                 << "' (expected devices, gpus_per_node, "
                                    "nvlink_gbps, ib_gbps, attention, experts)";
  };
  if (parser.parseCommaSeparatedList(parseField) || parser.parseGreater())
    return {};
  if (devices < 0 || gpusPerNode < 0 || !seenAttention || !seenExperts) {
    parser.emitError(parser.getNameLoc())
        << "#mf.plan needs devices, gpus_per_node, attention and experts";
    return {};
  }
  return PlanAttr::get(parser.getContext(), devices, gpusPerNode,
                       llvm::APFloat(nvlink), llvm::APFloat(ib),
                       attention, experts);
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
