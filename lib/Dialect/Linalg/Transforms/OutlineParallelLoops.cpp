//===- OutlineParallelLoops.cpp - one function per distinct loop nest -----===//
//
// The lowering emits every layer's kernels in place: a pipeline stage of n
// layers of one shape holds n copies of each parallel loop nest, and the
// OpenMP and LLVM conversions, LLVM's optimisation and its code generation
// then do the same work n times (most of a compile's time). Each outermost
// `scf.parallel` moves into a private function of its own; a nest equal to
// one already outlined calls that function instead.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

#define DEBUG_TYPE "mf-outline-parallel-loops"

namespace meshfold {
#define GEN_PASS_DEF_MFOUTLINEPARALLELLOOPSPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {

/// A hash of a function's type and body that ignores SSA names, symbol
/// names and locations: equal functions hash alike.
llvm::hash_code hashBody(func::FuncOp fn) {
  llvm::hash_code hash =
      llvm::hash_value(fn.getFunctionType().getAsOpaquePointer());
  fn.getBody().walk([&](Operation *op) {
    hash =
        llvm::hash_combine(hash, OperationEquivalence::computeHash(
                                     op, OperationEquivalence::ignoreHashValue,
                                     OperationEquivalence::ignoreHashValue,
                                     OperationEquivalence::IgnoreLocations));
  });
  return hash;
}

/// The outlined functions, by the hash of their bodies.
class KernelTable {
public:
  explicit KernelTable(ModuleOp module) : symbols(module) {}

  /// Names `fn` and adds it to the module, or erases it and returns the
  /// equal function outlined before.
  func::FuncOp intern(func::FuncOp fn) {
    SmallVector<func::FuncOp> &bucket = buckets[hashBody(fn)];
    for (func::FuncOp existing : bucket) {
      if (existing.getFunctionType() == fn.getFunctionType() &&
          OperationEquivalence::isRegionEquivalentTo(
              &existing.getBody(), &fn.getBody(),
              OperationEquivalence::IgnoreLocations)) {
        fn.erase();
        return existing;
      }
    }
    symbols.insert(fn); // Renamed if the name is taken.
    bucket.push_back(fn);
    return fn;
  }

private:
  SymbolTable symbols;
  llvm::DenseMap<llvm::hash_code, SmallVector<func::FuncOp>> buckets;
};

/// The values `loop` uses from above: its own operands and those its body
/// reads. Constants are returned apart, to be cloned rather than passed.
void splitCaptures(scf::ParallelOp loop, SmallVectorImpl<Value> &args,
                   SmallVectorImpl<Operation *> &constants) {
  llvm::SetVector<Value> used(loop->getOperands().begin(),
                              loop->getOperands().end());
  getUsedValuesDefinedAbove(loop->getRegions(), used);
  llvm::SetVector<Operation *> constantOps;
  for (Value value : used) {
    Operation *def = value.getDefiningOp();
    if (def && def->hasTrait<OpTrait::ConstantLike>())
      constantOps.insert(def);
    else
      args.push_back(value);
  }
  constants.assign(constantOps.begin(), constantOps.end());
}

/// Moves `loop` into a new private function (not yet in the module's
/// symbol table) and returns it with the values to call it with.
func::FuncOp outline(scf::ParallelOp loop, StringRef name,
                     SmallVectorImpl<Value> &args) {
  SmallVector<Operation *> constants;
  splitCaptures(loop, args, constants);
  Location loc = loop.getLoc();
  OpBuilder builder(loop->getContext());
  auto type = builder.getFunctionType(ValueRange(args).getTypes(),
                                      loop->getResultTypes());
  auto fn = func::FuncOp::create(loc, name, type);
  fn.setPrivate();
  // Not exported from the program: LLVM may inline a kernel called once.
  // (convert-func-to-llvm reads the linkage from this attribute.)
  fn->setAttr("llvm.linkage", LLVM::LinkageAttr::get(fn->getContext(),
                                                     LLVM::Linkage::Internal));
  Block *entry = fn.addEntryBlock();
  IRMapping mapping;
  mapping.map(args, entry->getArguments());
  builder.setInsertionPointToStart(entry);
  for (Operation *constant : constants)
    builder.clone(*constant, mapping);
  Operation *copy = builder.clone(*loop, mapping);
  func::ReturnOp::create(builder, loc, copy->getResults());
  return fn;
}

struct MFOutlineParallelLoopsPass
    : public meshfold::impl::MFOutlineParallelLoopsPassBase<
          MFOutlineParallelLoopsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    KernelTable kernels(module);
    for (func::FuncOp parent : llvm::to_vector(module.getOps<func::FuncOp>())) {
      SmallVector<scf::ParallelOp> loops;
      parent.walk<WalkOrder::PreOrder>([&](scf::ParallelOp loop) {
        loops.push_back(loop);
        return WalkResult::skip(); // Nested nests stay in their loop.
      });
      // The new functions follow their caller, in the order of its loops.
      Operation *last = parent;
      for (auto [index, loop] : llvm::enumerate(loops))
        last = outlineAfter(kernels, last, parent, loop, index);
    }
  }

  /// Outlines `loop` of `parent` and places the function after `last`;
  /// returns the module's last function outlined so far from `parent`.
  Operation *outlineAfter(KernelTable &kernels, Operation *last,
                          func::FuncOp parent, scf::ParallelOp loop,
                          size_t index) {
    SmallVector<Value> args;
    std::string name = (parent.getSymName() + "_par" + Twine(index)).str();
    func::FuncOp fn = outline(loop, name, args);
    getOperation().getBody()->getOperations().insertAfter(last->getIterator(),
                                                          fn);
    func::FuncOp callee = kernels.intern(fn);
    OpBuilder builder(loop);
    auto call = func::CallOp::create(builder, loop.getLoc(), callee, args);
    loop->replaceAllUsesWith(call.getResults());
    loop->erase();
    return callee == fn ? fn.getOperation() : last;
  }
};
} // namespace
