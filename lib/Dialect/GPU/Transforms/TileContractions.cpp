//===- TileContractions.cpp - contractions as block tiles of threads ------===//
//
// Each contraction `linalg.generic` on buffers (a linear layer, the LM head,
// the experts' products, attention's products where they are plain
// contractions) becomes the loop nest of a classic shared-memory GEMM
// kernel, written as phases of a block's threads: per block of the output,
// the threads stage a slab of each operand in block-local buffers, then
// each thread accumulates its register tile from them; the accumulators of
// a thread live in a buffer indexed by the thread (registers on the
// device). `mf-gpu-phases-to-launch` turns such a nest into one kernel with
// workgroup memory and barriers; run as it is, on the CPU, the phases give
// the same result (`--gpu-loops-on-cpu`).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Phases.h"
#include "meshfold/Dialect/Linalg/Transforms/Contraction.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"

#include "llvm/Support/MathExtras.h"

#define DEBUG_TYPE "mf-gpu-tile-contractions"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUTILECONTRACTIONSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {
/// Each thread's register tile (rows x cols of the output) and the slab of
/// the reduction staged per step.
constexpr int64_t kTileRows = 4, kTileCols = 4, kSlabK = 16;

/// The threads of a block as a tx x ty grid (tx >= ty) and the block tile
/// they cover: bm = ty * kTileRows rows, bn = tx * kTileCols columns.
struct Geometry {
  int64_t threads, tx, ty, bm, bn;
  explicit Geometry(int64_t threads) : threads(threads) {
    unsigned log = llvm::Log2_64(threads);
    tx = int64_t(1) << ((log + 1) / 2);
    ty = threads / tx;
    bm = ty * kTileRows;
    bn = tx * kTileCols;
  }
};

class BlockTileEmitter {
public:
  BlockTileEmitter(const ContractionMatch &c, int64_t threads, OpBuilder &b)
      : c(c), g(threads), b(b), loc(c.op.getLoc()) {
    a = c.in0;
    bOp = c.in1;
    m = c.innermostOwnDim(a, bOp);
    n = c.innermostOwnDim(bOp, a);
    for (AffineExpr e : c.op.getMatchingIndexingMap(c.out).getResults()) {
      unsigned d = cast<AffineDimExpr>(e).getPosition();
      if (d != m && d != n)
        outer.push_back(d);
    }
    accType = cast<FloatType>(
        cast<MemRefType>(c.out->get().getType()).getElementType());
    for (Range r :
         cast<linalg::LinalgOp>(c.op.getOperation()).createLoopRanges(b, loc))
      sizes.push_back(getValueOrCreateConstantIndexOp(b, loc, r.size));
  }

  void emit() {
    Value rows = m ? sizes[*m] : cst(1), cols = n ? sizes[*n] : cst(1);
    SmallVector<Value> lbs, ubs, steps;
    for (unsigned d : outer) {
      lbs.push_back(cst(0));
      ubs.push_back(sizes[d]);
      steps.push_back(cst(1));
    }
    for (auto [extent, step] : {std::pair(rows, g.bm), std::pair(cols, g.bn)}) {
      lbs.push_back(cst(0));
      ubs.push_back(extent);
      steps.push_back(cst(step));
    }
    auto [blocks, ivs] = createBlockLoop(b, loc, lbs, ubs, steps, g.threads);
    OpBuilder::InsertionGuard guard(b);
    // The body of an scf.parallel is an allocation scope: the block's
    // buffers live for one block.
    b.setInsertionPointToStart(blocks.getBody());

    SmallVector<Value> iv(sizes.size());
    for (auto [d, v] : llvm::zip(outer, ivs))
      iv[d] = v;
    Value m0 = ivs[outer.size()], n0 = ivs[outer.size() + 1];

    auto slab = [&](int64_t extent) {
      return memref::AllocaOp::create(
          b, loc, MemRefType::get({kSlabK, extent}, accType));
    };
    Value slabA = slab(g.bm), slabB = slab(g.bn);
    auto accs = memref::AllocaOp::create(
        b, loc, MemRefType::get({g.threads, kTileRows, kTileCols}, accType));
    accs->setAttr(kPrivateAttrName, b.getUnitAttr());

    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(accType));
    threadPhase([&](Value t) {
      for (int64_t i = 0; i < kTileRows; ++i)
        for (int64_t j = 0; j < kTileCols; ++j)
          memref::StoreOp::create(b, loc, zero, accs,
                                  ValueRange{t, cst(i), cst(j)});
    });
    auto kLoop = scf::ForOp::create(b, loc, cst(0), sizes[c.k], cst(kSlabK));
    {
      OpBuilder::InsertionGuard inLoop(b);
      b.setInsertionPointToStart(kLoop.getBody());
      Value k0 = kLoop.getInductionVar();
      threadPhase([&](Value t) {
        stage(a, m, g.bm, slabA, iv, m0, rows, k0, t);
        stage(bOp, n, g.bn, slabB, iv, n0, cols, k0, t);
      });
      threadPhase([&](Value t) { accumulate(slabA, slabB, accs, t); });
    }
    threadPhase([&](Value t) { store(accs, iv, m0, rows, n0, cols, t); });
  }

private:
  const ContractionMatch &c;
  Geometry g;
  OpBuilder &b;
  Location loc;
  OpOperand *a, *bOp;
  std::optional<unsigned> m, n;
  SmallVector<unsigned> outer;
  FloatType accType;
  SmallVector<Value> sizes;

  Value cst(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value less(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, y);
  }

  void threadPhase(function_ref<void(Value)> body) {
    auto phase =
        scf::ParallelOp::create(b, loc, cst(0), cst(g.threads), cst(1));
    phase->setAttr(kThreadPhaseAttrName, b.getUnitAttr());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(phase.getBody());
    body(phase.getInductionVars()[0]);
  }

  /// Copies the [kSlabK, extent] slab of `operand` at (k0, r0) into `slab`,
  /// zero outside the operand: element e of the slab goes to thread
  /// e % threads, so consecutive threads read consecutive addresses of the
  /// operand's contiguous dim.
  void stage(OpOperand *operand, std::optional<unsigned> rowDim, int64_t extent,
             Value slab, ArrayRef<Value> blockIv, Value r0, Value rowsEnd,
             Value k0, Value t) {
    bool kContiguous = c.innermost(operand) == c.k;
    for (int64_t e0 = 0; e0 < kSlabK * extent; e0 += g.threads) {
      Value e = add(t, cst(e0));
      Value kk, rr;
      if (kContiguous) {
        kk = arith::RemUIOp::create(b, loc, e, cst(kSlabK));
        rr = arith::DivUIOp::create(b, loc, e, cst(kSlabK));
      } else {
        rr = arith::RemUIOp::create(b, loc, e, cst(extent));
        kk = arith::DivUIOp::create(b, loc, e, cst(extent));
      }
      Value gk = add(k0, kk), gr = add(r0, rr);
      Value inside = arith::AndIOp::create(b, loc, less(gk, sizes[c.k]),
                                           less(gr, rowsEnd));
      SmallVector<Value> iv(blockIv);
      iv[c.k] = gk;
      if (rowDim)
        iv[*rowDim] = gr;
      auto load = scf::IfOp::create(
          b, loc, inside,
          [&](OpBuilder &, Location) {
            Value v = memref::LoadOp::create(b, loc, operand->get(),
                                             c.indices(operand, iv, &b));
            if (v.getType() != accType)
              v = arith::ExtFOp::create(b, loc, accType, v);
            scf::YieldOp::create(b, loc, v);
          },
          [&](OpBuilder &, Location) {
            scf::YieldOp::create(b, loc,
                                 ValueRange{arith::ConstantOp::create(
                                     b, loc, b.getZeroAttr(accType))});
          });
      memref::StoreOp::create(b, loc, load.getResult(0), slab,
                              ValueRange{kk, rr});
    }
  }

  /// The thread's rows are ty + i * ty-count, its columns tx + j * tx-count:
  /// a warp's threads read consecutive slab elements.
  std::pair<Value, Value> threadCoords(Value t) {
    return {arith::DivUIOp::create(b, loc, t, cst(g.tx)),
            arith::RemUIOp::create(b, loc, t, cst(g.tx))};
  }

  void accumulate(Value slabA, Value slabB, Value accs, Value t) {
    auto [ty, tx] = threadCoords(t);
    SmallVector<Value> init;
    for (int64_t i = 0; i < kTileRows; ++i)
      for (int64_t j = 0; j < kTileCols; ++j)
        init.push_back(memref::LoadOp::create(b, loc, accs,
                                              ValueRange{t, cst(i), cst(j)}));
    auto loop = scf::ForOp::create(
        b, loc, cst(0), cst(kSlabK), cst(1), init,
        [&](OpBuilder &, Location, Value kk, ValueRange acc) {
          SmallVector<Value> as, bs, next;
          for (int64_t i = 0; i < kTileRows; ++i)
            as.push_back(memref::LoadOp::create(
                b, loc, slabA, ValueRange{kk, add(ty, cst(i * g.ty))}));
          for (int64_t j = 0; j < kTileCols; ++j)
            bs.push_back(memref::LoadOp::create(
                b, loc, slabB, ValueRange{kk, add(tx, cst(j * g.tx))}));
          auto fm = arith::FastMathFlags::contract;
          for (int64_t i = 0; i < kTileRows; ++i)
            for (int64_t j = 0; j < kTileCols; ++j) {
              Value p = arith::MulFOp::create(b, loc, as[i], bs[j], fm);
              next.push_back(
                  arith::AddFOp::create(b, loc, acc[i * kTileCols + j], p, fm));
            }
          scf::YieldOp::create(b, loc, next);
        });
    for (int64_t i = 0; i < kTileRows; ++i)
      for (int64_t j = 0; j < kTileCols; ++j)
        memref::StoreOp::create(b, loc, loop.getResult(i * kTileCols + j), accs,
                                ValueRange{t, cst(i), cst(j)});
  }

  /// Adds each accumulator inside the output to its element.
  void store(Value accs, ArrayRef<Value> blockIv, Value m0, Value rows,
             Value n0, Value cols, Value t) {
    auto [ty, tx] = threadCoords(t);
    for (int64_t i = 0; i < kTileRows; ++i)
      for (int64_t j = 0; j < kTileCols; ++j) {
        Value gm = add(m0, add(ty, cst(i * g.ty)));
        Value gn = add(n0, add(tx, cst(j * g.tx)));
        Value inside =
            arith::AndIOp::create(b, loc, less(gm, rows), less(gn, cols));
        auto ifOp = scf::IfOp::create(b, loc, inside, /*withElse=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        SmallVector<Value> iv(blockIv);
        if (m)
          iv[*m] = gm;
        if (n)
          iv[*n] = gn;
        SmallVector<Value> idx = c.indices(c.out, iv);
        Value old = memref::LoadOp::create(b, loc, c.out->get(), idx);
        Value acc =
            memref::LoadOp::create(b, loc, accs, ValueRange{t, cst(i), cst(j)});
        Value sum = arith::AddFOp::create(b, loc, old, acc);
        memref::StoreOp::create(b, loc, sum, c.out->get(), idx);
      }
  }
};

struct MFGPUTileContractionsPass
    : public meshfold::impl::MFGPUTileContractionsPassBase<
          MFGPUTileContractionsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(checkThreadsPerBlock(getOperation(), threadsPerBlock)))
      return signalPassFailure();
    SmallVector<ContractionMatch> found;
    getOperation().walk([&](linalg::GenericOp op) {
      // A contraction inside a loop nest of its own (a lowering's tile
      // loop) stays a per-element kernel: block tiles go at the top level.
      if (op->getParentOfType<scf::ParallelOp>() ||
          op->getParentOfType<scf::ForallOp>())
        return;
      if (std::optional<ContractionMatch> c =
              matchContraction(op, /*affineInputs=*/true))
        found.push_back(*c);
    });
    for (ContractionMatch &c : found) {
      OpBuilder b(c.op);
      BlockTileEmitter(c, threadsPerBlock, b).emit();
      c.op.erase();
    }
  }
};
} // namespace
