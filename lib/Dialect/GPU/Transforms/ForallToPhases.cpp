//===- ForallToPhases.cpp - an scf.forall as a block of thread phases -----===//
//
// A top-level `scf.forall` whose body is a small program over tiles (the
// fused attention: per head and query tile, an online softmax over key
// tiles) becomes a block loop of thread phases (Phases.h): each iteration is
// one block, the tile buffers the body allocates are the block's memory, and
// each linalg op or copy on them is a phase in which the block's threads
// share the op's parallel iterations (reductions sequential in the thread
// that owns the output element). Loops, branches and index arithmetic stay
// block code that every thread runs alike; a scalar the body reads back from
// a tile buffer (a bound of the positions) is read by every thread.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Phases.h"

#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/Support/MathExtras.h"

#define DEBUG_TYPE "mf-gpu-forall-to-phases"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUFORALLTOPHASESPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {

/// A constant upper bound (inclusive) of an index value: constants, min of
/// anything with a bound (tile sizes are `min(TILE, rest)`), select, and the
/// dims of buffers allocated with such sizes. (Upstream's
/// ValueBoundsConstraintSet finds no bound for `arith.minsi` in LLVM 22.)
std::optional<int64_t> upperBound(Value v) {
  if (std::optional<int64_t> c = getConstantIntValue(v))
    return *c;
  Operation *def = v.getDefiningOp();
  if (!def)
    return std::nullopt;
  if (isa<arith::MinSIOp, arith::MinUIOp>(def)) {
    std::optional<int64_t> best;
    for (Value operand : def->getOperands())
      if (std::optional<int64_t> u = upperBound(operand))
        best = best ? std::min(*best, *u) : *u;
    return best;
  }
  if (auto select = dyn_cast<arith::SelectOp>(def)) {
    std::optional<int64_t> t = upperBound(select.getTrueValue()),
                           f = upperBound(select.getFalseValue());
    if (t && f)
      return std::max(*t, *f);
    return std::nullopt;
  }
  if (auto dim = dyn_cast<memref::DimOp>(def)) {
    std::optional<int64_t> index = dim.getConstantIndex();
    auto type = dyn_cast<MemRefType>(dim.getSource().getType());
    if (!index || !type)
      return std::nullopt;
    if (!type.isDynamicDim(*index))
      return type.getDimSize(*index);
    if (auto alloc = dim.getSource().getDefiningOp<memref::AllocOp>())
      return upperBound(
          alloc.getDynamicSizes()[type.getDynamicDimIndex(*index)]);
    if (auto view =
            dim.getSource().getDefiningOp<memref::ReinterpretCastOp>()) {
      OpFoldResult size = view.getMixedSizes()[*index];
      if (std::optional<int64_t> c = getConstantIntValue(size))
        return *c;
      return upperBound(cast<Value>(size));
    }
  }
  return std::nullopt;
}

class PhaseBuilder {
public:
  PhaseBuilder(scf::ForallOp forall, int64_t threads)
      : forall(forall), threads(threads), rewriter(forall.getContext()),
        loc(forall.getLoc()) {}

  LogicalResult run() {
    if (!forall.getOutputs().empty())
      return forall.emitError("a forall with shared outputs (tensors) is not "
                              "a block of a kernel: bufferize first");
    rewriter.setInsertionPoint(forall);
    SmallVector<Value> lbs, ubs, steps;
    for (OpFoldResult f : forall.getMixedLowerBound())
      lbs.push_back(getValueOrCreateConstantIndexOp(rewriter, loc, f));
    for (OpFoldResult f : forall.getMixedUpperBound())
      ubs.push_back(getValueOrCreateConstantIndexOp(rewriter, loc, f));
    for (OpFoldResult f : forall.getMixedStep())
      steps.push_back(getValueOrCreateConstantIndexOp(rewriter, loc, f));
    SmallVector<Value> ivs;
    std::tie(blocks, ivs) =
        createBlockLoop(rewriter, loc, lbs, ubs, steps, threads);
    Block *body = blocks.getBody();
    // The forall's body, less its terminator, becomes the block's code.
    Block *from = forall.getBody();
    rewriter.eraseOp(from->getTerminator());
    body->getOperations().splice(body->getTerminator()->getIterator(),
                                 from->getOperations());
    for (auto [oldIv, newIv] : llvm::zip(forall.getInductionVars(), ivs))
      rewriter.replaceAllUsesWith(oldIv, newIv);
    rewriter.eraseOp(forall);

    // The ops of the block's code (not those inside a linalg op's body).
    SmallVector<Operation *> work;
    blocks.getBody()->walk<WalkOrder::PreOrder>([&](Operation *op) {
      work.push_back(op);
      return isa<linalg::LinalgOp>(op) ? WalkResult::skip()
                                       : WalkResult::advance();
    });
    for (Operation *op : work)
      if (failed(convert(op)))
        return failure();
    return success();
  }

private:
  scf::ForallOp forall;
  int64_t threads;
  IRRewriter rewriter;
  Location loc;
  scf::ParallelOp blocks;
  Operation *lastBuffer = nullptr;

  Value cst(int64_t v) {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  }

  LogicalResult convert(Operation *op) {
    if (auto alloc = dyn_cast<memref::AllocOp>(op))
      return blockBuffer(alloc);
    if (isa<memref::DeallocOp>(op)) {
      // The block's buffers live for the block.
      rewriter.eraseOp(op);
      return success();
    }
    if (auto copy = dyn_cast<memref::CopyOp>(op))
      return copyPhase(copy);
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
      if (!linalgOp.hasPureBufferSemantics())
        return op->emitError("a linalg op in a kernel block works on buffers");
      auto generic = dyn_cast<linalg::GenericOp>(op);
      if (!generic) {
        rewriter.setInsertionPoint(op);
        FailureOr<linalg::GenericOp> g =
            linalg::generalizeNamedOp(rewriter, linalgOp);
        if (failed(g))
          return op->emitError("cannot write this linalg op as a generic");
        generic = *g;
      }
      return genericPhase(generic);
    }
    return success();
  }

  /// A tile buffer: a buffer of its largest size at the top of the block,
  /// viewed at its size where it was allocated.
  LogicalResult blockBuffer(memref::AllocOp alloc) {
    MemRefType type = alloc.getType();
    if (!type.getLayout().isIdentity())
      return alloc.emitError("a tile buffer needs the identity layout");
    int64_t elements = 1;
    for (auto [d, size] : llvm::enumerate(type.getShape())) {
      int64_t bound = size;
      if (ShapedType::isDynamic(size)) {
        std::optional<int64_t> u =
            upperBound(alloc.getDynamicSizes()[type.getDynamicDimIndex(d)]);
        if (!u || *u < 0)
          return alloc.emitError("a tile buffer's size needs a constant "
                                 "bound, such as min(TILE, rest)");
        bound = *u;
      }
      elements *= std::max<int64_t>(bound, 1);
    }
    // At the top of the block, in the order of the allocations.
    if (lastBuffer)
      rewriter.setInsertionPointAfter(lastBuffer);
    else
      rewriter.setInsertionPointToStart(blocks.getBody());
    auto buffer = memref::AllocaOp::create(
        rewriter, alloc.getLoc(),
        MemRefType::get({elements}, type.getElementType()));
    lastBuffer = buffer;
    if (type.hasStaticShape() && type.getRank() == 1) {
      rewriter.replaceOp(alloc, buffer.getResult());
      return success();
    }
    rewriter.setInsertionPoint(alloc);
    SmallVector<OpFoldResult> sizes, strides(type.getRank());
    for (int64_t d = 0; d < type.getRank(); ++d)
      sizes.push_back(
          type.isDynamicDim(d)
              ? OpFoldResult(
                    alloc.getDynamicSizes()[type.getDynamicDimIndex(d)])
              : OpFoldResult(rewriter.getIndexAttr(type.getDimSize(d))));
    // Row-major strides: constants as long as the sizes inside are.
    OpFoldResult stride = rewriter.getIndexAttr(1);
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      strides[d] = stride;
      if (d == 0)
        break;
      std::optional<int64_t> a = getConstantIntValue(stride),
                             c = getConstantIntValue(sizes[d]);
      if (a && c) {
        stride = rewriter.getIndexAttr(*a * *c);
        continue;
      }
      stride =
          arith::MulIOp::create(
              rewriter, alloc.getLoc(),
              getValueOrCreateConstantIndexOp(rewriter, alloc.getLoc(), stride),
              getValueOrCreateConstantIndexOp(rewriter, alloc.getLoc(),
                                              sizes[d]))
              .getResult();
    }
    auto view = memref::ReinterpretCastOp::create(
        rewriter, alloc.getLoc(), type, buffer, rewriter.getIndexAttr(0), sizes,
        strides);
    rewriter.replaceOp(alloc, view.getResult());
    return success();
  }

  /// A phase in which thread t takes iterations t, t + THREADS, ... of a
  /// space of `total` points, each given as its linear index.
  void phase(Location at, Value total, function_ref<void(Value)> point) {
    auto p =
        scf::ParallelOp::create(rewriter, at, cst(0), cst(threads), cst(1));
    p->setAttr(kThreadPhaseAttrName, rewriter.getUnitAttr());
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(p.getBody());
    auto loop = scf::ForOp::create(rewriter, at, p.getInductionVars()[0], total,
                                   cst(threads));
    rewriter.setInsertionPointToStart(loop.getBody());
    point(loop.getInductionVar());
  }

  Value product(Location at, ArrayRef<Value> sizes) {
    Value total = cst(1);
    for (Value s : sizes)
      total = arith::MulIOp::create(rewriter, at, total, s);
    return total;
  }

  LogicalResult copyPhase(memref::CopyOp copy) {
    rewriter.setInsertionPoint(copy);
    Location at = copy.getLoc();
    auto type = cast<MemRefType>(copy.getTarget().getType());
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      sizes.push_back(memref::DimOp::create(rewriter, at, copy.getTarget(), d));
    phase(at, product(at, sizes), [&](Value lin) {
      SmallVector<Value> idx = delinearizeIndex(rewriter, at, lin, sizes);
      Value v = memref::LoadOp::create(rewriter, at, copy.getSource(), idx);
      memref::StoreOp::create(rewriter, at, v, copy.getTarget(), idx);
    });
    rewriter.eraseOp(copy);
    return success();
  }

  SmallVector<Value> indices(AffineMap map, ArrayRef<Value> iv, Location at) {
    return llvm::to_vector(*affine::expandAffineMap(rewriter, at, map, iv));
  }

  /// The op's parallel points shared among the threads; its reduction dims
  /// a sequential loop nest in the thread that owns the point, carrying the
  /// outputs.
  LogicalResult genericPhase(linalg::GenericOp op) {
    rewriter.setInsertionPoint(op);
    Location at = op.getLoc();
    SmallVector<Value> sizes;
    for (Range r : cast<linalg::LinalgOp>(op.getOperation())
                       .createLoopRanges(rewriter, at))
      sizes.push_back(getValueOrCreateConstantIndexOp(rewriter, at, r.size));
    SmallVector<unsigned> par, red;
    for (auto [d, it] : llvm::enumerate(op.getIteratorTypesArray()))
      (it == utils::IteratorType::parallel ? par : red).push_back(d);
    SmallVector<Value> parSizes;
    for (unsigned d : par)
      parSizes.push_back(sizes[d]);
    Block &body = op.getRegion().front();
    unsigned numInputs = op.getNumDpsInputs();

    phase(at, product(at, parSizes), [&](Value lin) {
      SmallVector<Value> iv(sizes.size(), cst(0));
      for (auto [d, v] :
           llvm::zip(par, delinearizeIndex(rewriter, at, lin, parSizes)))
        iv[d] = v;
      // An output the body never reads (a fill's) is not loaded, unless a
      // reduction carries it.
      SmallVector<Value> outs;
      for (OpOperand &init : op.getDpsInitsMutable()) {
        BlockArgument arg = op.getMatchingBlockArgument(&init);
        outs.push_back(
            arg.use_empty() && red.empty()
                ? Value()
                : memref::LoadOp::create(
                      rewriter, at, init.get(),
                      indices(op.getMatchingIndexingMap(&init), iv, at))
                      .getResult());
      }
      // One application of the body at the point iv, outputs `acc`.
      auto apply = [&](ArrayRef<Value> point, ValueRange acc) {
        IRMapping map;
        for (unsigned i = 0; i < numInputs; ++i) {
          OpOperand *in = op.getDpsInputOperand(i);
          if (body.getArgument(i).use_empty())
            continue;
          // A scalar input (a fill's value) is the value itself.
          Value v = isa<MemRefType>(in->get().getType())
                        ? memref::LoadOp::create(
                              rewriter, at, in->get(),
                              indices(op.getMatchingIndexingMap(in), point, at))
                              .getResult()
                        : in->get();
          map.map(body.getArgument(i), v);
        }
        for (auto [arg, v] :
             llvm::zip(body.getArguments().drop_front(numInputs), acc))
          if (v)
            map.map(arg, v);
        for (Operation &inner : body.without_terminator()) {
          if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
            map.map(index.getResult(), point[index.getDim()]);
            continue;
          }
          rewriter.clone(inner, map);
        }
        SmallVector<Value> results;
        for (Value y : body.getTerminator()->getOperands())
          results.push_back(map.lookupOrDefault(y));
        return results;
      };
      SmallVector<Value> results;
      if (red.empty()) {
        results = apply(iv, outs);
      } else {
        // Nested loops over the reduction dims, the outputs carried.
        std::function<SmallVector<Value>(unsigned, SmallVector<Value>,
                                         ValueRange)>
            nest = [&](unsigned level, SmallVector<Value> point,
                       ValueRange acc) -> SmallVector<Value> {
          if (level == red.size())
            return apply(point, acc);
          auto loop = scf::ForOp::create(
              rewriter, at, cst(0), sizes[red[level]], cst(1), acc,
              [&](OpBuilder &, Location, Value r, ValueRange carried) {
                SmallVector<Value> inner(point);
                inner[red[level]] = r;
                scf::YieldOp::create(rewriter, at,
                                     nest(level + 1, inner, carried));
              });
          return SmallVector<Value>(loop.getResults());
        };
        results = nest(0, iv, outs);
      }
      for (auto [init, v] : llvm::zip(op.getDpsInitsMutable(), results))
        memref::StoreOp::create(
            rewriter, at, v, init.get(),
            indices(op.getMatchingIndexingMap(&init), iv, at));
    });
    rewriter.eraseOp(op);
    return success();
  }
};

struct MFGPUForallToPhasesPass
    : public meshfold::impl::MFGPUForallToPhasesPassBase<
          MFGPUForallToPhasesPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(checkThreadsPerBlock(getOperation(), threadsPerBlock)))
      return signalPassFailure();
    SmallVector<scf::ForallOp> foralls;
    getOperation().walk([&](scf::ForallOp op) {
      if (!op->getParentOfType<scf::ForallOp>() &&
          !op->getParentOfType<scf::ParallelOp>())
        foralls.push_back(op);
    });
    for (scf::ForallOp op : foralls)
      if (failed(PhaseBuilder(op, threadsPerBlock).run()))
        return signalPassFailure();
  }
};
} // namespace
