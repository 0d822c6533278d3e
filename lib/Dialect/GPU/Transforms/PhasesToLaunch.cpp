//===- PhasesToLaunch.cpp - thread phases to a kernel with barriers -------===//
//
// Turns each block loop nest written as phases of threads (Phases.h) into
// one `gpu.launch`: the block loop's iterations become the grid (one linear
// block id, delinearized), each thread phase the code of one thread
// followed by `gpu.barrier`, the block's buffers workgroup memory
// attributions and its per-thread buffers private attributions (registers
// once their indices are constants).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Phases.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define DEBUG_TYPE "mf-gpu-phases-to-launch"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUPHASESTOLAUNCHPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {

class LaunchBuilder {
public:
  LaunchBuilder(scf::ParallelOp blocks, int64_t threads)
      : blocks(blocks), threads(threads), b(blocks), loc(blocks.getLoc()) {}

  LogicalResult build() {
    Block &body = *blocks.getBody();

    // Attributions: the block's buffers, private ones without the thread
    // dim.
    SmallVector<Type> shared, own;
    SmallVector<memref::AllocaOp> sharedAllocs, ownAllocs;
    auto space = [&](gpu::AddressSpace s) {
      return gpu::AddressSpaceAttr::get(b.getContext(), s);
    };
    for (auto alloca : body.getOps<memref::AllocaOp>()) {
      MemRefType type = alloca.getType();
      if (!type.hasStaticShape() || !type.getLayout().isIdentity())
        return alloca.emitError("a block's buffer needs a static shape");
      if (alloca->hasAttr(kPrivateAttrName)) {
        if (type.getRank() < 1 || type.getDimSize(0) != threads)
          return alloca.emitError()
                 << "a private buffer's first dim is the thread (" << threads
                 << ")";
        ownAllocs.push_back(alloca);
        own.push_back(MemRefType::get(type.getShape().drop_front(),
                                      type.getElementType(), AffineMap(),
                                      space(gpu::AddressSpace::Private)));
      } else {
        sharedAllocs.push_back(alloca);
        shared.push_back(MemRefType::get(type.getShape(), type.getElementType(),
                                         AffineMap(),
                                         space(gpu::AddressSpace::Workgroup)));
      }
    }

    // Grid: every iteration of the block loop, skipped when there are none.
    SmallVector<Value> trips;
    Value total = cst(1);
    for (auto [lb, ub, step] :
         llvm::zip(blocks.getLowerBound(), blocks.getUpperBound(),
                   blocks.getStep())) {
      Value len = arith::SubIOp::create(b, loc, ub, lb);
      trips.push_back(arith::CeilDivSIOp::create(b, loc, len, step));
      total = arith::MulIOp::create(b, loc, total, trips.back());
    }
    Value any =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, total, cst(0));
    auto guard = scf::IfOp::create(b, loc, any, /*withElseRegion=*/false);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
    auto launch = gpu::LaunchOp::create(
        b, loc, total, cst(1), cst(1), cst(threads), cst(1), cst(1),
        /*dynamicSharedMemorySize=*/nullptr, /*asyncTokenType=*/nullptr,
        /*asyncDependencies=*/{}, shared, own);
    b.setInsertionPointToEnd(&launch.getBody().front());
    gpu::TerminatorOp::create(b, loc);
    b.setInsertionPointToStart(&launch.getBody().front());

    SmallVector<Value> coords =
        delinearizeIndex(b, loc, launch.getBlockIds().x, trips);
    for (auto [d, at] : llvm::enumerate(coords)) {
      Value iv = arith::AddIOp::create(
          b, loc, blocks.getLowerBound()[d],
          arith::MulIOp::create(b, loc, at, blocks.getStep()[d]));
      map.map(blocks.getInductionVars()[d], iv);
    }
    thread = launch.getThreadIds().x;
    // Other ops than loads and stores (views of a tile buffer) see a block
    // buffer in the generic address space, with the alloca's type; loads
    // and stores use the workgroup attribution itself (dropThreadIndex).
    for (auto [alloca, arg] :
         llvm::zip(sharedAllocs, launch.getWorkgroupAttributions()))
      map.map(alloca.getResult(),
              memref::MemorySpaceCastOp::create(b, loc, alloca.getType(), arg)
                  .getResult());
    for (auto [alloca, arg] :
         llvm::zip(ownAllocs, launch.getPrivateAttributions())) {
      map.map(alloca.getResult(), arg);
      privates.insert(arg);
    }
    if (failed(cloneBlockCode(body)))
      return failure();
    if (failed(dropThreadIndex(launch)))
      return failure();
    blocks.erase();
    return success();
  }

private:
  scf::ParallelOp blocks;
  int64_t threads;
  OpBuilder b;
  Location loc;
  IRMapping map;
  Value thread;
  llvm::SmallPtrSet<Value, 4> privates;

  Value cst(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

  /// The code every thread runs alike: the phases, uniform loops around
  /// them, and the side-effect-free ops that compute their bounds.
  LogicalResult cloneBlockCode(Block &block) {
    for (Operation &op : block.without_terminator()) {
      // The block's buffers, already attributions.
      if (isa<memref::AllocaOp>(op) && map.contains(op.getResult(0)))
        continue;
      if (auto phase = dyn_cast<scf::ParallelOp>(op);
          phase && phase->hasAttr(kThreadPhaseAttrName)) {
        std::optional<int64_t> lb =
            getConstantIntValue(phase.getLowerBound()[0]);
        std::optional<int64_t> ub =
            getConstantIntValue(phase.getUpperBound()[0]);
        std::optional<int64_t> step = getConstantIntValue(phase.getStep()[0]);
        if (phase.getNumLoops() != 1 || lb != 0 || ub != threads || step != 1)
          return phase.emitError() << "a thread phase runs over [0, " << threads
                                   << ") in steps of 1";
        map.map(phase.getInductionVars()[0], thread);
        for (Operation &inner : phase.getBody()->without_terminator())
          b.clone(inner, map);
        gpu::BarrierOp::create(b, phase.getLoc());
        continue;
      }
      if (auto loop = dyn_cast<scf::ForOp>(op)) {
        if (failed(cloneLoop(loop)))
          return failure();
        continue;
      }
      if (auto branch = dyn_cast<scf::IfOp>(op)) {
        if (failed(cloneBranch(branch)))
          return failure();
        continue;
      }
      // A value every thread reads (a scalar a phase wrote): no thread may
      // write the buffer again before all have read it.
      if (isa<memref::LoadOp>(op)) {
        b.clone(op, map);
        gpu::BarrierOp::create(b, op.getLoc());
        continue;
      }
      if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op))
        return op.emitError("outside a thread phase a block runs only "
                            "side-effect-free ops, loads, and loops and "
                            "branches of phases");
      b.clone(op, map);
    }
    return success();
  }

  /// A uniform loop around phases (every thread runs all its iterations).
  LogicalResult cloneLoop(scf::ForOp loop) {
    SmallVector<Value> inits;
    for (Value v : loop.getInitArgs())
      inits.push_back(map.lookupOrDefault(v));
    LogicalResult status = success();
    auto copy = scf::ForOp::create(
        b, loop.getLoc(), map.lookupOrDefault(loop.getLowerBound()),
        map.lookupOrDefault(loop.getUpperBound()),
        map.lookupOrDefault(loop.getStep()), inits,
        [&](OpBuilder &nb, Location l, Value iv, ValueRange args) {
          map.map(loop.getInductionVar(), iv);
          map.map(loop.getRegionIterArgs(), args);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          status = cloneBlockCode(*loop.getBody());
          b.clone(*loop.getBody()->getTerminator(), map);
        });
    map.map(loop.getResults(), copy.getResults());
    return status;
  }

  /// A uniform branch around phases (its condition is block code).
  LogicalResult cloneBranch(scf::IfOp branch) {
    bool hasElse = !branch.getElseRegion().empty();
    auto copy =
        scf::IfOp::create(b, branch.getLoc(), branch.getResultTypes(),
                          map.lookupOrDefault(branch.getCondition()), hasElse);
    for (auto [from, to] :
         {std::pair(&branch.getThenRegion(), &copy.getThenRegion()),
          std::pair(&branch.getElseRegion(), &copy.getElseRegion())}) {
      if (from->empty())
        continue;
      Block &dst = to->front();
      if (!dst.empty() && dst.back().hasTrait<OpTrait::IsTerminator>())
        dst.back().erase();
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(&dst);
      if (failed(cloneBlockCode(from->front())))
        return failure();
      b.clone(*from->front().getTerminator(), map);
    }
    map.map(branch.getResults(), copy.getResults());
    return success();
  }

  /// A private buffer's accesses lose their first index, the thread's own;
  /// a block buffer's loads and stores go to workgroup memory directly.
  LogicalResult dropThreadIndex(gpu::LaunchOp launch) {
    SmallVector<Operation *> accesses;
    launch.walk([&](Operation *op) {
      for (OpOperand &operand : op->getOpOperands()) {
        auto cast = operand.get().getDefiningOp<memref::MemorySpaceCastOp>();
        if (cast && isa<memref::LoadOp, memref::StoreOp>(op) &&
            llvm::is_contained(launch.getWorkgroupAttributions(),
                               cast.getSource()))
          operand.set(cast.getSource());
      }
      if (auto load = dyn_cast<memref::LoadOp>(op);
          load && privates.contains(load.getMemRef()))
        accesses.push_back(op);
      if (auto store = dyn_cast<memref::StoreOp>(op);
          store && privates.contains(store.getMemRef()))
        accesses.push_back(op);
    });
    for (Operation *op : accesses) {
      OpBuilder at(op);
      if (auto load = dyn_cast<memref::LoadOp>(op)) {
        if (load.getIndices().empty() || load.getIndices()[0] != thread)
          return load.emitError("a private buffer is indexed by its thread");
        Value v = memref::LoadOp::create(at, load.getLoc(), load.getMemRef(),
                                         load.getIndices().drop_front());
        load.replaceAllUsesWith(v);
        load.erase();
        continue;
      }
      auto store = cast<memref::StoreOp>(op);
      if (store.getIndices().empty() || store.getIndices()[0] != thread)
        return store.emitError("a private buffer is indexed by its thread");
      memref::StoreOp::create(at, store.getLoc(), store.getValue(),
                              store.getMemRef(),
                              store.getIndices().drop_front());
      store.erase();
    }
    return success();
  }
};

struct MFGPUPhasesToLaunchPass
    : public meshfold::impl::MFGPUPhasesToLaunchPassBase<
          MFGPUPhasesToLaunchPass> {
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> nests;
    getOperation().walk([&](scf::ParallelOp op) {
      if (op->hasAttr(kPhasesAttrName))
        nests.push_back(op);
    });
    for (scf::ParallelOp op : nests) {
      auto threads = op->getAttrOfType<IntegerAttr>(kPhasesAttrName);
      if (!threads || threads.getInt() < 1 || threads.getInt() > 1024) {
        op.emitError("'mf.gpu_phases' must be a thread count in [1, 1024]");
        return signalPassFailure();
      }
      if (op->getParentOfType<scf::ParallelOp>() ||
          op->getParentOfType<gpu::LaunchOp>()) {
        op.emitError("a block loop of thread phases must not be nested in "
                     "another parallel loop or kernel");
        return signalPassFailure();
      }
      if (failed(LaunchBuilder(op, threads.getInt()).build()))
        return signalPassFailure();
    }
  }
};
} // namespace
