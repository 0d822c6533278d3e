//===- MFOps.cpp - mf communication ops and their verifiers ---------------===//

#include "meshfold/Dialect/MF/IR/MF.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// The layout of the plan on the enclosing module, if there is a valid one.
std::optional<MeshLayout> layoutOf(Operation *op) {
  auto module = op->getParentOfType<ModuleOp>();
  if (!module)
    return std::nullopt;
  auto plan = module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName());
  if (!plan)
    return std::nullopt;
  std::string error;
  return MeshLayout::create(plan.toPlanSpec(), &error);
}

bool meshHasAxis(const MeshLayout &layout, StringRef mesh, StringRef axis) {
  const PlanSpec &spec = layout.spec();
  if (mesh == "attention")
    return llvm::any_of(spec.attention,
                        [&](const MeshAxis &a) { return a.name == axis; });
  return llvm::any_of(spec.experts,
                      [&](const ExpertAxis &a) { return a.name == axis; });
}

/// Checks the mesh name and the axes; returns the group size when the module
/// has a plan (0 otherwise).
FailureOr<int64_t> verifyGroup(Operation *op, StringRef mesh,
                               ArrayRef<StringRef> axes) {
  if (mesh != "attention" && mesh != "experts")
    return op->emitOpError() << "mesh must be \"attention\" or \"experts\", "
                             << "got \"" << mesh << "\"";
  if (axes.empty())
    return op->emitOpError("needs at least one axis");
  llvm::StringSet<> seen;
  for (StringRef axis : axes)
    if (!seen.insert(axis).second)
      return op->emitOpError() << "axis \"" << axis << "\" named twice";
  std::optional<MeshLayout> layout = layoutOf(op);
  if (!layout)
    return int64_t(0);
  std::vector<std::string> names;
  for (StringRef axis : axes) {
    if (!meshHasAxis(*layout, mesh, axis))
      return op->emitOpError() << "the " << mesh << " mesh of the plan has no "
                               << "axis \"" << axis << "\"";
    names.push_back(axis.str());
  }
  return layout->groupSize(names);
}

SmallVector<StringRef> axesOf(ArrayAttr axes) {
  SmallVector<StringRef> out;
  for (Attribute a : axes)
    out.push_back(cast<StringAttr>(a).getValue());
  return out;
}

/// Common checks of an op that concatenates (factor = group size) or slices
/// (factor = 1 / group size) along `dim`.
LogicalResult verifyAlongDim(Operation *op, RankedTensorType in,
                             RankedTensorType out, int64_t dim, int64_t n,
                             bool grows) {
  if (in.getElementType() != out.getElementType())
    return op->emitOpError() << "element types differ: " << in << " vs " << out;
  if (in.getRank() != out.getRank())
    return op->emitOpError() << "ranks differ: " << in << " vs " << out;
  if (dim < 0 || dim >= in.getRank())
    return op->emitOpError() << "dim " << dim << " out of range for " << in;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    int64_t a = in.getDimSize(i), b = out.getDimSize(i);
    if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b))
      continue;
    if (i != dim && a != b)
      return op->emitOpError()
             << "dim " << i << " must be unchanged, got " << a << " and " << b;
    if (i == dim && n > 0 && (grows ? a * n != b : b * n != a))
      return op->emitOpError()
             << "dim " << dim << " must be "
             << (grows ? "multiplied" : "divided") << " by the group size " << n
             << ", got " << a << " -> " << b;
  }
  return success();
}
} // namespace

LogicalResult CoordOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), {getAxis()})))
    return failure();
  return success();
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> n = verifyGroup(*this, getMesh(), axesOf(getAxes()));
  if (failed(n))
    return failure();
  return verifyAlongDim(*this, getInput().getType(), getType(), getDim(), *n,
                        /*grows=*/true);
}

LogicalResult ReduceScatterOp::verify() {
  FailureOr<int64_t> n = verifyGroup(*this, getMesh(), axesOf(getAxes()));
  if (failed(n))
    return failure();
  return verifyAlongDim(*this, getInput().getType(), getType(), getDim(), *n,
                        /*grows=*/false);
}

void AllReduceOp::build(OpBuilder &b, OperationState &state, ValueRange inputs,
                        StringRef mesh, ArrayRef<StringRef> axes) {
  build(b, state, inputs.getTypes(), inputs, mesh, b.getStrArrayAttr(axes));
}

LogicalResult AllReduceOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), axesOf(getAxes()))))
    return failure();
  if (getInputs().empty())
    return emitOpError("needs at least one tensor to reduce");
  if (getInputs().getTypes() != getResults().getTypes())
    return emitOpError("results must have the types of the inputs");
  return success();
}

void RingStepOp::build(OpBuilder &b, OperationState &state, ValueRange inputs,
                       StringRef mesh, ArrayRef<StringRef> axes, bool queries) {
  build(b, state, inputs.getTypes(), inputs, mesh, b.getStrArrayAttr(axes),
        queries);
}

LogicalResult RingStepOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), axesOf(getAxes()))))
    return failure();
  if (getInputs().empty())
    return emitOpError("needs at least one tensor to send");
  if (getInputs().getTypes() != getResults().getTypes())
    return emitOpError("results must have the types of the inputs");
  return success();
}

LogicalResult DispatchOp::verify() {
  FailureOr<int64_t> n = verifyGroup(*this, getMesh(), axesOf(getAxes()));
  if (failed(n))
    return failure();
  RankedTensorType in = getInput().getType(), idx = getIndices().getType(),
                   w = getWeights().getType(), rows = getRows().getType(),
                   local = getLocalExperts().getType();
  if (in.getRank() != 2 || idx.getRank() != 2 || w.getRank() != 2 ||
      rows.getRank() != 2 || local.getRank() != 1)
    return emitOpError("expects input [T, d], indices and weights [T, k], "
                       "rows [R, d] and local experts [R]");
  if (idx.getShape() != w.getShape())
    return emitOpError() << "indices " << idx << " and weights " << w
                         << " must have one shape";
  if (in.getDimSize(1) != rows.getDimSize(1) ||
      in.getElementType() != rows.getElementType())
    return emitOpError() << "rows " << rows << " must carry the input's "
                         << "hidden size and element type (" << in << ")";
  // An expert split over etp is held by each of the group's etp ranks: the
  // experts are placed over the rest of the group.
  int64_t placed = *n;
  if (auto layout = layoutOf(*this);
      layout && *n > 0 && llvm::is_contained(axesOf(getAxes()), "etp"))
    placed /= layout->axisSize("etp");
  if (placed > 0 && getNumExperts() % placed != 0)
    return emitOpError() << "num_experts " << getNumExperts()
                         << " must be a multiple of the group size " << placed
                         << " (etp ranks hold slices of the same experts)";
  return success();
}

LogicalResult CombineOp::verify() {
  RankedTensorType out = getExpertOut().getType(), res = getType();
  if (out.getRank() != 2 || res.getRank() != 2)
    return emitOpError("expects expert outputs [R, d] and result [T, d]");
  if (out.getDimSize(1) != res.getDimSize(1) ||
      out.getElementType() != res.getElementType())
    return emitOpError() << "result " << res << " must match the expert "
                         << "outputs' hidden size and element type (" << out
                         << ")";
  // The rows go back to the tokens of the dispatch that sent them: one
  // element type from the tokens to the expert outputs and back.
  if (auto dispatch = getRouting().getDefiningOp<DispatchOp>()) {
    RankedTensorType rows = dispatch.getRows().getType();
    if (out.getElementType() != rows.getElementType())
      return emitOpError() << "expert outputs " << out << " must have the "
                           << "element type of the dispatched rows (" << rows
                           << ")";
  }
  return success();
}

LogicalResult SendOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), {getAxis()})))
    return failure();
  if (getOffset() == 0)
    return emitOpError("offset must not be 0");
  return success();
}

LogicalResult RecvOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), {getAxis()})))
    return failure();
  if (getOffset() == 0)
    return emitOpError("offset must not be 0");
  if (int64_t(getDynamicSizes().size()) !=
      int64_t(getType().getNumDynamicDims()))
    return emitOpError() << "needs one size per dynamic dimension of "
                         << getType() << ", got " << getDynamicSizes().size();
  return success();
}

LogicalResult GatherOp::verify() {
  FailureOr<int64_t> n = verifyGroup(*this, getMesh(), axesOf(getAxes()));
  if (failed(n))
    return failure();
  if (*n > 0 && int64_t(getRoot()) >= *n)
    return emitOpError() << "root " << getRoot() << " is not a group rank";
  return verifyAlongDim(*this, getInput().getType(), getType(), getDim(), *n,
                        /*grows=*/true);
}

LogicalResult SliceOp::verify() {
  FailureOr<int64_t> n = verifyGroup(*this, getMesh(), axesOf(getAxes()));
  if (failed(n))
    return failure();
  return verifyAlongDim(*this, getInput().getType(), getType(), getDim(), *n,
                        /*grows=*/false);
}

LogicalResult ZigzagPositionsOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), {getAxis()})))
    return failure();
  if (getType().getRank() != 1)
    return emitOpError("returns a 1-D tensor of positions");
  if (std::optional<MeshLayout> layout = layoutOf(*this)) {
    int64_t cp = layout->axisSize(getAxis().str());
    if (getPadTo() % (2 * cp) != 0)
      return emitOpError() << "pad_to " << getPadTo()
                           << " must be a multiple of 2*CP = " << 2 * cp;
  }
  return success();
}

LogicalResult StepRowsOp::verify() {
  if (failed(verifyGroup(*this, getMesh(), {getAxis()})))
    return failure();
  if (getPositions().getType().getRank() != 1 || getType().getRank() != 1)
    return emitOpError("maps 1-D positions to 1-D row indices");
  return success();
}

LogicalResult TakeOp::verify() {
  RankedTensorType in = getInput().getType(), res = getType();
  if (in.getRank() < 1 || in.getRank() != res.getRank() ||
      in.getElementType() != res.getElementType())
    return emitOpError() << "result " << res << " must be rows of " << in;
  if (getIndices().getType().getRank() != 1)
    return emitOpError("indices must be 1-D");
  for (int64_t i = 1; i < in.getRank(); ++i)
    if (in.getDimSize(i) != res.getDimSize(i))
      return emitOpError() << "rows must keep their shape: " << in << " vs "
                           << res;
  return success();
}
