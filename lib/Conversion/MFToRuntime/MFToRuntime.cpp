//===- MFToRuntime.cpp - mf queries and collectives to mfrt calls ---------===//
//
// Runs before bufferization: tensors are handed to the runtime as buffers
// (bufferization.to_buffer, read-only) and results come back in fresh
// buffers (memref.alloc) that the program owns, so buffer deallocation
// frees them like any other.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Conversion/MFToRuntime/MFToRuntime.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Conversion/RuntimeCalls.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#define DEBUG_TYPE "convert-mf-to-runtime"

namespace meshfold {
#define GEN_PASS_DEF_CONVERTMFTORUNTIMEPASS
#include "meshfold/Conversion/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
class Lowering {
public:
  Lowering(ModuleOp module, const MeshLayout &layout)
      : module(module), layout(layout), ctx(module.getContext()) {}

  LogicalResult run();

private:
  /// The id of the group (mesh, axes), registering it on first use.
  int64_t groupId(StringRef mesh, ArrayAttr axes);
  int64_t groupId(StringRef mesh, ArrayRef<StringRef> axes);
  int64_t groupSize(ArrayAttr axes);
  Value i64(OpBuilder &b, Location loc, int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  }
  /// This rank's index in group `id`, as an index value.
  Value groupRank(OpBuilder &b, Location loc, int64_t id);
  /// A read-only buffer of `t`, erased to an unranked memref.
  Value inBuffer(OpBuilder &b, Location loc, Value t);
  /// A new buffer of `type` (dynamic sizes given) and its unranked view.
  std::pair<Value, Value> outBuffer(OpBuilder &b, Location loc,
                                    RankedTensorType type, ValueRange dynSizes);
  Value asTensor(OpBuilder &b, Location loc, Value buffer,
                 RankedTensorType type);
  func::FuncOp fn(RuntimeFn entry) {
    return declareRuntimeFunction(module, entry);
  }
  Type unranked(Type elt) { return UnrankedMemRefType::get(elt, 0); }
  /// The row count of `t` times `num` / `den`, as an index.
  Value scaledRows(OpBuilder &b, Location loc, Value t, int64_t num,
                   int64_t den);
  LogicalResult checkF32Rows(Operation *op, RankedTensorType type, int64_t dim);
  LogicalResult rowCollective(Operation *op, RuntimeFn entry, StringRef mesh,
                              ArrayAttr axes, Value input,
                              RankedTensorType type, int64_t dim, int64_t num,
                              int64_t den, ArrayRef<int64_t> extra = {});

  LogicalResult lower(CoordOp op);
  LogicalResult lower(SliceOp op);
  LogicalResult lower(TakeOp op);
  LogicalResult lower(ZigzagPositionsOp op);
  LogicalResult lower(StepRowsOp op);
  LogicalResult lowerByPlace(StepRowsOp op);
  /// `list` [count] rotated left by `(positions[0] / CP mod pad_to)` blocks
  /// of count / pad_to (sequence parallelism takes turns).
  Value rotateSteps(OpBuilder &b, Location loc, RankedTensorType type,
                    Value list, Value positions, Value count, Value cpV,
                    Value padV);
  LogicalResult lower(LayerRowsOp op);
  /// A 1-D tensor of `type` with `n` elements, element i = `at(i)`.
  Value generate1D(OpBuilder &b, Location loc, RankedTensorType type, Value n,
                   function_ref<Value(OpBuilder &, Location, Value)> at);
  LogicalResult lower(AllGatherOp op);
  LogicalResult lower(ReduceScatterOp op);
  LogicalResult lower(AllReduceOp op);
  LogicalResult lower(RingStepOp op);
  LogicalResult lower(SendOp op);
  LogicalResult lower(RecvOp op);
  LogicalResult lower(GatherOp op);
  LogicalResult lower(DispatchOp op);
  LogicalResult lower(CombineOp op);

  ModuleOp module;
  const MeshLayout &layout;
  MLIRContext *ctx;
  SmallVector<std::string> groups;
  /// The runtime handle of each dispatch's routing (an i64).
  DenseMap<Value, Value> routing;
};

int64_t Lowering::groupId(StringRef mesh, ArrayRef<StringRef> axes) {
  std::string key = (mesh + ":" + llvm::join(axes, ",")).str();
  for (auto [i, g] : llvm::enumerate(groups))
    if (g == key)
      return i;
  groups.push_back(key);
  return groups.size() - 1;
}

int64_t Lowering::groupId(StringRef mesh, ArrayAttr axes) {
  SmallVector<StringRef> names;
  for (Attribute a : axes)
    names.push_back(cast<StringAttr>(a).getValue());
  return groupId(mesh, names);
}

int64_t Lowering::groupSize(ArrayAttr axes) {
  std::vector<std::string> names;
  for (Attribute a : axes)
    names.push_back(cast<StringAttr>(a).str());
  return layout.groupSize(names);
}

Value Lowering::groupRank(OpBuilder &b, Location loc, int64_t id) {
  Value r = func::CallOp::create(b, loc, fn(RuntimeFn::mfrt_cg_group_rank),
                                 ValueRange{i64(b, loc, id)})
                .getResult(0);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), r);
}

Value Lowering::inBuffer(OpBuilder &b, Location loc, Value t) {
  auto type = cast<RankedTensorType>(t.getType());
  Value m = bufferization::ToBufferOp::create(
      b, loc, dynamicStrided(type.getShape(), type.getElementType()), t,
      /*read_only=*/true);
  return memref::CastOp::create(b, loc, unranked(type.getElementType()), m);
}

std::pair<Value, Value> Lowering::outBuffer(OpBuilder &b, Location loc,
                                            RankedTensorType type,
                                            ValueRange dynSizes) {
  auto mType = MemRefType::get(type.getShape(), type.getElementType());
  Value m = memref::AllocOp::create(b, loc, mType, dynSizes);
  Value u = memref::CastOp::create(b, loc, unranked(type.getElementType()), m);
  return {m, u};
}

Value Lowering::asTensor(OpBuilder &b, Location loc, Value buffer,
                         RankedTensorType type) {
  return bufferization::ToTensorOp::create(b, loc, type, buffer,
                                           b.getUnitAttr(), b.getUnitAttr());
}

Value Lowering::scaledRows(OpBuilder &b, Location loc, Value t, int64_t num,
                           int64_t den) {
  Value rows = tensor::DimOp::create(b, loc, t, 0);
  if (num != 1)
    rows = arith::MulIOp::create(b, loc, rows,
                                 arith::ConstantIndexOp::create(b, loc, num));
  if (den != 1)
    rows = arith::DivUIOp::create(b, loc, rows,
                                  arith::ConstantIndexOp::create(b, loc, den));
  return rows;
}

LogicalResult Lowering::checkF32Rows(Operation *op, RankedTensorType type,
                                     int64_t dim) {
  if (!type.getElementType().isF32())
    return op->emitError() << "the CPU runtime moves f32 tensors here, got "
                           << type;
  if (dim != 0)
    return op->emitError() << "the runtime splits and joins along dim 0 only, "
                              "got dim "
                           << dim;
  for (int64_t i = 1; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      return op->emitError() << "only the leading dim may be dynamic: " << type;
  return success();
}

LogicalResult Lowering::lower(CoordOp op) {
  OpBuilder b(op);
  int64_t id = groupId(op.getMesh(), {op.getAxis()});
  op.replaceAllUsesWith(groupRank(b, op.getLoc(), id));
  op.erase();
  return success();
}

LogicalResult Lowering::lower(SliceOp op) {
  if (op.getDim() != 0)
    return op.emitError("convert-mf-to-runtime: slices along dim 0 only");
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t n = groupSize(op.getAxes());
  Value rank = groupRank(b, loc, groupId(op.getMesh(), op.getAxes()));
  Value rows = scaledRows(b, loc, op.getInput(), 1, n);
  Value offset = arith::MulIOp::create(b, loc, rank, rows);
  auto type = op.getType();
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes, strides(type.getRank(), b.getIndexAttr(1));
  offsets[0] = offset;
  // Each size is static where the result's dim is: extract_slice infers its
  // result type from the sizes.
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (!type.isDynamicDim(i))
      sizes.push_back(b.getIndexAttr(type.getDimSize(i)));
    else if (i == 0)
      sizes.push_back(rows);
    else
      sizes.push_back(
          tensor::DimOp::create(b, loc, op.getInput(), i).getResult());
  }
  Value s = tensor::ExtractSliceOp::create(b, loc, type, op.getInput(), offsets,
                                           sizes, strides);
  op.replaceAllUsesWith(s);
  op.erase();
  return success();
}

LogicalResult Lowering::lower(TakeOp op) {
  auto type = op.getType();
  if (type.getRank() != 1)
    return op.emitError("convert-mf-to-runtime: mf.take of 1-D tensors only");
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value src = op.getInput(), idx = op.getIndices();
  Value n = tensor::DimOp::create(b, loc, idx, 0);
  Value srcLen = arith::IndexCastOp::create(
      b, loc, b.getI64Type(), tensor::DimOp::create(b, loc, src, 0));
  Value init = tensor::EmptyOp::create(b, loc, type.getShape(),
                                       type.getElementType(), ValueRange{n});
  Type elt = type.getElementType();
  AffineMap id1 = AffineMap::getMultiDimIdentityMap(1, ctx);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{type}, ValueRange{idx}, ValueRange{init},
      ArrayRef<AffineMap>{id1, id1},
      ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value zero = arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0));
        Value below = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                            a[0], srcLen);
        Value nonNegative =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, a[0], zero);
        Value inRange = arith::AndIOp::create(nb, l, below, nonNegative);
        Value safe = arith::SelectOp::create(nb, l, inRange, a[0], zero);
        Value at = arith::IndexCastOp::create(nb, l, nb.getIndexType(), safe);
        Value v = tensor::ExtractOp::create(nb, l, src, ValueRange{at});
        Value fill = arith::ConstantOp::create(
            nb, l, nb.getIntegerAttr(elt, op.getFill()));
        linalg::YieldOp::create(
            nb, l, Value(arith::SelectOp::create(nb, l, inRange, v, fill)));
      });
  op.replaceAllUsesWith(generic.getResult(0));
  op.erase();
  return success();
}

Value Lowering::generate1D(
    OpBuilder &b, Location loc, RankedTensorType type, Value n,
    function_ref<Value(OpBuilder &, Location, Value)> at) {
  Value init = tensor::EmptyOp::create(b, loc, type.getShape(),
                                       type.getElementType(), ValueRange{n});
  AffineMap id1 = AffineMap::getMultiDimIdentityMap(1, ctx);
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, ValueRange{}, ValueRange{init},
             ArrayRef<AffineMap>{id1},
             ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
             [&](OpBuilder &nb, Location l, ValueRange) {
               Value i = linalg::IndexOp::create(nb, l, 0);
               linalg::YieldOp::create(nb, l, at(nb, l, i));
             })
      .getResult(0);
}

LogicalResult Lowering::lower(ZigzagPositionsOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t cp = layout.axisSize(op.getAxis().str());
  int64_t pad = op.getPadTo();
  // Tp = ceil(T / pad) * pad; chunk = Tp / (2 CP); rank r owns chunks r and
  // 2 CP - 1 - r.
  Value t = op.getLength();
  Value padV = arith::ConstantIndexOp::create(b, loc, pad);
  Value tp = arith::MulIOp::create(
      b, loc, arith::CeilDivUIOp::create(b, loc, t, padV), padV);
  Value chunk = arith::DivUIOp::create(
      b, loc, tp, arith::ConstantIndexOp::create(b, loc, 2 * cp));
  Value r = groupRank(b, loc, groupId(op.getMesh(), {op.getAxis()}));
  Value mirror = arith::SubIOp::create(
      b, loc, arith::ConstantIndexOp::create(b, loc, 2 * cp - 1), r);
  Value firstStart = arith::MulIOp::create(b, loc, r, chunk);
  Value secondStart = arith::MulIOp::create(b, loc, mirror, chunk);
  Value n = arith::MulIOp::create(b, loc, chunk,
                                  arith::ConstantIndexOp::create(b, loc, 2));
  auto type = op.getType();
  Value generated = generate1D(
      b, loc, type, n, [&](OpBuilder &nb, Location l, Value i) -> Value {
        Value inFirst =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, i, chunk);
        Value a = arith::AddIOp::create(nb, l, firstStart, i);
        Value c = arith::AddIOp::create(nb, l, secondStart,
                                        arith::SubIOp::create(nb, l, i, chunk));
        Value p = arith::SelectOp::create(nb, l, inFirst, a, c);
        return arith::IndexCastOp::create(nb, l, type.getElementType(), p);
      });
  op.replaceAllUsesWith(generated);
  op.erase();
  return success();
}

LogicalResult Lowering::lower(LayerRowsOp op) {
  auto layer = op->getParentOfType<moe::LayerOp>();
  if (!layer)
    return op.emitError("mf.layer_rows must be inside a moe.layer");
  OpBuilder b(op);
  Location loc = op.getLoc();
  func::CallOp::create(b, loc, fn(RuntimeFn::mfrt_cg_layer_rows),
                       ValueRange{i64(b, loc, layer.getIndex()),
                                  inBuffer(b, loc, op.getSp()),
                                  inBuffer(b, loc, op.getCp())});
  op.erase();
  return success();
}

/// A step's rows per rank are rotated by (p0 / CP mod pad_to) blocks of
/// count / pad_to, p0 its first row's position: entry i of the rotated
/// list is entry (i + the returned value) mod count of the unrotated one.
static Value rotation(OpBuilder &b, Location loc, Value p0, Value count,
                      Value cpV, Value padV) {
  Value block = arith::DivUIOp::create(b, loc, count, padV);
  Value turn = arith::RemUIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, p0, cpV), padV);
  Value shift = arith::MulIOp::create(b, loc, turn, block);
  return arith::SubIOp::create(b, loc, count, shift);
}

LogicalResult Lowering::lower(StepRowsOp op) {
  if (op.getByPlace())
    return lowerByPlace(op);
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t cp = layout.axisSize(op.getAxis().str());
  Value positions = op.getPositions();
  Value n = tensor::DimOp::create(b, loc, positions, 0);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value cpV = arith::ConstantIndexOp::create(b, loc, cp);
  Value padV = arith::ConstantIndexOp::create(b, loc, op.getPadTo());
  // Rows per rank: ceil(n / CP), rounded up to a multiple of pad_to (at
  // least one multiple: an empty step still runs).
  Value perRank = arith::CeilDivUIOp::create(b, loc, n, cpV);
  Value count = arith::MulIOp::create(
      b, loc,
      arith::MaxUIOp::create(
          b, loc, arith::CeilDivUIOp::create(b, loc, perRank, padV), one),
      padV);
  // This rank's first row: (r - positions[0]) mod CP (a step has a row).
  Value p0 = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      tensor::ExtractOp::create(b, loc, positions, ValueRange{zero}));
  Value r = groupRank(b, loc, groupId(op.getMesh(), {op.getAxis()}));
  Value rPlusCP = arith::AddIOp::create(b, loc, r, cpV);
  Value p0Mod = arith::RemUIOp::create(b, loc, p0, cpV);
  Value first = arith::RemUIOp::create(
      b, loc, arith::SubIOp::create(b, loc, rPlusCP, p0Mod), cpV);
  Value unshift = rotation(b, loc, p0, count, cpV, padV);
  auto type = op.getType();
  Value generated = generate1D(
      b, loc, type, count, [&](OpBuilder &nb, Location l, Value i) -> Value {
        Value j = arith::RemUIOp::create(
            nb, l, arith::AddIOp::create(nb, l, i, unshift), count);
        Value row = arith::AddIOp::create(nb, l, first,
                                          arith::MulIOp::create(nb, l, j, cpV));
        Value inStep =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, row, n);
        Value id =
            arith::IndexCastOp::create(nb, l, type.getElementType(), row);
        Value pad = arith::ConstantOp::create(
            nb, l, nb.getIntegerAttr(type.getElementType(), -1));
        return arith::SelectOp::create(nb, l, inStep, id, pad);
      });
  op.replaceAllUsesWith(generated);
  op.erase();
  return success();
}

/// mf.step_rows by_place: the rows whose place is this rank's mod CP, in
/// step order, padded with -1 to the most rows a rank gets (rounded up to
/// a multiple of pad_to, at least one multiple), rotated as round-robin's.
LogicalResult Lowering::lowerByPlace(StepRowsOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t cp = layout.axisSize(op.getAxis().str());
  Value positions = op.getPositions();
  auto type = op.getType();
  Type elt = type.getElementType();
  Value n = tensor::DimOp::create(b, loc, positions, 0);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value cpV = arith::ConstantIndexOp::create(b, loc, cp);
  Value padV = arith::ConstantIndexOp::create(b, loc, op.getPadTo());
  // Row i's CP rank: its place (the low 32 bits) mod CP.
  auto rankOf = [&](OpBuilder &nb, Location l, Value i) -> Value {
    Value p = tensor::ExtractOp::create(nb, l, positions, ValueRange{i});
    Value place = arith::AndIOp::create(
        nb, l, p,
        arith::ConstantOp::create(nb, l, IntegerAttr::get(elt, 0xFFFFFFFF)));
    return arith::IndexCastOp::create(
        nb, l, nb.getIndexType(),
        arith::RemUIOp::create(
            nb, l, place,
            arith::ConstantOp::create(nb, l, IntegerAttr::get(elt, cp))));
  };
  // Each rank's rows, and the most of them.
  auto counting = scf::ForOp::create(
      b, loc, zero, n, one, SmallVector<Value>(size_t(cp), zero),
      [&](OpBuilder &nb, Location l, Value i, ValueRange counts) {
        Value k = rankOf(nb, l, i);
        SmallVector<Value> next;
        for (int64_t c = 0; c < cp; ++c) {
          Value is =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, k,
                                    arith::ConstantIndexOp::create(nb, l, c));
          next.push_back(arith::SelectOp::create(
              nb, l, is, arith::AddIOp::create(nb, l, counts[c], one),
              counts[c]));
        }
        scf::YieldOp::create(nb, l, next);
      });
  Value most = zero;
  for (Value c : counting.getResults())
    most = arith::MaxUIOp::create(b, loc, most, c);
  Value count = arith::MulIOp::create(
      b, loc,
      arith::MaxUIOp::create(
          b, loc, arith::CeilDivUIOp::create(b, loc, most, padV), one),
      padV);
  // This rank's rows in step order, then -1.
  Value r = groupRank(b, loc, groupId(op.getMesh(), {op.getAxis()}));
  Value padded = generate1D(
      b, loc, type, count, [&](OpBuilder &nb, Location l, Value) -> Value {
        return arith::ConstantOp::create(nb, l, IntegerAttr::get(elt, -1));
      });
  auto listing = scf::ForOp::create(
      b, loc, zero, n, one, ValueRange{padded, zero},
      [&](OpBuilder &nb, Location l, Value i, ValueRange it) {
        Value mine = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                           rankOf(nb, l, i), r);
        auto ifOp = scf::IfOp::create(
            nb, l, mine,
            [&](OpBuilder &tb, Location tl) {
              Value id = arith::IndexCastOp::create(tb, tl, elt, i);
              Value added = tensor::InsertOp::create(tb, tl, id, it[0], it[1]);
              scf::YieldOp::create(
                  tb, tl,
                  ValueRange{added, arith::AddIOp::create(tb, tl, it[1], one)});
            },
            [&](OpBuilder &eb, Location el) {
              scf::YieldOp::create(eb, el, it);
            });
        scf::YieldOp::create(nb, l, ifOp.getResults());
      });
  op.replaceAllUsesWith(rotateSteps(b, loc, type, listing.getResult(0),
                                    positions, count, cpV, padV));
  op.erase();
  return success();
}

Value Lowering::rotateSteps(OpBuilder &b, Location loc, RankedTensorType type,
                            Value list, Value positions, Value count, Value cpV,
                            Value padV) {
  Value p0 = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      tensor::ExtractOp::create(
          b, loc, positions,
          ValueRange{arith::ConstantIndexOp::create(b, loc, 0)}));
  Value unshift = rotation(b, loc, p0, count, cpV, padV);
  return generate1D(
      b, loc, type, count, [&](OpBuilder &nb, Location l, Value i) -> Value {
        Value j = arith::RemUIOp::create(
            nb, l, arith::AddIOp::create(nb, l, i, unshift), count);
        return tensor::ExtractOp::create(nb, l, list, ValueRange{j});
      });
}

/// A collective whose result has `num`/`den` times the rows of its input:
/// one call `name(group id, [extra...], input, result)`.
LogicalResult Lowering::rowCollective(Operation *op, RuntimeFn entry,
                                      StringRef mesh, ArrayAttr axes,
                                      Value input, RankedTensorType type,
                                      int64_t dim, int64_t num, int64_t den,
                                      ArrayRef<int64_t> extra) {
  if (failed(checkF32Rows(op, type, dim)))
    return failure();
  OpBuilder b(op);
  Location loc = op->getLoc();
  SmallVector<Value> dyn;
  if (type.isDynamicDim(0))
    dyn.push_back(scaledRows(b, loc, input, num, den));
  auto [buf, view] = outBuffer(b, loc, type, dyn);
  SmallVector<Value> operands = {i64(b, loc, groupId(mesh, axes))};
  for (int64_t e : extra)
    operands.push_back(i64(b, loc, e));
  operands.append({inBuffer(b, loc, input), view});
  func::CallOp::create(b, loc, fn(entry), operands);
  op->getResult(0).replaceAllUsesWith(asTensor(b, loc, buf, type));
  op->erase();
  return success();
}

LogicalResult Lowering::lower(AllGatherOp op) {
  return rowCollective(op, RuntimeFn::mfrt_cg_all_gather_f32, op.getMesh(),
                       op.getAxes(), op.getInput(), op.getType(), op.getDim(),
                       groupSize(op.getAxes()), 1);
}

LogicalResult Lowering::lower(ReduceScatterOp op) {
  return rowCollective(op, RuntimeFn::mfrt_cg_reduce_scatter_f32, op.getMesh(),
                       op.getAxes(), op.getInput(), op.getType(), op.getDim(),
                       1, groupSize(op.getAxes()));
}

LogicalResult Lowering::lower(AllReduceOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  // One call: a grouped all-reduce packs its tensors into one flat buffer.
  SmallVector<Value> flats, sizes;
  for (Value in : op.getInputs()) {
    auto type = cast<RankedTensorType>(in.getType());
    if (failed(checkF32Rows(op, type, 0)))
      return failure();
    SmallVector<ReassociationIndices> all(1);
    for (int64_t i = 0; i < type.getRank(); ++i)
      all[0].push_back(i);
    auto flatType = RankedTensorType::get(
        {type.hasStaticShape() ? type.getNumElements() : ShapedType::kDynamic},
        type.getElementType());
    Value flat =
        type.getRank() == 1
            ? in
            : Value(tensor::CollapseShapeOp::create(b, loc, flatType, in, all));
    flats.push_back(flat);
    sizes.push_back(tensor::DimOp::create(b, loc, flat, 0));
  }
  Value packed = flats.front();
  if (flats.size() > 1)
    packed = tensor::ConcatOp::create(b, loc, 0, flats);
  auto packedType = cast<RankedTensorType>(packed.getType());
  SmallVector<Value> dyn;
  if (packedType.isDynamicDim(0))
    dyn.push_back(tensor::DimOp::create(b, loc, packed, 0));
  auto [buf, view] = outBuffer(b, loc, packedType, dyn);
  func::CallOp::create(
      b, loc, fn(RuntimeFn::mfrt_cg_all_reduce_f32),
      ValueRange{i64(b, loc, groupId(op.getMesh(), op.getAxes())),
                 inBuffer(b, loc, packed), view});
  Value sum = asTensor(b, loc, buf, packedType);
  Value offset = arith::ConstantIndexOp::create(b, loc, 0);
  for (auto [i, in] : llvm::enumerate(op.getInputs())) {
    auto type = cast<RankedTensorType>(in.getType());
    Value part = sum;
    if (flats.size() > 1) {
      auto flatType = cast<RankedTensorType>(flats[i].getType());
      OpFoldResult size =
          flatType.isDynamicDim(0)
              ? OpFoldResult(sizes[i])
              : OpFoldResult(b.getIndexAttr(flatType.getDimSize(0)));
      part = tensor::ExtractSliceOp::create(
          b, loc, flatType, sum, ArrayRef<OpFoldResult>{offset},
          ArrayRef<OpFoldResult>{size},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    }
    offset = arith::AddIOp::create(b, loc, offset, sizes[i]);
    if (type.getRank() != 1) {
      SmallVector<ReassociationIndices> all(1);
      for (int64_t d = 0; d < type.getRank(); ++d)
        all[0].push_back(d);
      SmallVector<OpFoldResult> shape;
      for (int64_t d = 0; d < type.getRank(); ++d)
        shape.push_back(
            type.isDynamicDim(d)
                ? OpFoldResult(tensor::DimOp::create(b, loc, in, d).getResult())
                : OpFoldResult(b.getIndexAttr(type.getDimSize(d))));
      part = tensor::ExpandShapeOp::create(b, loc, type, part, all, shape);
    }
    op.getResult(i).replaceAllUsesWith(part);
  }
  op.erase();
  return success();
}

LogicalResult Lowering::lower(RingStepOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t id = groupId(op.getMesh(), op.getAxes());
  // Up to four tensors (K, V and their positions; a decode step's queries,
  // partial output, log-sum-exp and positions) travel as one message. The
  // runtime counts pass-Q's steps apart.
  SmallVector<Value> ins, outs, bufs;
  std::string name =
      op.getQueries() ? "mfrt_cg_q_ring_step" : "mfrt_cg_ring_step";
  for (Value in : op.getInputs()) {
    auto type = cast<RankedTensorType>(in.getType());
    Type elt = type.getElementType();
    if (!elt.isF32() && !elt.isInteger(64))
      return op.emitError() << "convert-mf-to-runtime: ring steps carry f32 "
                               "and i64 tensors, got "
                            << type;
    name += elt.isF32() ? "_f32" : "_i64";
    ins.push_back(inBuffer(b, loc, in));
  }
  if (op.getInputs().size() > 4)
    return op.emitError("convert-mf-to-runtime: at most 4 tensors per ring "
                        "step");
  std::optional<RuntimeFn> entry = lookupRuntimeFn(name);
  if (!entry)
    return op.emitError() << "convert-mf-to-runtime: the runtime has no ring "
                             "step for these tensors ("
                          << name << ")";
  for (Value in : op.getInputs()) {
    auto type = cast<RankedTensorType>(in.getType());
    SmallVector<Value> dyn;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        dyn.push_back(tensor::DimOp::create(b, loc, in, d));
    auto [buf, view] = outBuffer(b, loc, type, dyn);
    bufs.push_back(buf);
    outs.push_back(view);
  }
  SmallVector<Value> operands = {i64(b, loc, id)};
  llvm::append_range(operands, ins);
  llvm::append_range(operands, outs);
  func::CallOp::create(b, loc, fn(*entry), operands);
  for (auto [i, res] : llvm::enumerate(op.getResults()))
    res.replaceAllUsesWith(
        asTensor(b, loc, bufs[i], cast<RankedTensorType>(res.getType())));
  op.erase();
  return success();
}

LogicalResult Lowering::lower(SendOp op) {
  auto type = op.getInput().getType();
  if (failed(checkF32Rows(op, type, 0)))
    return failure();
  OpBuilder b(op);
  Location loc = op.getLoc();
  func::CallOp::create(
      b, loc, fn(RuntimeFn::mfrt_cg_send_f32),
      ValueRange{i64(b, loc, groupId(op.getMesh(), {op.getAxis()})),
                 i64(b, loc, op.getOffset()), inBuffer(b, loc, op.getInput())});
  op.erase();
  return success();
}

LogicalResult Lowering::lower(RecvOp op) {
  if (failed(checkF32Rows(op, op.getType(), 0)))
    return failure();
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto [buf, view] = outBuffer(b, loc, op.getType(), op.getDynamicSizes());
  func::CallOp::create(
      b, loc, fn(RuntimeFn::mfrt_cg_recv_f32),
      ValueRange{i64(b, loc, groupId(op.getMesh(), {op.getAxis()})),
                 i64(b, loc, op.getOffset()), view});
  op.replaceAllUsesWith(asTensor(b, loc, buf, op.getType()));
  op.erase();
  return success();
}

LogicalResult Lowering::lower(GatherOp op) {
  return rowCollective(op, RuntimeFn::mfrt_cg_gather_f32, op.getMesh(),
                       op.getAxes(), op.getInput(), op.getType(), op.getDim(),
                       groupSize(op.getAxes()), 1, {int64_t(op.getRoot())});
}

LogicalResult Lowering::lower(DispatchOp op) {
  auto xType = op.getInput().getType();
  if (failed(checkF32Rows(op, xType, 0)) ||
      !op.getWeights().getType().getElementType().isF32())
    return op.emitError("convert-mf-to-runtime: dispatch moves f32 rows");
  OpBuilder b(op);
  Location loc = op.getLoc();
  // The call routes and exchanges counts and rows; the rows wait in the
  // runtime until fetched into buffers of the count it returns.
  Value handle =
      func::CallOp::create(
          b, loc, fn(RuntimeFn::mfrt_cg_dispatch_f32),
          ValueRange{i64(b, loc, groupId(op.getMesh(), op.getAxes())),
                     i64(b, loc, op.getMode() == DispatchMode::hierarchical),
                     i64(b, loc, op.getNumExperts()),
                     inBuffer(b, loc, op.getInput()),
                     inBuffer(b, loc, op.getIndices()),
                     inBuffer(b, loc, op.getWeights())})
          .getResult(0);
  Value count = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      func::CallOp::create(b, loc, fn(RuntimeFn::mfrt_cg_dispatch_count),
                           ValueRange{handle})
          .getResult(0));
  auto [rows, rowsView] = outBuffer(b, loc, op.getRows().getType(), {count});
  auto [local, localView] =
      outBuffer(b, loc, op.getLocalExperts().getType(), {count});
  func::CallOp::create(b, loc, fn(RuntimeFn::mfrt_cg_dispatch_fetch),
                       ValueRange{handle, rowsView, localView});
  op.getRows().replaceAllUsesWith(
      asTensor(b, loc, rows, op.getRows().getType()));
  op.getLocalExperts().replaceAllUsesWith(
      asTensor(b, loc, local, op.getLocalExperts().getType()));
  routing[op.getRouting()] = handle;
  for (OpOperand &use : llvm::make_early_inc_range(op.getRouting().getUses()))
    if (!isa<CombineOp>(use.getOwner()))
      return use.getOwner()->emitError("a dispatch's routing may only feed "
                                       "mf.combine");
  return success();
}

LogicalResult Lowering::lower(CombineOp op) {
  Value handle = routing.lookup(op.getRouting());
  if (!handle)
    return op.emitError("mf.combine needs the mf.dispatch it answers");
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto [y, yView] = outBuffer(b, loc, op.getType(), {op.getNumTokens()});
  func::CallOp::create(
      b, loc, fn(RuntimeFn::mfrt_cg_combine_f32),
      ValueRange{handle, inBuffer(b, loc, op.getExpertOut()), yView});
  op.replaceAllUsesWith(asTensor(b, loc, y, op.getType()));
  op.erase();
  return success();
}

LogicalResult Lowering::run() {
  // Tag each layer's traffic with its index (the runtime's byte counters
  // are per layer); traffic between layers is untagged (-1).
  SmallVector<moe::LayerOp> layers;
  module.walk([&](moe::LayerOp layer) { layers.push_back(layer); });
  for (moe::LayerOp layer : layers) {
    OpBuilder b = OpBuilder::atBlockBegin(&layer.getBody().front());
    Location loc = layer.getLoc();
    func::FuncOp setLayer = fn(RuntimeFn::mfrt_cg_set_layer);
    func::CallOp::create(b, loc, setLayer,
                         ValueRange{i64(b, loc, layer.getIndex())});
    // The positions of the layer's rows (SP layout; CP layout after the TP
    // all-gather, the same when the layer has no second positions operand),
    // for the runtime's token tracing and routing hooks.
    Block &body = layer.getBody().front();
    auto isPositions = [](Value v) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      return t && t.getRank() == 1 && t.getElementType().isInteger(64);
    };
    if (body.getNumArguments() >= 2 && isPositions(body.getArgument(1)) &&
        (body.getNumArguments() < 3 || isPositions(body.getArgument(2)))) {
      Value sp = body.getArgument(1);
      Value cp = body.getNumArguments() >= 3 ? body.getArgument(2) : sp;
      func::CallOp::create(b, loc, fn(RuntimeFn::mfrt_cg_layer_rows),
                           ValueRange{i64(b, loc, layer.getIndex()),
                                      inBuffer(b, loc, sp),
                                      inBuffer(b, loc, cp)});
    }
    b.setInsertionPointAfter(layer);
    func::CallOp::create(b, loc, setLayer, ValueRange{i64(b, loc, -1)});
  }
  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (isa<MFDialect>(op->getDialect()) && !isa<WeightOp>(op))
      ops.push_back(op);
  });
  SmallVector<DispatchOp> dispatches;
  for (Operation *op : ops) {
    LogicalResult ok =
        llvm::TypeSwitch<Operation *, LogicalResult>(op)
            .Case<CoordOp, SliceOp, TakeOp, ZigzagPositionsOp, StepRowsOp,
                  LayerRowsOp, AllGatherOp, ReduceScatterOp, AllReduceOp,
                  RingStepOp, SendOp, RecvOp, GatherOp, CombineOp>(
                [&](auto o) { return lower(o); })
            .Case<DispatchOp>([&](DispatchOp o) {
              dispatches.push_back(o);
              return lower(o);
            })
            .Default([](Operation *o) {
              return o->emitError("convert-mf-to-runtime: no lowering");
            });
    if (failed(ok))
      return failure();
  }
  for (DispatchOp op : dispatches)
    op.erase();
  SmallVector<Attribute> names;
  for (const std::string &g : groups)
    names.push_back(StringAttr::get(ctx, g));
  if (!names.empty())
    module->setAttr(getRuntimeGroupsAttrName(), ArrayAttr::get(ctx, names));
  return success();
}

struct ConvertMFToRuntimePass
    : public meshfold::impl::ConvertMFToRuntimePassBase<
          ConvertMFToRuntimePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName());
    PlanSpec spec;
    if (plan) {
      spec = plan.toPlanSpec();
    } else {
      // A one-rank program: every group has one member.
      spec = PlanSpec::singleDevice();
    }
    std::string error;
    std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
    if (!layout) {
      module.emitError() << error;
      return signalPassFailure();
    }
    if (failed(convertMFToRuntime(module, *layout)))
      signalPassFailure();
  }
};
} // namespace

LogicalResult meshfold::convertMFToRuntime(ModuleOp module,
                                           const MeshLayout &layout) {
  return Lowering(module, layout).run();
}
