//===- Attention.cpp - moe attention ops to linalg ------------------------===//

#include "Builders.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Transforms/DialectConversion.h"

#include <functional>
#include <limits>
#include <tuple>

using namespace mlir;
using namespace meshfold::moe;

namespace meshfold::moe_to_linalg {
namespace {

/// lse = max + log(sum) of a row's masked scores; -inf for a row with no
/// visible key (max -inf).
Value logSumExp(OpBuilder &b, Location loc, Type elt, Value max, Value sum) {
  Value isInf = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, max,
                                      negInf(b, loc, elt));
  Value v =
      arith::AddFOp::create(b, loc, max, math::LogOp::create(b, loc, sum));
  return arith::SelectOp::create(b, loc, isInf, negInf(b, loc, elt), v);
}

/// Whether the key at global position `k` is visible to the query at `q`
/// (i64 scalars): one sequence (the high 32 bits) and not later.
Value visibleKey(OpBuilder &b, Location loc, Value q, Value k) {
  Value notLater =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, k, q);
  Value shift = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(32));
  Value sameSequence =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                            arith::ShRSIOp::create(b, loc, k, shift),
                            arith::ShRSIOp::create(b, loc, q, shift));
  return arith::AndIOp::create(b, loc, notLater, sameSequence);
}

/// The extreme (min when `min`, else max) of the i64 positions `pos`, as a
/// scalar.
Value positionBound(OpBuilder &b, Location loc, Value pos, bool min) {
  MLIRContext *ctx = b.getContext();
  Type i64 = cast<RankedTensorType>(pos.getType()).getElementType();
  unsigned width = i64.getIntOrFloatBitWidth();
  APInt init =
      min ? APInt::getSignedMaxValue(width) : APInt::getSignedMinValue(width);
  Value bound = makeFilled(b, loc, RankedTensorType::get({}, i64), {},
                           b.getIntegerAttr(i64, init));
  Value r =
      generic(b, loc, {pos}, {bound},
              {pick(ctx, 1, {0}), AffineMap::get(1, 0, {}, ctx)}, {kRed},
              [&](OpBuilder &nb, Location l, ValueRange a) {
                Value m =
                    min ? Value(arith::MinSIOp::create(nb, l, a[0], a[1]))
                        : Value(arith::MaxSIOp::create(nb, l, a[0], a[1]));
                linalg::YieldOp::create(nb, l, m);
              })[0];
  return tensor::ExtractOp::create(b, loc, r, ValueRange{});
}

/// Rows [offset, offset + size) of head `head` of a [T, heads, d] tensor, as
/// a [size, d] tile.
Value headRows(OpBuilder &b, Location loc, Value x, Value offset, Value size,
               Value head) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t d = type.getDimSize(2);
  auto tileType =
      RankedTensorType::get({ShapedType::kDynamic, d}, type.getElementType());
  return tensor::ExtractSliceOp::create(
      b, loc, tileType, x, {OpFoldResult(offset), head, b.getIndexAttr(0)},
      {OpFoldResult(size), b.getIndexAttr(1), b.getIndexAttr(d)},
      {b.getIndexAttr(1), b.getIndexAttr(1), b.getIndexAttr(1)});
}

/// Elements [offset, offset + size) of a 1-d tensor.
Value rows1d(OpBuilder &b, Location loc, Value x, Value offset, Value size) {
  auto type = cast<RankedTensorType>(x.getType());
  return tensor::ExtractSliceOp::create(
      b, loc,
      RankedTensorType::get({ShapedType::kDynamic}, type.getElementType()), x,
      {OpFoldResult(offset)}, {OpFoldResult(size)}, {b.getIndexAttr(1)});
}

/// The builder of fused attention (see buildFusedAttention): the work items
/// of one scf.forall over (head, query tile), each an scf.for over key tiles
/// carrying the online softmax's running max m, sum l and accumulator acc.
class FusedAttention {
public:
  FusedAttention(OpBuilder &b, Location loc, Value q, Value k, Value v,
                 Value qpos, Value kpos, Value keyTiles, double scale,
                 RankedTensorType qType, bool withLse, bool bySequence,
                 int64_t tile)
      : b(b), loc(loc), ctx(b.getContext()), q(q), k(k), v(v), qpos(qpos),
        kpos(kpos), keyTiles(keyTiles), scale(scale), qType(qType),
        withLse(withLse), bySequence(bySequence), kQueryTile(tile),
        kKeyTile(keyTiles ? dimOf(kpos, 1) : tile), elt(qType.getElementType()),
        kElt(cast<RankedTensorType>(k.getType()).getElementType()),
        nh(dimOf(q, 1)), nkv(dimOf(k, 1)), dh(dimOf(q, 2)), group(nh / nkv),
        rowType(tensorOf({ShapedType::kDynamic}, elt)),
        rowDhType(tensorOf({ShapedType::kDynamic, dh}, elt)) {}

  /// The output and, when `withLse`, the log-sum-exp.
  std::pair<Value, Value> build() {
    tq = tensor::DimOp::create(b, loc, q, 0);
    tk = tensor::DimOp::create(b, loc, k, 0);
    keyTileCount = keyTiles ? Value(tensor::DimOp::create(b, loc, keyTiles, 0))
                            : Value(arith::CeilDivUIOp::create(
                                  b, loc, tk, cstIndex(b, loc, kKeyTile)));
    if (bySequence)
      std::tie(tileStarts, queryTiles) = queryTileStarts();
    else if (!keyTiles)
      kT = transposeKeys();
    std::tie(tileMin, tileMax) = keyTileBounds();
    scf::ForallOp forall = createWorkItems();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forall.getBody());
    startWorkItem(forall);
    scf::ForOp loop = keyLoop();
    finishWorkItem(forall, loop.getResult(0), loop.getResult(1),
                   loop.getResult(2));
    return {forall.getResult(0), withLse ? forall.getResult(1) : Value()};
  }

private:
  /// kT[h, d, j] = k[j, h, d], once for all work items of query tiles of
  /// several rows: the scores are then NN contractions on a [d, key tile]
  /// slice that is contiguous along the keys. (Transposing each key tile
  /// where it is used would redo it for every query tile and every head of
  /// a KV group, as strided gathers.)
  Value transposeKeys() {
    return linalg::TransposeOp::create(
               b, loc, k,
               makeEmpty(
                   b, loc,
                   tensorOf({nkv, dh,
                             cast<RankedTensorType>(k.getType()).getDimSize(0)},
                            kElt),
                   {{k, 0}}),
               ArrayRef<int64_t>{1, 2, 0})
        .getResult()[0];
  }

  /// A decode step's query tiles: runs of consecutive rows of one sequence
  /// (positions with the same high 32 bits), at most kQueryTile rows each,
  /// so that a decoding request's row is a tile of its own and a prompt's
  /// chunk (--prefill-chunk, or the rows past a cached prefix) is tiles of
  /// many rows that read each key tile once. Returns the tiles' first rows
  /// followed by the row count ([tiles + 1]) and the tile count.
  std::pair<Value, Value> queryTileStarts() {
    Value zero = cstIndex(b, loc, 0), one = cstIndex(b, loc, 1);
    Value full = cstIndex(b, loc, kQueryTile);
    Value empty = tensor::EmptyOp::create(
        b, loc, ArrayRef<int64_t>{ShapedType::kDynamic}, b.getIndexType(),
        ValueRange{arith::AddIOp::create(b, loc, tq, one)});
    Value shift = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(32));
    auto sequenceAt = [&](OpBuilder &nb, Location l, Value i) -> Value {
      return arith::ShRSIOp::create(
          nb, l, tensor::ExtractOp::create(nb, l, qpos, i), shift);
    };
    // Carries the starts so far, their count and the current tile's start.
    auto loop = scf::ForOp::create(
        b, loc, zero, tq, one, ValueRange{empty, zero, zero},
        [&](OpBuilder &nb, Location l, Value i, ValueRange it) {
          Value previous = arith::MaxSIOp::create(
              nb, l, arith::SubIOp::create(nb, l, i, one), zero);
          Value first =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, i, zero);
          Value otherSequence = arith::CmpIOp::create(
              nb, l, arith::CmpIPredicate::ne, sequenceAt(nb, l, i),
              sequenceAt(nb, l, previous));
          Value tileFull = arith::CmpIOp::create(
              nb, l, arith::CmpIPredicate::eq,
              arith::SubIOp::create(nb, l, i, it[2]), full);
          Value starts = arith::OrIOp::create(
              nb, l, first,
              arith::OrIOp::create(nb, l, otherSequence, tileFull));
          auto ifOp = scf::IfOp::create(
              nb, l, starts,
              [&](OpBuilder &tb, Location tl) {
                Value added = tensor::InsertOp::create(tb, tl, i, it[0], it[1]);
                scf::YieldOp::create(
                    tb, tl,
                    ValueRange{added, arith::AddIOp::create(tb, tl, it[1], one),
                               i});
              },
              [&](OpBuilder &eb, Location el) {
                scf::YieldOp::create(eb, el, it);
              });
          scf::YieldOp::create(nb, l, ifOp.getResults());
        });
    Value count = loop.getResult(1);
    return {tensor::InsertOp::create(b, loc, tq, loop.getResult(0), count),
            count};
  }

  /// Key tile `t`: its first row of k and v, its row count and its keys'
  /// positions. Consecutive rows of kKeyTile (the last tile those left),
  /// or those the table of key tiles gives (a decode step reading its K/V
  /// cache in place).
  std::tuple<Value, Value, Value> keyTileAt(OpBuilder &nb, Location l,
                                            Value t) {
    Value tile = cstIndex(nb, l, kKeyTile);
    if (!keyTiles) {
      Value j0 = arith::MulIOp::create(nb, l, t, tile);
      Value bk = arith::MinSIOp::create(nb, l, tile,
                                        arith::SubIOp::create(nb, l, tk, j0));
      return {j0, bk, rows1d(nb, l, kpos, j0, bk)};
    }
    auto entry = [&](int64_t column) -> Value {
      return arith::IndexCastOp::create(
          nb, l, nb.getIndexType(),
          tensor::ExtractOp::create(nb, l, keyTiles,
                                    ValueRange{t, cstIndex(nb, l, column)}));
    };
    // At most kKeyTile rows: the min states the bound (the GPU target sizes
    // its tile buffers by it).
    Value bk = arith::MinSIOp::create(nb, l, tile, entry(1));
    auto one = nb.getIndexAttr(1);
    Value kp = tensor::ExtractSliceOp::create(
        nb, l,
        RankedTensorType::get(
            {ShapedType::kDynamic},
            cast<RankedTensorType>(kpos.getType()).getElementType()),
        kpos, {OpFoldResult(t), nb.getIndexAttr(0)}, {one, OpFoldResult(bk)},
        {one, one});
    return {entry(0), bk, kp};
  }

  /// The least and the greatest position of each key tile, [tiles] each,
  /// once for all work items (each work item reads them to skip the tiles
  /// none of its queries can see).
  std::pair<Value, Value> keyTileBounds() {
    Type i64 = cast<RankedTensorType>(kpos.getType()).getElementType();
    Value empty =
        tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{ShapedType::kDynamic},
                                i64, ValueRange{keyTileCount});
    auto loop = scf::ForOp::create(
        b, loc, cstIndex(b, loc, 0), keyTileCount, cstIndex(b, loc, 1),
        ValueRange{empty, empty},
        [&](OpBuilder &nb, Location l, Value t, ValueRange bounds) {
          Value kp = std::get<2>(keyTileAt(nb, l, t));
          Value lo = tensor::InsertOp::create(
              nb, l, positionBound(nb, l, kp, /*min=*/true), bounds[0], t);
          Value hi = tensor::InsertOp::create(
              nb, l, positionBound(nb, l, kp, /*min=*/false), bounds[1], t);
          scf::YieldOp::create(nb, l, ValueRange{lo, hi});
        });
    return {loop.getResult(0), loop.getResult(1)};
  }

  /// The scf.forall over (head, query tile) whose shared outputs are the
  /// attention output and, when `withLse`, the log-sum-exp.
  scf::ForallOp createWorkItems() {
    SmallVector<Value> outs = {makeEmpty(b, loc, qType, {{q, 0}})};
    auto lseType = tensorOf({qType.getDimSize(0), nh}, elt);
    if (withLse)
      outs.push_back(makeEmpty(b, loc, lseType, {{q, 0}}));
    return scf::ForallOp::create(
        b, loc, {b.getIndexAttr(0), b.getIndexAttr(0)},
        {b.getIndexAttr(nh), OpFoldResult(bySequence ? queryTiles : tq)},
        {b.getIndexAttr(1), b.getIndexAttr(bySequence ? 1 : kQueryTile)}, outs,
        std::nullopt);
  }

  /// The work item's head, query rows and their positions, and the bounds
  /// of those positions that decide which key tiles to skip.
  void startWorkItem(scf::ForallOp forall) {
    h = forall.getInductionVar(0);
    if (bySequence) {
      Value t = forall.getInductionVar(1);
      i0 = tensor::ExtractOp::create(b, loc, tileStarts, t);
      Value end = tensor::ExtractOp::create(
          b, loc, tileStarts,
          ValueRange{arith::AddIOp::create(b, loc, t, cstIndex(b, loc, 1))});
      // At most kQueryTile rows: the min states the bound (the GPU target
      // sizes its tile buffers by it).
      bq = arith::MinSIOp::create(b, loc, cstIndex(b, loc, kQueryTile),
                                  arith::SubIOp::create(b, loc, end, i0));
    } else {
      i0 = forall.getInductionVar(1);
      bq = arith::MinSIOp::create(b, loc, cstIndex(b, loc, kQueryTile),
                                  arith::SubIOp::create(b, loc, tq, i0));
    }
    kvh =
        group == 1
            ? h
            : Value(arith::DivUIOp::create(b, loc, h, cstIndex(b, loc, group)));
    qTile = headRows(b, loc, q, i0, bq, h);
    qp = rows1d(b, loc, qpos, i0, bq);
    maxQ = positionBound(b, loc, qp, /*min=*/false);
    shift = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(32));
    firstSequence = arith::ShRSIOp::create(
        b, loc, positionBound(b, loc, qp, /*min=*/true), shift);
  }

  /// The scf.for over key tiles from (m, l, acc) = (-inf, 0, 0), updating
  /// them with each key tile some query of the work item may see.
  scf::ForOp keyLoop() {
    Value m0 = makeFilled(
        b, loc, rowType, {{qp, 0}},
        b.getFloatAttr(elt, -std::numeric_limits<double>::infinity()));
    Value l0 = zeros(b, loc, rowType, {{qp, 0}});
    Value acc0 = zeros(b, loc, rowDhType, {{qp, 0}});
    return scf::ForOp::create(
        b, loc, cstIndex(b, loc, 0), keyTileCount, cstIndex(b, loc, 1),
        ValueRange{m0, l0, acc0},
        [&](OpBuilder &nb, Location l, Value t, ValueRange it) {
          auto ifOp = scf::IfOp::create(
              nb, l, mayBeVisible(nb, l, t),
              [&](OpBuilder &tb, Location tl) {
                auto [j0, bk, kp] = keyTileAt(tb, tl, t);
                scf::YieldOp::create(
                    tb, tl, keyTile(tb, tl, j0, kp, it[0], it[1], it[2]));
              },
              [&](OpBuilder &eb, Location el) {
                scf::YieldOp::create(eb, el, it);
              });
          scf::YieldOp::create(nb, l, ifOp.getResults());
        });
  }

  /// Whether some key of key tile `t` may be visible to some query of the
  /// work item: not all later, nor all of earlier sequences.
  Value mayBeVisible(OpBuilder &nb, Location l, Value t) {
    Value notLater = arith::CmpIOp::create(
        nb, l, arith::CmpIPredicate::sle,
        tensor::ExtractOp::create(nb, l, tileMin, t), maxQ);
    Value reachesSequence = arith::CmpIOp::create(
        nb, l, arith::CmpIPredicate::sge,
        arith::ShRSIOp::create(
            nb, l, tensor::ExtractOp::create(nb, l, tileMax, t), shift),
        firstSequence);
    return arith::AndIOp::create(nb, l, notLater, reachesSequence);
  }

  /// One key tile at `j0` (positions `kp`): the online-softmax update of
  /// (m, sum, acc).
  SmallVector<Value> keyTile(OpBuilder &nb, Location l, Value j0, Value kp,
                             Value m, Value sum, Value acc) {
    Value bk = tensor::DimOp::create(nb, l, kp, 0);
    Value vTile = headRows(nb, l, v, j0, bk, kvh);
    Value s = maskedScores(nb, l, j0, kp, bk);
    auto [mNew, lScaled, corr] = rescale(nb, l, s, m, sum);
    Value p = probabilities(nb, l, s, mNew);
    Value lNew = generic(
        nb, l, {p}, {lScaled}, {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})},
        {kPar, kRed}, [](OpBuilder &bb, Location bl, ValueRange a) {
          linalg::YieldOp::create(
              bb, bl, Value(arith::AddFOp::create(bb, bl, a[0], a[1])));
        })[0];
    Value accScaled =
        generic(nb, l, {corr}, {acc}, {pick(ctx, 2, {0}), pick(ctx, 2, {0, 1})},
                {kPar, kPar}, [](OpBuilder &bb, Location bl, ValueRange a) {
                  linalg::YieldOp::create(
                      bb, bl, Value(arith::MulFOp::create(bb, bl, a[1], a[0])));
                })[0];
    // acc[i, d] += sum_j p[i, j] * v[j, d]; loop dims (i, d, j).
    Value accNew = generic(
        nb, l, {p, vTile}, {accScaled},
        {pick(ctx, 3, {0, 2}), pick(ctx, 3, {2, 1}), pick(ctx, 3, {0, 1})},
        {kPar, kPar, kRed}, multiplyAccumulate)[0];
    return {mNew, lNew, accNew};
  }

  /// The work item's scores against the key tile at `j0` (`bk` keys at
  /// positions `kp`), scaled, with the causal mask by global positions.
  /// With transposed keys, an NN contraction on the tile's [d, bk] slice of
  /// kT; a decode step's query rows instead take dot products with the
  /// [bk, d] rows of K where they lie (no transpose of the whole history
  /// per step).
  Value maskedScores(OpBuilder &nb, Location l, Value j0, Value kp, Value bk) {
    int64_t dyn = ShapedType::kDynamic;
    Value init = zeros(nb, l, tensorOf({dyn, dyn}, elt), {{qp, 0}, {kp, 0}});
    Value s;
    if (kT) {
      auto one = nb.getIndexAttr(1);
      Value kTile = tensor::ExtractSliceOp::create(
          nb, l, tensorOf({dh, dyn}, kElt), kT,
          {OpFoldResult(kvh), nb.getIndexAttr(0), OpFoldResult(j0)},
          {one, nb.getIndexAttr(dh), OpFoldResult(bk)}, {one, one, one});
      // s[i, j] = sum_d q[i, d] * kT[d, j]; loop dims (i, j, d).
      s = generic(
          nb, l, {qTile, kTile}, {init},
          {pick(ctx, 3, {0, 2}), pick(ctx, 3, {2, 1}), pick(ctx, 3, {0, 1})},
          {kPar, kPar, kRed}, multiplyAccumulate)[0];
    } else {
      // s[i, j] = sum_d q[i, d] * k[j, d]; loop dims (i, j, d).
      s = generic(
          nb, l, {qTile, headRows(nb, l, k, j0, bk, kvh)}, {init},
          {pick(ctx, 3, {0, 2}), pick(ctx, 3, {1, 2}), pick(ctx, 3, {0, 1})},
          {kPar, kPar, kRed}, multiplyAccumulate)[0];
    }
    // Scale and apply the causal mask by global positions, in place.
    return generic(
        nb, l, {qp, kp}, {s},
        {pick(ctx, 2, {0}), pick(ctx, 2, {1}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &bb, Location bl, ValueRange a) {
          Value ok = visibleKey(bb, bl, a[0], a[1]);
          Value sc =
              arith::MulFOp::create(bb, bl, a[2], cstF(bb, bl, elt, scale));
          linalg::YieldOp::create(bb, bl,
                                  Value(arith::SelectOp::create(
                                      bb, bl, ok, sc, negInf(bb, bl, elt))));
        })[0];
  }

  /// The new running max m' = max(m, tile max of `s`), the running sum
  /// scaled to it and the correction corr = exp(m - m'), 0 while m is -inf
  /// (then l and acc are still 0 and m - m' may be NaN); m and l in place.
  std::tuple<Value, Value, Value> rescale(OpBuilder &nb, Location l, Value s,
                                          Value m, Value sum) {
    Value tileMax = generic(
        nb, l, {s},
        {makeFilled(
            nb, l, rowType, {{qp, 0}},
            nb.getFloatAttr(elt, -std::numeric_limits<double>::infinity()))},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})}, {kPar, kRed},
        [](OpBuilder &bb, Location bl, ValueRange a) {
          linalg::YieldOp::create(
              bb, bl, Value(arith::MaximumFOp::create(bb, bl, a[0], a[1])));
        })[0];
    auto rowMaps = SmallVector<AffineMap>(4, pick(ctx, 1, {0}));
    ResultRange upd = generic(
        nb, l, {tileMax}, {m, sum, makeEmpty(nb, l, rowType, {{qp, 0}})},
        rowMaps, {kPar}, [&](OpBuilder &bb, Location bl, ValueRange a) {
          Value mNew = arith::MaximumFOp::create(bb, bl, a[1], a[0]);
          Value none = arith::CmpFOp::create(bb, bl, arith::CmpFPredicate::OEQ,
                                             a[1], negInf(bb, bl, elt));
          Value corr = arith::SelectOp::create(
              bb, bl, none, cstF(bb, bl, elt, 0.0),
              math::ExpOp::create(bb, bl,
                                  arith::SubFOp::create(bb, bl, a[1], mNew)));
          Value lScaled = arith::MulFOp::create(bb, bl, a[2], corr);
          linalg::YieldOp::create(bb, bl, ValueRange{mNew, lScaled, corr});
        });
    return {upd[0], upd[1], upd[2]};
  }

  /// p = exp(s - m'), 0 where the row has no visible key yet; in place.
  Value probabilities(OpBuilder &nb, Location l, Value s, Value mNew) {
    return generic(
        nb, l, {mNew}, {s}, {pick(ctx, 2, {0}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &bb, Location bl, ValueRange a) {
          Value none = arith::CmpFOp::create(bb, bl, arith::CmpFPredicate::OEQ,
                                             a[0], negInf(bb, bl, elt));
          Value e = math::ExpOp::create(
              bb, bl, arith::SubFOp::create(bb, bl, a[1], a[0]));
          linalg::YieldOp::create(
              bb, bl,
              Value(arith::SelectOp::create(bb, bl, none,
                                            cstF(bb, bl, elt, 0.0), e)));
        })[0];
  }

  /// Writes the work item's tiles into the shared outputs: out = acc / l
  /// (0 for a row with no visible key) and, when `withLse`, lse.
  void finishWorkItem(scf::ForallOp forall, Value m, Value sum, Value acc) {
    Value oSlot = headRows(b, loc, forall.getRegionIterArgs()[0], i0, bq, h);
    Value oTile = generic(
        b, loc, {acc, sum}, {oSlot},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value zero = cstF(nb, l, elt, 0.0);
          Value empty = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                              a[1], zero);
          Value div = arith::DivFOp::create(nb, l, a[0], a[1]);
          linalg::YieldOp::create(
              nb, l, Value(arith::SelectOp::create(nb, l, empty, zero, div)));
        })[0];
    auto one = b.getIndexAttr(1);
    SmallVector<std::tuple<Value, Value, SmallVector<OpFoldResult>,
                           SmallVector<OpFoldResult>>>
        inserts;
    inserts.push_back({oTile,
                       forall.getRegionIterArgs()[0],
                       {i0, h, b.getIndexAttr(0)},
                       {bq, one, b.getIndexAttr(dh)}});
    if (withLse) {
      Value lseOut = forall.getRegionIterArgs()[1];
      inserts.push_back({lseTile(lseOut, m, sum), lseOut, {i0, h}, {bq, one}});
    }
    b.setInsertionPointToStart(forall.getTerminator().getBody());
    for (auto &[src, dst, offsets, sizes] : inserts)
      tensor::ParallelInsertSliceOp::create(
          b, loc, src, dst, offsets, sizes,
          SmallVector<OpFoldResult>(offsets.size(), one));
  }

  /// The work item's lse = m + log(l) in its slot of `lseOut`, -inf for a
  /// row with no visible key.
  Value lseTile(Value lseOut, Value m, Value sum) {
    auto one = b.getIndexAttr(1);
    Value lSlot = tensor::ExtractSliceOp::create(
        b, loc, rowType, lseOut, {OpFoldResult(i0), h}, {OpFoldResult(bq), one},
        {one, one});
    return generic(b, loc, {m, sum}, {lSlot},
                   {pick(ctx, 1, {0}), pick(ctx, 1, {0}), pick(ctx, 1, {0})},
                   {kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
                     linalg::YieldOp::create(nb, l,
                                             logSumExp(nb, l, elt, a[0], a[1]));
                   })[0];
  }

  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  Value q, k, v, qpos, kpos;
  /// A table of key tiles ([n, 2]: first row, rows) over k and v, whose
  /// positions kpos gives by tile ([n, kKeyTile]); null: k's rows in
  /// order.
  Value keyTiles;
  double scale;
  RankedTensorType qType;
  bool withLse;
  /// A decode step's: query tiles are runs of one sequence's rows
  /// (queryTileStarts), and the keys are read where they lie.
  bool bySequence;
  /// Query rows per parallel work item (at most, by sequence) and keys per
  /// step of the online softmax.
  int64_t kQueryTile, kKeyTile;
  Type elt, kElt;
  int64_t nh, nkv, dh, group;
  /// Per query row: [rows] and [rows, d].
  RankedTensorType rowType, rowDhType;
  /// The query and key counts, the transposed keys (none by sequence), each
  /// key tile's least and greatest position, and by sequence the query
  /// tiles' starts and count.
  Value tq, tk, keyTileCount, kT, tileMin, tileMax, tileStarts, queryTiles;
  /// The work item's head, first query row, row count, KV head, query tile,
  /// its positions, their max, the 32-bit shift and the first sequence.
  Value h, i0, bq, kvh, qTile, qp, maxQ, shift, firstSequence;
};

/// Causal GQA attention by global positions, fused: a one-pass online
/// softmax over key tiles (flash attention) that never materialises the
/// [T, T] scores (docs/design.md, 9. The compiler). Returns the normalised
/// output and, when `withLse`, the log-sum-exp of each query/head's masked
/// scores.
///
/// scf.forall over (head, query tile) -- independent work items that the CPU
/// target may run on threads -- and in each an scf.for over key tiles
/// carrying, per query row, the running max m, the running sum l of
/// exp(s - m) and the accumulator acc of exp(s - m) * v. A key tile no
/// query of the tile can see is skipped: its keys all later than every
/// query, or all of earlier sequences than every query's (global positions
/// are `sequence * 2^32 + place`); positions are arbitrary (zigzag CP
/// reorders them), so the bounds come from the position tensors. A decode
/// step's query tiles (`bySequence`) never mix sequences: a decoding
/// request's row is a tile of its own, which skips the key tiles of the
/// batch's other requests, and a prompt's chunk in the step is tiles of up
/// to `tile` rows (a row per tile would read the whole history once per
/// row). Both contractions are generics with the multiplyAccumulate body
/// and one reduction dim, and the KV head is picked by slicing (no floordiv
/// maps). P · V is NN; so are the scores of a prefill's query tiles, on keys
/// transposed once per op; a decode step's rows take dot products with K's
/// rows where they lie instead (transposing a step's whole history, every
/// request's, per layer cost more than its attention).
///
/// Query rows per work item (at most, by sequence) and keys per step are
/// both `tile`. At 64 a [64, 64] f32 score tile (16 KiB) and the
/// key/value tiles stay in the L1/L2 caches; the query tile bounds the
/// parallelism of a short prompt (heads x query tiles).
std::pair<Value, Value>
buildFusedAttention(OpBuilder &b, Location loc, Value q, Value k, Value v,
                    Value qpos, Value kpos, Value keyTiles, double scale,
                    RankedTensorType qType, bool withLse, bool bySequence,
                    int64_t tile) {
  return FusedAttention(b, loc, q, k, v, qpos, kpos, keyTiles, scale, qType,
                        withLse, bySequence, tile)
      .build();
}

/// Causal GQA attention by global positions, materialised: the [H, Tq, Tk]
/// scores, masked scores and probabilities as whole tensors.
std::pair<Value, Value>
buildMaterializedAttention(OpBuilder &b, Location loc, Value q, Value k,
                           Value v, Value qpos, Value kpos, double scale,
                           RankedTensorType qType, bool withLse) {
  MLIRContext *ctx = b.getContext();
  Type elt = qType.getElementType();
  int64_t tq = dimOf(q, 0), tk = dimOf(k, 0), nh = dimOf(q, 1),
          nkv = dimOf(k, 1), group = nh / nkv;

  // Loop dims (h, i, j, d); KV head = h floordiv group.
  AffineExpr h = getAffineDimExpr(0, ctx), i = getAffineDimExpr(1, ctx),
             j = getAffineDimExpr(2, ctx), d = getAffineDimExpr(3, ctx);
  auto scoresType = tensorOf({nh, tq, tk}, elt);
  // Sizes by dim of [h, i, j]: h is static, i from q, j from k.
  SmallVector<std::pair<Value, int64_t>> hij = {{Value(), 0}, {q, 0}, {k, 0}};
  Value scores = generic(b, loc, {q, k}, {zeros(b, loc, scoresType, hij)},
                         {AffineMap::get(4, 0, {i, h, d}, ctx),
                          AffineMap::get(4, 0, {j, h.floorDiv(group), d}, ctx),
                          AffineMap::get(4, 0, {h, i, j}, ctx)},
                         {kPar, kPar, kPar, kRed}, multiplyAccumulate)[0];
  // Scale and apply the causal mask by global positions.
  Value masked = generic(
      b, loc, {scores, qpos, kpos}, {makeEmpty(b, loc, scoresType, hij)},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {1}), pick(ctx, 3, {2}),
       pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value ok = visibleKey(nb, l, a[1], a[2]);
        Value s = arith::MulFOp::create(nb, l, a[0], cstF(nb, l, elt, scale));
        linalg::YieldOp::create(
            nb, l,
            Value(arith::SelectOp::create(nb, l, ok, s, negInf(nb, l, elt))));
      })[0];
  // Row max and the sum of exponentials (a fully masked row gives 0).
  auto rowType = tensorOf({nh, tq}, elt);
  Value rowMax =
      generic(b, loc, {masked},
              {makeFilled(b, loc, rowType, {{q, 0}},
                          b.getFloatAttr(
                              elt, -std::numeric_limits<double>::infinity()))},
              {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1})},
              {kPar, kPar, kRed}, [](OpBuilder &nb, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    nb, l, Value(arith::MaximumFOp::create(nb, l, a[0], a[1])));
              })[0];
  auto expBody = [&](OpBuilder &nb, Location l, Value s, Value m) -> Value {
    Value isInf = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, m,
                                        negInf(nb, l, elt));
    Value e = math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, s, m));
    return arith::SelectOp::create(nb, l, isInf, cstF(nb, l, elt, 0.0), e);
  };
  Value probs = generic(
      b, loc, {masked, rowMax}, {makeEmpty(b, loc, scoresType, hij)},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        linalg::YieldOp::create(nb, l, expBody(nb, l, a[0], a[1]));
      })[0];
  Value rowSum =
      generic(b, loc, {probs}, {zeros(b, loc, rowType, {{q, 0}})},
              {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1})},
              {kPar, kPar, kRed}, [](OpBuilder &nb, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    nb, l, Value(arith::AddFOp::create(nb, l, a[0], a[1])));
              })[0];
  // out[i, h, d] = sum_j p[h, i, j] * v[j, h / group, d] / sum[h, i].
  // Loop dims (i, h, d, j).
  AffineExpr oi = getAffineDimExpr(0, ctx), oh = getAffineDimExpr(1, ctx),
             od = getAffineDimExpr(2, ctx), oj = getAffineDimExpr(3, ctx);
  Value acc = generic(b, loc, {probs, v}, {zeros(b, loc, qType, {{q, 0}})},
                      {AffineMap::get(4, 0, {oh, oi, oj}, ctx),
                       AffineMap::get(4, 0, {oj, oh.floorDiv(group), od}, ctx),
                       AffineMap::get(4, 0, {oi, oh, od}, ctx)},
                      {kPar, kPar, kPar, kRed}, multiplyAccumulate)[0];
  Value out = generic(
      b, loc, {acc, rowSum}, {makeEmpty(b, loc, qType, {{q, 0}})},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {1, 0}), pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value zero = cstF(nb, l, elt, 0.0);
        Value empty =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[1], zero);
        Value div = arith::DivFOp::create(nb, l, a[0], a[1]);
        linalg::YieldOp::create(
            nb, l, Value(arith::SelectOp::create(nb, l, empty, zero, div)));
      })[0];
  if (!withLse)
    return {out, Value()};
  // lse[i, h] = max + log(sum), -inf for a row with no visible key.
  auto lseType = tensorOf({tq, nh}, elt);
  Value lse = generic(
      b, loc, {rowMax, rowSum}, {makeEmpty(b, loc, lseType, {{q, 0}})},
      {pick(ctx, 2, {1, 0}), pick(ctx, 2, {1, 0}), pick(ctx, 2, {0, 1})},
      {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        linalg::YieldOp::create(nb, l, logSumExp(nb, l, elt, a[0], a[1]));
      })[0];
  return {out, lse};
}

/// Either lowering of attention, by `fuse`; the fused one with query tiles by
/// sequence in a decode step (`op`'s function is `moe.decode_step`). Keys
/// through a table of key tiles need the fused one.
FailureOr<std::pair<Value, Value>>
buildAttention(Operation *op, bool fuse, int64_t tile, OpBuilder &b,
               Location loc, Value q, Value k, Value v, Value qpos, Value kpos,
               Value keyTiles, double scale, RankedTensorType qType,
               bool withLse) {
  auto fn = op->getParentOfType<func::FuncOp>();
  bool step = fn && fn->hasAttr(getDecodeStepAttrName());
  if (fuse)
    return buildFusedAttention(b, loc, q, k, v, qpos, kpos, keyTiles, scale,
                               qType, withLse, /*bySequence=*/step, tile);
  if (keyTiles)
    return failure(); // refused before (ConvertMoEToLinalgPass)
  return buildMaterializedAttention(b, loc, q, k, v, qpos, kpos, scale, qType,
                                    withLse);
}

struct AttentionLowering : OpConversionPattern<AttentionOp> {
  AttentionLowering(MLIRContext *ctx, bool fuse, int64_t tile)
      : OpConversionPattern(ctx), fuse(fuse), tile(tile) {}
  bool fuse;
  int64_t tile;
  LogicalResult
  matchAndRewrite(AttentionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    FailureOr<std::pair<Value, Value>> built = buildAttention(
        op, fuse, tile, rewriter, op.getLoc(), adaptor.getQuery(),
        adaptor.getKey(), adaptor.getValue(), adaptor.getQPositions(),
        adaptor.getKvPositions(), adaptor.getKeyTiles(),
        op.getScale().convertToDouble(), op.getType(), /*withLse=*/false);
    if (failed(built))
      return failure();
    rewriter.replaceOp(op, built->first);
    return success();
  }
};

struct AttentionPartialLowering : OpConversionPattern<AttentionPartialOp> {
  AttentionPartialLowering(MLIRContext *ctx, bool fuse, int64_t tile)
      : OpConversionPattern(ctx), fuse(fuse), tile(tile) {}
  bool fuse;
  int64_t tile;
  LogicalResult
  matchAndRewrite(AttentionPartialOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    FailureOr<std::pair<Value, Value>> built = buildAttention(
        op, fuse, tile, rewriter, op.getLoc(), adaptor.getQuery(),
        adaptor.getKey(), adaptor.getValue(), adaptor.getQPositions(),
        adaptor.getKvPositions(), adaptor.getKeyTiles(),
        op.getScale().convertToDouble(), op.getResult().getType(),
        /*withLse=*/true);
    if (failed(built))
      return failure();
    rewriter.replaceOp(op, {built->first, built->second});
    return success();
  }
};

struct AttentionMergeLowering : OpConversionPattern<AttentionMergeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AttentionMergeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value o1 = adaptor.getOut1(), l1 = adaptor.getLse1(),
          o2 = adaptor.getOut2(), l2 = adaptor.getLse2();
    auto oType = op.getResult().getType();
    auto lType = op.getLse().getType();
    Type elt = oType.getElementType();
    // The weights of both sides relative to their max; a side at -inf has 0.
    auto weights = [&](OpBuilder &nb, Location l, Value a1, Value a2) {
      Value m = arith::MaximumFOp::create(nb, l, a1, a2);
      Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, m,
                                         negInf(nb, l, elt));
      Value zero = cstF(nb, l, elt, 0.0);
      Value w1 = arith::SelectOp::create(
          nb, l, none, zero,
          math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, a1, m)));
      Value w2 = arith::SelectOp::create(
          nb, l, none, zero,
          math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, a2, m)));
      return std::make_tuple(m, none, w1, w2);
    };
    Value out = generic(
        b, loc, {o1, l1, o2, l2}, {makeEmpty(b, loc, oType, {{o1, 0}})},
        {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2}),
         pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2})},
        {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          auto [m, none, w1, w2] = weights(nb, l, a[1], a[3]);
          Value num = arith::AddFOp::create(
              nb, l, arith::MulFOp::create(nb, l, w1, a[0]),
              arith::MulFOp::create(nb, l, w2, a[2]));
          Value den = arith::AddFOp::create(nb, l, w1, w2);
          Value res =
              arith::SelectOp::create(nb, l, none, cstF(nb, l, elt, 0.0),
                                      arith::DivFOp::create(nb, l, num, den));
          linalg::YieldOp::create(nb, l, res);
        })[0];
    Value lse = generic(
        b, loc, {l1, l2}, {makeEmpty(b, loc, lType, {{l1, 0}})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          auto [m, none, w1, w2] = weights(nb, l, a[0], a[1]);
          Value v = arith::AddFOp::create(
              nb, l, m,
              math::LogOp::create(nb, l, arith::AddFOp::create(nb, l, w1, w2)));
          linalg::YieldOp::create(nb, l,
                                  Value(arith::SelectOp::create(
                                      nb, l, none, negInf(nb, l, elt), v)));
        })[0];
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

} // namespace

void populateAttentionPatterns(RewritePatternSet &patterns, bool fuse,
                               int64_t tile) {
  patterns.add<AttentionLowering, AttentionPartialLowering>(
      patterns.getContext(), fuse, tile);
  patterns.add<AttentionMergeLowering>(patterns.getContext());
}
} // namespace meshfold::moe_to_linalg
