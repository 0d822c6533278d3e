//===- ContractionKernels.cpp - register-tiled vector contractions --------===//
//
// The contractions of the model (its linear layers, the experts, attention's
// two products, the LM head) are `linalg.generic` ops whose body multiplies
// two inputs and adds the product to the output. `convert-linalg-to-loops`
// would make each a scalar loop nest that reloads the output element at
// every step and runs one multiply-add at a time. This pass instead keeps a
// tile of the output in vector registers across a block of the reduction,
// so that each loaded element of either operand feeds several FMAs, and
// sweeps the output in blocks small enough for the cache (docs/design.md,
// section 9).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Contraction.h"
#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/X86Vector/Transforms.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace meshfold {
#define GEN_PASS_DEF_MFLINALGCONTRACTIONKERNELSPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {

/// How the register tile runs: along the reduction dim (both operands
/// contiguous in k) or along n (b and the output contiguous in n).
enum class TileKind { Dot, Outer };

/// A matched contraction: out[.., m, n] += a[.., m, k] * b[.., n or k ..].
struct Contraction {
  linalg::GenericOp op;
  TileKind kind;
  OpOperand *a, *b, *out;
  unsigned k;
  std::optional<unsigned> m, n;
  /// The other parallel dims, in the output's order.
  SmallVector<unsigned> outer;
  /// A dot contraction whose output is contiguous along n: with enough rows
  /// it runs as outer products over a packed copy of b instead.
  bool packable = false;
};

/// Register tiles. With 16 vector registers (SSE, AVX2): 12 accumulators,
/// leaving room for the operands of one step; with AVX-512's 32: 16 dot
/// accumulators (4 + 4 operand vectors) and 24 outer-product ones, 6 rows of
/// 4 vectors (4 loads of b and 6 broadcasts per 24 FMAs; measured faster
/// than 8 x 3 and 12 x 2 on packed panels). Larger dot tiles load fewer
/// operand vectors per FMA (4 x 4 measured faster than 5 x 4 and 4 x 3).
///
/// `packMinRows`: a packed block of b is copied once per (n block, k block)
/// and read by every row tile; below this many rows the copy costs more than
/// the dot tiles' lane reductions save. The dot tiles read b where it lies
/// (a mapped weight) once per row chunk from memory, as packing does, but
/// write no copy. With AVX-512 the experts of a 256-token prompt (about 64
/// rows each of 8 top-2) ran their whole prefill 28% faster on dot tiles
/// than packed (0.47 s -> 0.34 s, 2 threads), and 256-row linears and
/// 512-row experts (T = 2048) measured the same either way. With AVX2 the
/// 4 x 3 dot tile loads 7 vectors per 12 FMAs where the 6 x 2 outer tile
/// loads 2 and broadcasts 6, and packing wins from about 32 rows: the same
/// 256-token prefill took 0.35 s packed against 0.42 s on dot tiles (f32,
/// 2 threads, medians of 8; bf16 weights 0.30 against 0.32; a 128-token
/// prompt, about 32 rows an expert, 0.20 against 0.23), and 16 rows measured
/// alike either way.
struct RegisterTiles {
  int64_t dotRows, dotCols, outerRows, outerVectors, packMinRows;
};
constexpr RegisterTiles kTiles16 = {4, 3, 6, 2, 32};
constexpr RegisterTiles kTiles32 = {4, 4, 6, 4, 256};
// Cache blocks, in tiles and vectors: a dot block of b is 16 tiles of rows
// by 64 vectors of k (96 KiB of f32 with AVX2, 256 KiB with AVX-512), an
// outer-product block 8 tiles of columns by 256 rows of k (128 KiB; 384
// KiB).
constexpr int64_t kDotBlockTiles = 16, kDotBlockVectors = 64;
constexpr int64_t kOuterBlockTiles = 8, kOuterBlockK = 256;
// Dot tiles of fewer rows than a whole tile take more columns along a
// reduction of at least this many (see dotColumns).
constexpr int64_t kWideMinK = 256;
// Dot tiles along such a reduction prefetch the rows of b this many tiles
// ahead (see prefetchAhead). With AVX2 1, 2 and 4 measured alike; with
// AVX-512 (AVX512_BF16) the next tile is best: bf16 decode steps of the
// bench model took 8.8 ms at 1 tile, 10.1 at 2 and 10.9 at 4 (1 stream),
// 32.0 against 36.1 ms at 1 and 2 (8 streams), prefill alike (2 threads,
// medians of 3 alternated runs).
constexpr int64_t kPrefetchTiles = 1;
// A packed block: 128 columns of b (2 outer-product tiles with AVX-512, 8
// with AVX2) by 256 of k, 128 KiB of f32 in the L2 cache. n blocks of 128
// give the threads enough work items without splitting rows: the model's
// widths (512, 1024, 2816) make 4, 8 and 22 of them.
constexpr int64_t kPackedColumns = 128, kPackedK = 256;
// Rows are split into chunks of about this many (a multiple of the row
// tile), each packing its own copy of b. Packing reads b from memory, so a
// chunk is large: an expert's rows of a 2048-token prompt take one chunk,
// and each of its weight blocks is copied once (256-row chunks packed the
// experts' weights twice, measured 7% slower whole prefill at T = 2048).
constexpr int64_t kPackedRows = 1024;

bool hasUnitInnermostStride(Value memref) {
  auto type = dyn_cast<MemRefType>(memref.getType());
  if (!type || type.getRank() == 0)
    return false;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return false;
  return strides.back() == 1;
}

/// The register tile `op` takes, if it is a contraction whose operands lie
/// as one of them needs.
std::optional<Contraction> match(linalg::GenericOp op) {
  std::optional<meshfold::ContractionMatch> found =
      meshfold::matchContraction(op);
  if (!found)
    return std::nullopt;
  const meshfold::ContractionMatch &cm = *found;
  OpOperand *in0 = cm.in0, *in1 = cm.in1, *out = cm.out;
  unsigned k = cm.k;
  auto uses = [&](OpOperand *o, unsigned d) { return cm.uses(o, d); };
  auto innermost = [&](OpOperand *o) { return cm.innermost(o); };
  auto build = [&](TileKind kind, OpOperand *a, OpOperand *b,
                   std::optional<unsigned> n) {
    Contraction c{op, kind, a, b, out, k, cm.innermostOwnDim(a, b), n, {}};
    for (AffineExpr e : op.getMatchingIndexingMap(out).getResults()) {
      unsigned d = cast<AffineDimExpr>(e).getPosition();
      if (d != c.m && d != c.n)
        c.outer.push_back(d);
    }
    return c;
  };

  // Outer products need no reduction across vector lanes: prefer them.
  for (auto [a, b] : {std::pair(in0, in1), std::pair(in1, in0)}) {
    std::optional<unsigned> n = innermost(b);
    if (n && *n != k && !uses(a, *n) && innermost(out) == n &&
        hasUnitInnermostStride(b->get()) && hasUnitInnermostStride(out->get()))
      return build(TileKind::Outer, a, b, n);
  }
  if (innermost(in0) == k && innermost(in1) == k &&
      hasUnitInnermostStride(in0->get()) &&
      hasUnitInnermostStride(in1->get())) {
    // b is the operand whose own dim the output runs along, if either is.
    OpOperand *a = in0, *b = in1;
    if (innermost(out) && innermost(out) == cm.innermostOwnDim(in0, in1))
      std::swap(a, b);
    Contraction c = build(TileKind::Dot, a, b, cm.innermostOwnDim(b, a));
    c.packable = c.m && c.n && innermost(out) == c.n &&
                 hasUnitInnermostStride(out->get());
    return c;
  }
  return std::nullopt;
}

/// Emits the loops of one contraction in place of its generic.
class KernelEmitter {
public:
  KernelEmitter(Contraction c, OpBuilder &b, int64_t vectorBits, bool parallel,
                bool batchInvariant, bool bf16Dot)
      : c(c), b(b), loc(c.op.getLoc()), parallel(parallel),
        batchInvariant(batchInvariant) {
    accType = cast<FloatType>(
        cast<MemRefType>(c.out->get().getType()).getElementType());
    width = std::max<int64_t>(1, vectorBits / accType.getWidth());
    vecType = VectorType::get({width}, accType);
    tiles = vectorBits >= 512 ? kTiles32 : kTiles16;
    for (Range r :
         cast<linalg::LinalgOp>(c.op.getOperation()).createLoopRanges(b, loc))
      sizes.push_back(getValueOrCreateConstantIndexOp(b, loc, r.size));
    if (bf16Dot && width == 16 && accType.isF32())
      rounded = bf16PairOperand();
  }

  void emit() {
    // A contraction of no rows (an expert no row of a decode step chose)
    // starts no parallel loop: 1-stream decode skips 3 of every 4 experts'.
    OpBuilder::InsertionGuard guard(b);
    if (c.m && !getConstantIntValue(sizes[*c.m])) {
      Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                        sizes[*c.m], cst(0));
      b.setInsertionPointToStart(scf::IfOp::create(b, loc, any).thenBlock());
    }
    if (rounded)
      roundedCopy = copyAsBF16(rounded->get());
    emitPaths();
    if (roundedCopy)
      memref::DeallocOp::create(b, loc, roundedCopy);
  }

private:
  /// The packed and dot paths, chosen by the row count where both apply.
  void emitPaths() {
    std::optional<int64_t> n =
        c.n ? getConstantIntValue(sizes[*c.n]) : std::nullopt;
    if (!c.packable || (n && *n < tiles.outerVectors * width))
      return emitLoops(/*packed=*/false);
    if (batchInvariant)
      return emitLoops(/*packed=*/true);
    Value enough = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                         sizes[*c.m], cst(tiles.packMinRows));
    auto choice = scf::IfOp::create(b, loc, enough, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    emitLoops(/*packed=*/true);
    b.setInsertionPointToStart(choice.elseBlock());
    emitLoops(/*packed=*/false);
  }

  /// A bf16 copy of the f32 memref `src` (rounded to nearest even), in
  /// vectors of 2 x width along its innermost dim; in parallel over its
  /// outermost dim where the contraction's loops would be.
  Value copyAsBF16(Value src) {
    auto type = cast<MemRefType>(src.getType());
    SmallVector<Value> dims, dynamic;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      dims.push_back(getValueOrCreateConstantIndexOp(
          b, loc, memref::getMixedSize(b, loc, src, d)));
      if (type.isDynamicDim(d))
        dynamic.push_back(dims.back());
    }
    Value copy = memref::AllocOp::create(
        b, loc, MemRefType::get(type.getShape(), b.getBF16Type()), dynamic,
        b.getI64IntegerAttr(64));
    int64_t step = 2 * width;
    auto row = [&](OpBuilder &, Location, ValueRange outer) {
      SmallVector<Value> idx(outer);
      idx.push_back(Value());
      Value inner = dims.back(), main = wholeSteps(cst(0), inner, step);
      forLoop(cst(0), main, cst(step), [&](Value k) {
        idx.back() = k;
        Value v = vector::LoadOp::create(
            b, loc, VectorType::get({step}, accType), src, idx);
        vector::StoreOp::create(b, loc, toBF16(v), copy, idx);
      });
      forLoop(main, inner, cst(1), [&](Value k) {
        idx.back() = k;
        memref::StoreOp::create(
            b, loc, toBF16(memref::LoadOp::create(b, loc, src, idx)), copy,
            idx);
      });
    };
    ArrayRef<Value> outer = ArrayRef(dims).drop_back();
    SmallVector<Value> zeros(outer.size(), cst(0)), ones(outer.size(), cst(1));
    if (outer.empty() || !parallel || nested()) {
      nest(zeros, outer, ones, {}, row);
    } else {
      auto par = scf::ParallelOp::create(b, loc, zeros[0], outer[0], ones[0]);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(par.getBody());
      nest(ArrayRef(zeros).drop_front(), outer.drop_front(),
           ArrayRef(ones).drop_front(), {par.getInductionVars()[0]}, row);
    }
    return copy;
  }

  /// Whether the contraction is inside a parallel loop already.
  bool nested() {
    return c.op->getParentOfType<scf::ParallelOp>() ||
           c.op->getParentOfType<scf::ForallOp>();
  }

  /// The loops over the outer dims and n blocks (parallel), then k blocks.
  /// `packed`: each (n block, k block) of b is first copied into panels of
  /// whole outer-product tiles, which every row tile then reads in order.
  void emitLoops(bool packed) {
    bool dot = c.kind == TileKind::Dot && !packed;
    int64_t panelWidth = tiles.outerVectors * width;
    int64_t nBlock =
        dot ? dotBlock()
        : packed
            ? std::max<int64_t>(1, kPackedColumns / panelWidth) * panelWidth
            : kOuterBlockTiles * panelWidth;
    int64_t kBlock = dot      ? kDotBlockVectors * width
                     : packed ? kPackedK
                              : kOuterBlockK;
    SmallVector<Value> lbs, ubs, steps;
    for (unsigned d : c.outer) {
      lbs.push_back(cst(0));
      ubs.push_back(sizes[d]);
      steps.push_back(cst(1));
    }
    Value mChunk;
    if (packed) {
      // roundUp(ceil(M / ceil(M / kPackedRows)), row tile), of M >= 1 (a
      // contraction may have no rows: a positive step all the same).
      AffineExpr m;
      bindSymbols(b.getContext(), m);
      int64_t rows = tiles.outerRows;
      Value atLeastOne = arith::MaxUIOp::create(b, loc, sizes[*c.m], cst(1));
      mChunk = getValueOrCreateConstantIndexOp(
          b, loc,
          affine::makeComposedFoldedAffineApply(
              b, loc, m.ceilDiv(m.ceilDiv(kPackedRows)).ceilDiv(rows) * rows,
              {OpFoldResult(atLeastOne)}));
      lbs.push_back(cst(0));
      ubs.push_back(sizes[*c.m]);
      steps.push_back(mChunk);
    }
    if (c.n) {
      lbs.push_back(cst(0));
      ubs.push_back(sizes[*c.n]);
      steps.push_back(nStep(dot, nBlock));
    }
    auto body = [&](OpBuilder &, Location, ValueRange ivs) {
      SmallVector<Value> iv(sizes.size());
      for (auto [d, v] : llvm::zip(c.outer, ivs))
        iv[d] = v;
      Value mStart, mStop;
      if (packed) {
        mStart = ivs[c.outer.size()];
        mStop =
            arith::MinSIOp::create(b, loc, add(mStart, mChunk), sizes[*c.m]);
      }
      Value nb, nEnd;
      if (c.n) {
        nb = ivs.back();
        nEnd =
            arith::MinSIOp::create(b, loc, add(nb, steps.back()), sizes[*c.n]);
      }
      // One block of panels per thread, on the heap: a parallel body's
      // stack is not released per iteration once lowered to OpenMP.
      // (No larger than a static n or k needs.)
      Value panels;
      if (packed) {
        int64_t count = nBlock / panelWidth, depth = kBlock;
        if (std::optional<int64_t> n = getConstantIntValue(sizes[*c.n]))
          count = std::clamp<int64_t>(*n / panelWidth, 1, count);
        if (std::optional<int64_t> k = getConstantIntValue(sizes[c.k]))
          depth = std::clamp<int64_t>(*k, 1, depth);
        if (packsPairs())
          depth /= 2;
        panels = memref::AllocOp::create(
            b, loc, MemRefType::get({count, depth, panelWidth}, accType),
            b.getI64IntegerAttr(64));
      }
      forLoop(cst(0), sizes[c.k], cst(kBlock), [&](Value kb) {
        Value kEnd =
            arith::MinSIOp::create(b, loc, add(kb, cst(kBlock)), sizes[c.k]);
        if (packed)
          packedTiles(iv, panels, mStart, mStop, nb, nEnd, kb, kEnd);
        else
          rowTiles(iv, nb, nEnd, kb, kEnd);
      });
      if (packed)
        memref::DeallocOp::create(b, loc, panels);
    };
    if (lbs.empty()) {
      body(b, loc, {});
    } else if (parallel && !nested()) {
      auto par = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(par.getBody());
      body(b, loc, par.getInductionVars());
    } else {
      nest(lbs, ubs, steps, {}, body);
    }
  }

  Contraction c;
  OpBuilder &b;
  Location loc;
  bool parallel;
  /// Packable contractions always packed (one summation order).
  bool batchInvariant;
  FloatType accType;
  int64_t width;
  VectorType vecType;
  RegisterTiles tiles;
  SmallVector<Value> sizes;
  /// While set, rows of a tile past it are clamped to it and not stored.
  Value lastRow;
  /// With bf16-dot, the f32 operand of a contraction with a bf16 one: read
  /// rounded to bf16 everywhere (from `roundedCopy`, made once per
  /// contraction), and multiplied in pairs of k by the dot.
  OpOperand *rounded = nullptr;
  Value roundedCopy;

  /// The memref the kernel reads for `o`: the rounded copy for `rounded`.
  Value memrefOf(OpOperand *o) {
    return o == rounded && roundedCopy ? roundedCopy : o->get();
  }
  Type elementType(OpOperand *o) {
    return cast<MemRefType>(memrefOf(o).getType()).getElementType();
  }
  /// The f32 operand of a dot contraction of a bf16 operand with an f32
  /// one, if this is such a contraction.
  OpOperand *bf16PairOperand() {
    if (c.kind != TileKind::Dot)
      return nullptr;
    Type ea = elementType(c.a), eb = elementType(c.b);
    if (ea.isF32() && eb.isBF16())
      return c.a;
    if (ea.isBF16() && eb.isF32())
      return c.b;
    return nullptr;
  }
  /// Packed panels of pairs: b is the bf16 operand and every k block is
  /// whole pairs of vectors (k static, a multiple of 2 x width).
  bool packsPairs() {
    std::optional<int64_t> k = getConstantIntValue(sizes[c.k]);
    return rounded == c.a && k && *k % (2 * width) == 0;
  }

  Value cst(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value add(Value x, int64_t y) { return y == 0 ? x : add(x, cst(y)); }
  /// lb + floor((ub - lb) / step) * step: the end of the whole steps.
  Value wholeSteps(Value lb, Value ub, int64_t step) {
    Value len = arith::SubIOp::create(b, loc, ub, lb);
    Value n = arith::DivUIOp::create(b, loc, len, cst(step));
    return add(lb, arith::MulIOp::create(b, loc, n, cst(step)));
  }

  void forLoop(Value lb, Value ub, Value step, function_ref<void(Value)> fn) {
    auto loop = scf::ForOp::create(b, loc, lb, ub, step);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    fn(loop.getInductionVar());
  }
  void nest(ArrayRef<Value> lbs, ArrayRef<Value> ubs, ArrayRef<Value> steps,
            SmallVector<Value> ivs,
            function_ref<void(OpBuilder &, Location, ValueRange)> fn) {
    if (lbs.empty())
      return fn(b, loc, ivs);
    forLoop(lbs[0], ubs[0], steps[0], [&](Value v) {
      ivs.push_back(v);
      nest(lbs.drop_front(), ubs.drop_front(), steps.drop_front(), ivs, fn);
    });
  }

  SmallVector<Value> indices(OpOperand *o, ArrayRef<Value> iv) {
    SmallVector<Value> idx;
    for (AffineExpr e : c.op.getMatchingIndexingMap(o).getResults())
      idx.push_back(iv[cast<AffineDimExpr>(e).getPosition()]);
    return idx;
  }
  Value widen(Value v) {
    Type to = isa<VectorType>(v.getType()) ? Type(vecType) : Type(accType);
    return v.getType() == to ? v : arith::ExtFOp::create(b, loc, to, v);
  }
  /// v (f32, a scalar or a vector) as bf16.
  Value toBF16(Value v) {
    Type bf16 = b.getBF16Type();
    if (auto vt = dyn_cast<VectorType>(v.getType()))
      bf16 = VectorType::get(vt.getShape(), bf16);
    return arith::TruncFOp::create(b, loc, bf16, v);
  }
  Value loadScalar(OpOperand *o, ArrayRef<Value> iv) {
    return widen(memref::LoadOp::create(b, loc, memrefOf(o), indices(o, iv)));
  }
  Value loadVector(OpOperand *o, ArrayRef<Value> iv) {
    return widen(
        vector::LoadOp::create(b, loc, VectorType::get({width}, elementType(o)),
                               memrefOf(o), indices(o, iv)));
  }
  /// 2 x width bf16 elements of `o` along k from iv, pairs for the dot.
  Value loadPairs(OpOperand *o, ArrayRef<Value> iv) {
    return vector::LoadOp::create(b, loc,
                                  VectorType::get({2 * width}, elementType(o)),
                                  memrefOf(o), indices(o, iv));
  }
  /// The bf16 pair o[iv], o[iv + 1 along k] in every pair of a vector for
  /// the dot.
  Value broadcastPair(OpOperand *o, ArrayRef<Value> iv) {
    Value pair =
        vector::LoadOp::create(b, loc, VectorType::get({2}, b.getBF16Type()),
                               memrefOf(o), indices(o, iv));
    Value bits = vector::ExtractOp::create(
        b, loc,
        vector::BitCastOp::create(b, loc, VectorType::get({1}, accType), pair),
        ArrayRef<int64_t>{0});
    return asPairs(vector::BroadcastOp::create(b, loc, vecType, bits));
  }
  /// A vector of 32-bit lanes read as twice as many bf16.
  Value asPairs(Value v) {
    return vector::BitCastOp::create(
        b, loc, VectorType::get({2 * width}, b.getBF16Type()), v);
  }
  /// acc + the products of a and b: FMAs, or the dot of bf16 pairs.
  Value accumulate(Value x, Value y, Value acc) {
    if (cast<VectorType>(x.getType()).getElementType().isBF16())
      return x86vector::DotBF16Op::create(b, loc, vecType, acc, x, y);
    return vector::FMAOp::create(b, loc, x, y, acc);
  }
  /// iv with the m dim at row `i` of the tile at m0 and the n dim at n0 + j.
  SmallVector<Value> at(ArrayRef<Value> iv, Value m0, int64_t i, Value n0,
                        int64_t j) {
    SmallVector<Value> r(iv);
    if (c.m) {
      r[*c.m] = add(m0, i);
      if (lastRow && i > 0)
        r[*c.m] = arith::MinSIOp::create(b, loc, r[*c.m], lastRow);
    }
    if (c.n)
      r[*c.n] = add(n0, j);
    return r;
  }

  /// The row tiles of one (n block, k block): whole tiles of rows, then one
  /// tile of the remaining rows.
  void rowTiles(ArrayRef<Value> iv, Value nb, Value nEnd, Value kb,
                Value kEnd) {
    if (!c.m)
      return colTiles(iv, Value(), 1, nb, nEnd, kb, kEnd);
    rowTiles(iv, cst(0), sizes[*c.m], nb, nEnd, kb, kEnd);
  }
  /// The same for rows [mBegin, mEnd): the rows past the whole tiles in
  /// one tile of as many rows (a switch over 1 .. tile - 1), so that a few
  /// rows (a decode step's, an expert's of a short batch) read each block
  /// of b once, not once per row.
  void rowTiles(ArrayRef<Value> iv, Value mBegin, Value mEnd, Value nb,
                Value nEnd, Value kb, Value kEnd) {
    int64_t rows = c.kind == TileKind::Dot ? tiles.dotRows : tiles.outerRows;
    Value mFull = wholeSteps(mBegin, mEnd, rows);
    forLoop(mBegin, mFull, cst(rows),
            [&](Value m0) { colTiles(iv, m0, rows, nb, nEnd, kb, kEnd); });
    if (rows == 1)
      return;
    auto cases = llvm::to_vector(llvm::seq<int64_t>(1, rows));
    auto left = scf::IndexSwitchOp::create(
        b, loc, TypeRange{}, arith::SubIOp::create(b, loc, mEnd, mFull), cases,
        cases.size());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&left.getDefaultRegion().emplaceBlock());
    scf::YieldOp::create(b, loc);
    for (auto [r, region] : llvm::zip(cases, left.getCaseRegions())) {
      b.setInsertionPointToStart(&region.emplaceBlock());
      colTiles(iv, mFull, r, nb, nEnd, kb, kEnd);
      scf::YieldOp::create(b, loc);
    }
  }

  /// One (n block, k block) of a packable dot contraction: the whole
  /// panels of b copied (widened) into `panels[(n - nb) / w][k - kb][j]`
  /// for n = n0 + j, then outer-product tiles over them; the columns past
  /// the last whole panel in dot tiles. With bf16 pairs, b's pairs of k
  /// stay bf16: `panels[..][(k - kb) / 2][j]` holds k and k + 1 of n0 + j.
  void packedTiles(ArrayRef<Value> iv, Value panels, Value mStart, Value mStop,
                   Value nb, Value nEnd, Value kb, Value kEnd) {
    bool pairs = packsPairs();
    int64_t w = tiles.outerVectors * width;
    Value nFull = wholeSteps(nb, nEnd, w);
    auto panelOf = [&](Value n0) {
      return arith::DivUIOp::create(
          b, loc, arith::SubIOp::create(b, loc, n0, nb), cst(w));
    };
    auto panelRow = [&](Value kk) {
      Value k0 = arith::SubIOp::create(b, loc, kk, kb);
      return pairs ? arith::DivUIOp::create(b, loc, k0, cst(2)) : k0;
    };
    forLoop(nb, nFull, cst(w), [&](Value n0) {
      if (pairs)
        packPairs(iv, panels, panelOf(n0), n0, kb, kEnd);
      else
        packPanel(iv, panels, panelOf(n0), n0, kb, kEnd);
    });
    auto rowTile = [&](Value m0, int64_t rows) {
      forLoop(nb, nFull, cst(w), [&](Value n0) {
        Value panel = panelOf(n0);
        outerTile(
            iv, m0, rows, n0, tiles.outerVectors, kb, kEnd,
            [&](Value kk, int64_t j) -> Value {
              Value v = vector::LoadOp::create(
                  b, loc, vecType, panels,
                  ValueRange{panel, panelRow(kk), cst(j * width)});
              return pairs ? asPairs(v) : v;
            },
            pairs);
      });
    };
    // The last tile of the chunk may pass its end: its rows past the end
    // read the chunk's last row and are not stored.
    lastRow = arith::SubIOp::create(b, loc, mStop, cst(1));
    forLoop(mStart, mStop, cst(tiles.outerRows),
            [&](Value m0) { rowTile(m0, tiles.outerRows); });
    lastRow = Value();
    rowTiles(iv, mStart, mStop, nFull, nEnd, kb, kEnd);
  }

  /// Copies the panel of b at n0, [kb, kEnd): a transpose, `width` rows of
  /// b, each a vector along k, become `width` vectors along n
  /// (vector.transpose, lowered to shuffles), stored in order; the last
  /// k % width elements one by one.
  void packPanel(ArrayRef<Value> iv, Value panels, Value panel, Value n0,
                 Value kb, Value kEnd) {
    int64_t w = tiles.outerVectors * width;
    Value kMain = wholeSteps(kb, kEnd, width);
    forLoop(kb, kMain, cst(width), [&](Value kk) {
      Value k0 = arith::SubIOp::create(b, loc, kk, kb);
      for (int64_t jv = 0; jv < tiles.outerVectors; ++jv)
        storeTransposed(panels, panel, k0, jv, [&](int64_t r) {
          SmallVector<Value> p(iv);
          p[*c.n] = add(n0, jv * width + r);
          p[c.k] = kk;
          return loadVector(c.b, p);
        });
    });
    forLoop(kMain, kEnd, cst(1), [&](Value kk) {
      forLoop(cst(0), cst(w), cst(1), [&](Value j) {
        SmallVector<Value> p(iv);
        p[*c.n] = add(n0, j);
        p[c.k] = kk;
        memref::StoreOp::create(
            b, loc, loadScalar(c.b, p), panels,
            ValueRange{panel, arith::SubIOp::create(b, loc, kk, kb), j});
      });
    });
  }
  /// The same for bf16 pairs: the same transpose of 32-bit lanes, each a
  /// pair of k of a row of b ([kb, kEnd) is whole steps of 2 x width).
  void packPairs(ArrayRef<Value> iv, Value panels, Value panel, Value n0,
                 Value kb, Value kEnd) {
    forLoop(kb, kEnd, cst(2 * width), [&](Value kk) {
      Value k0 = arith::DivUIOp::create(
          b, loc, arith::SubIOp::create(b, loc, kk, kb), cst(2));
      for (int64_t jv = 0; jv < tiles.outerVectors; ++jv)
        storeTransposed(panels, panel, k0, jv, [&](int64_t r) -> Value {
          SmallVector<Value> p(iv);
          p[*c.n] = add(n0, jv * width + r);
          p[c.k] = kk;
          return vector::BitCastOp::create(b, loc, vecType, loadPairs(c.b, p));
        });
    });
  }
  /// Stores the transpose of the square whose row r is `row(r)` at
  /// panels[panel][k0 + l][jv * width ..] for its row l.
  void storeTransposed(Value panels, Value panel, Value k0, int64_t jv,
                       function_ref<Value(int64_t)> row) {
    SmallVector<Value> cols = transpose(row);
    for (int64_t l = 0; l < width; ++l)
      vector::StoreOp::create(b, loc, cols[l], panels,
                              ValueRange{panel, add(k0, l), cst(jv * width)});
  }
  /// The columns of the square whose row r is `row(r)`. With 8 x f32 (AVX)
  /// x86vector's 24-instruction sequence (unpacks, shuffles, blends, lane
  /// permutes): the generic lowering of an 8 x 8 vector.transpose is one
  /// 64-lane shuffle, which LLVM splits lane by lane. Other squares as
  /// vector.transpose (16 x 16 lowers to its own shuffle sequence).
  SmallVector<Value> transpose(function_ref<Value(int64_t)> row) {
    SmallVector<Value> rows;
    for (int64_t r = 0; r < width; ++r)
      rows.push_back(row(r));
    if (width == 8 && accType.isF32()) {
      ImplicitLocOpBuilder ib(loc, b);
      x86vector::avx2::transpose8x8xf32(ib, rows);
      return rows;
    }
    VectorType square = VectorType::get({width, width}, accType);
    Value square0 = arith::ConstantOp::create(
        b, loc, square, DenseElementsAttr::get(square, b.getZeroAttr(accType)));
    for (int64_t r = 0; r < width; ++r)
      square0 = vector::InsertOp::create(b, loc, rows[r], square0,
                                         ArrayRef<int64_t>{r});
    Value t =
        vector::TransposeOp::create(b, loc, square0, ArrayRef<int64_t>{1, 0});
    SmallVector<Value> cols;
    for (int64_t l = 0; l < width; ++l)
      cols.push_back(
          vector::ExtractOp::create(b, loc, t, ArrayRef<int64_t>{l}));
    return cols;
  }

  /// The parallel loop's step over n: a block of `nBlock` columns, or on
  /// the dot path along a long reduction with at most two row tiles (a
  /// decode step's rows, an expert's of one), one tile of columns. Such a
  /// contraction streams each row of b once or twice and gains little from
  /// keeping a block of it in cache for other row tiles; in tiles the
  /// threads get shares within a tile of each other (k and v's 512 columns
  /// made 11 blocks of 48, 6 for one thread and 4.7 for the other).
  /// Measured on the bench model (2 threads, AVX2, medians of 5-7
  /// alternated runs): 1-stream decode steps 4.5% faster, f32 and bf16;
  /// 8-stream steps, whose linears have 8 rows, 4.5% (f32) and 6% (bf16).
  Value nStep(bool dot, int64_t nBlock) {
    if (!dot || !c.m || !longReduction() || getConstantIntValue(sizes[*c.m]))
      return cst(nBlock);
    Value few = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule,
                                      sizes[*c.m], cst(2 * tiles.dotRows));
    return arith::SelectOp::create(
        b, loc, few, cst(tiles.dotRows * tiles.dotCols), cst(nBlock));
  }

  /// Columns of b per dot block (an n block of dot tiles).
  int64_t dotBlock() const { return kDotBlockTiles * tiles.dotCols; }

  /// Columns of a dot tile of `rows` rows. Along a long reduction (a
  /// weight's rows), fewer rows take more columns (as many accumulators as
  /// a whole tile, a divisor of the n block), so that a decode step's row
  /// streams more rows of b at once: 1 x 16 measured 7% faster 1-stream
  /// bf16 decode steps than 1 x 8, and that than 1 x 4. Short ones
  /// (attention's head_dim) keep the tile's columns: more lane reductions
  /// per product measured slower there.
  int64_t dotColumns(int64_t rows) {
    if (!longReduction())
      return tiles.dotCols;
    int64_t block = dotBlock();
    int64_t cols =
        std::max(tiles.dotCols, tiles.dotRows * tiles.dotCols / rows);
    while (block % cols)
      --cols;
    return cols;
  }

  void colTiles(ArrayRef<Value> iv, Value m0, int64_t rows, Value nb,
                Value nEnd, Value kb, Value kEnd) {
    if (!c.n) {
      if (c.kind == TileKind::Dot)
        dotTile(iv, m0, rows, Value(), 1, kb, kEnd);
      else
        scalarTile(iv, m0, rows, Value(), kb, kEnd);
      return;
    }
    if (c.kind == TileKind::Dot) {
      int64_t cols = dotColumns(rows);
      Value nFull = wholeSteps(nb, nEnd, cols);
      forLoop(nb, nFull, cst(cols),
              [&](Value n0) { dotTile(iv, m0, rows, n0, cols, kb, kEnd); });
      forLoop(nFull, nEnd, cst(1),
              [&](Value n0) { dotTile(iv, m0, rows, n0, 1, kb, kEnd); });
      return;
    }
    int64_t tileWidth = tiles.outerVectors * width;
    Value nFull = wholeSteps(nb, nEnd, tileWidth);
    forLoop(nb, nFull, cst(tileWidth), [&](Value n0) {
      outerTile(iv, m0, rows, n0, tiles.outerVectors, kb, kEnd);
    });
    Value nVec = wholeSteps(nFull, nEnd, width);
    forLoop(nFull, nVec, cst(width),
            [&](Value n0) { outerTile(iv, m0, rows, n0, 1, kb, kEnd); });
    forLoop(nVec, nEnd, cst(1),
            [&](Value n0) { scalarTile(iv, m0, rows, n0, kb, kEnd); });
  }

  /// rows x cols outputs, each a vector accumulator along k, reduced across
  /// lanes once; the last k % width elements in scalars. With bf16 pairs,
  /// each step takes 2 x width of k into the dot and the scalars the rest.
  void dotTile(ArrayRef<Value> iv, Value m0, int64_t rows, Value n0,
               int64_t cols, Value kb, Value kEnd) {
    Value zero = arith::ConstantOp::create(
        b, loc, vecType,
        DenseElementsAttr::get(vecType, b.getZeroAttr(accType)));
    int64_t step = rounded ? 2 * width : width;
    auto load = [&](OpOperand *o, ArrayRef<Value> p) {
      return rounded ? loadPairs(o, p) : loadVector(o, p);
    };
    Value kMain = wholeSteps(kb, kEnd, step);
    SmallVector<Value> init(rows * cols, zero);
    auto loop = scf::ForOp::create(
        b, loc, kb, kMain, cst(step), init,
        [&](OpBuilder &, Location, Value kk, ValueRange accs) {
          SmallVector<Value> as, bs, next;
          for (int64_t i = 0; i < rows; ++i) {
            SmallVector<Value> p = at(iv, m0, i, n0, 0);
            p[c.k] = kk;
            as.push_back(load(c.a, p));
          }
          for (int64_t j = 0; j < cols; ++j) {
            SmallVector<Value> p = at(iv, m0, 0, n0, j);
            p[c.k] = kk;
            bs.push_back(load(c.b, p));
          }
          if (streamsB() && prefetches())
            prefetchAhead(iv, m0, n0, cols, kk);
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
              next.push_back(accumulate(as[i], bs[j], accs[i * cols + j]));
          scf::YieldOp::create(b, loc, next);
        });
    SmallVector<Value> sums;
    for (Value acc : loop.getResults())
      sums.push_back(vector::ReductionOp::create(
          b, loc, vector::CombiningKind::ADD, acc,
          arith::FastMathFlags::reassoc | arith::FastMathFlags::contract));
    auto tail = scf::ForOp::create(
        b, loc, kMain, kEnd, cst(1), sums,
        [&](OpBuilder &, Location, Value kk, ValueRange accs) {
          SmallVector<Value> next;
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
              SmallVector<Value> p = at(iv, m0, i, n0, j);
              p[c.k] = kk;
              next.push_back(multiplyAdd(loadScalar(c.a, p), loadScalar(c.b, p),
                                         accs[i * cols + j]));
            }
          scf::YieldOp::create(b, loc, next);
        });
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        SmallVector<Value> p = at(iv, m0, i, n0, j);
        SmallVector<Value> idx = indices(c.out, p);
        Value old = memref::LoadOp::create(b, loc, c.out->get(), idx);
        Value sum =
            arith::AddFOp::create(b, loc, old, tail.getResult(i * cols + j));
        memref::StoreOp::create(b, loc, sum, c.out->get(), idx);
      }
  }

  /// Whether the reduction is static and at least kWideMinK long (a
  /// weight's rows, not attention's head_dim).
  bool longReduction() {
    std::optional<int64_t> k = getConstantIntValue(sizes[c.k]);
    return k && *k >= kWideMinK;
  }
  /// Whether the dot tiles stream b from memory: along a long reduction,
  /// with an n dim.
  bool streamsB() { return c.n && longReduction(); }
  /// Whether the dot tiles prefetch b's rows ahead: for b narrower than the
  /// accumulator (bf16 weights) only. An f32 row of 1024 is 4 KiB, long
  /// enough for the hardware prefetcher, and the prefetches then only take
  /// load slots: 1-stream f32 decode steps of the bench model measured
  /// 16.2 ms with them and 12.8 ms without (2 threads, AVX2, medians of 7
  /// alternated runs; 8 streams and prefill alike either way). With
  /// AVX-512 too: 15.6 ms without, 18.6 ms with them one tile ahead.
  bool prefetches() {
    return elementType(c.b).getIntOrFloatBitWidth() < accType.getWidth();
  }
  /// Prefetches b's rows `kPrefetchTiles` tiles of `cols` past the tile at
  /// n0, at the same k: each row of b is read once, a short stream (2 KiB
  /// of a bf16 row of 1024), and the hardware prefetcher only catches up
  /// with a stream after its first lines. Asking for the rows the next
  /// tiles read while this one computes keeps the memory busy: 1-stream
  /// bf16 decode steps ~14 -> ~11 ms, 8 streams ~55 -> ~42 ms (the bench
  /// model, 2 threads, AVX2). Past the last row the address is only a
  /// hint (a prefetch never faults).
  void prefetchAhead(ArrayRef<Value> iv, Value m0, Value n0, int64_t cols,
                     Value kk) {
    for (int64_t j = 0; j < cols; ++j) {
      SmallVector<Value> p = at(iv, m0, 0, n0, j + kPrefetchTiles * cols);
      p[c.k] = kk;
      memref::PrefetchOp::create(b, loc, memrefOf(c.b), indices(c.b, p),
                                 /*isWrite=*/false, /*localityHint=*/3,
                                 /*isDataCache=*/true);
    }
  }

  /// rows x (vectors * width) outputs held in registers over [kb, kEnd):
  /// per k, `vectors` loads of b and one broadcast of a per row. With
  /// `pairs`, per pair of k: `loadB` gives pairs of b (packed) and a's pair
  /// is broadcast into the dot.
  void outerTile(ArrayRef<Value> iv, Value m0, int64_t rows, Value n0,
                 int64_t vectors, Value kb, Value kEnd,
                 function_ref<Value(Value, int64_t)> loadB = {},
                 bool pairs = false) {
    SmallVector<Value> init;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < vectors; ++j)
        init.push_back(vector::LoadOp::create(
            b, loc, vecType, c.out->get(),
            indices(c.out, at(iv, m0, i, n0, j * width))));
    auto loop = scf::ForOp::create(
        b, loc, kb, kEnd, cst(pairs ? 2 : 1), init,
        [&](OpBuilder &, Location, Value kk, ValueRange accs) {
          SmallVector<Value> bs, next;
          for (int64_t j = 0; j < vectors; ++j) {
            if (loadB) {
              bs.push_back(loadB(kk, j));
              continue;
            }
            SmallVector<Value> p = at(iv, m0, 0, n0, j * width);
            p[c.k] = kk;
            bs.push_back(loadVector(c.b, p));
          }
          for (int64_t i = 0; i < rows; ++i) {
            SmallVector<Value> p = at(iv, m0, i, n0, 0);
            p[c.k] = kk;
            Value a = pairs ? broadcastPair(c.a, p)
                            : vector::BroadcastOp::create(b, loc, vecType,
                                                          loadScalar(c.a, p));
            for (int64_t j = 0; j < vectors; ++j)
              next.push_back(accumulate(a, bs[j], accs[i * vectors + j]));
          }
          scf::YieldOp::create(b, loc, next);
        });
    for (int64_t i = 0; i < rows; ++i) {
      OpBuilder::InsertionGuard guard(b);
      if (lastRow && i > 0) {
        Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                                             add(m0, i), lastRow);
        b.setInsertionPointToStart(
            scf::IfOp::create(b, loc, inside).thenBlock());
      }
      for (int64_t j = 0; j < vectors; ++j)
        vector::StoreOp::create(b, loc, loop.getResult(i * vectors + j),
                                c.out->get(),
                                indices(c.out, at(iv, m0, i, n0, j * width)));
    }
  }

  /// rows outputs of one column at n0, in scalars.
  void scalarTile(ArrayRef<Value> iv, Value m0, int64_t rows, Value n0,
                  Value kb, Value kEnd) {
    SmallVector<Value> init;
    for (int64_t i = 0; i < rows; ++i)
      init.push_back(memref::LoadOp::create(
          b, loc, c.out->get(), indices(c.out, at(iv, m0, i, n0, 0))));
    auto loop = scf::ForOp::create(
        b, loc, kb, kEnd, cst(1), init,
        [&](OpBuilder &, Location, Value kk, ValueRange accs) {
          SmallVector<Value> next;
          for (int64_t i = 0; i < rows; ++i) {
            SmallVector<Value> p = at(iv, m0, i, n0, 0);
            p[c.k] = kk;
            next.push_back(
                multiplyAdd(loadScalar(c.a, p), loadScalar(c.b, p), accs[i]));
          }
          scf::YieldOp::create(b, loc, next);
        });
    for (int64_t i = 0; i < rows; ++i)
      memref::StoreOp::create(b, loc, loop.getResult(i), c.out->get(),
                              indices(c.out, at(iv, m0, i, n0, 0)));
  }

  Value multiplyAdd(Value x, Value y, Value acc) {
    auto fm = arith::FastMathFlags::contract;
    Value p = arith::MulFOp::create(b, loc, x, y, fm);
    return arith::AddFOp::create(b, loc, acc, p, fm);
  }
};

struct MFLinalgContractionKernelsPass
    : public meshfold::impl::MFLinalgContractionKernelsPassBase<
          MFLinalgContractionKernelsPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<Contraction> found;
    getOperation().walk([&](linalg::GenericOp op) {
      if (std::optional<Contraction> c = match(op))
        found.push_back(*c);
    });
    for (Contraction &c : found) {
      OpBuilder b(c.op);
      KernelEmitter(c, b, vectorBits, parallel, batchInvariant, bf16Dot).emit();
      c.op.erase();
    }
  }
};
} // namespace
