//===- LibraryContractions.cpp - linear layers as cuBLASLt calls ----------===//
//
// --gemm-backend cublaslt: each linear layer with bf16 weights becomes a call
// of the runtime's mfrt_cg_gemm_bf16 (libmfrt_cublaslt.a) on a bf16 copy of
// its activations (see the pass's description in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Conversion/RuntimeCalls.h"
#include "meshfold/Dialect/GPU/Transforms/BF16Linear.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "mf-gpu-library-contractions"

namespace meshfold {
#define GEN_PASS_DEF_MFGPULIBRARYCONTRACTIONSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;

namespace {
/// `value` as an unranked memref (the runtime call's argument type).
Value unranked(OpBuilder &b, Location loc, Value value) {
  auto type = cast<MemRefType>(value.getType());
  return memref::CastOp::create(
      b, loc, UnrankedMemRefType::get(type.getElementType(), 0), value);
}

void callLibrary(const ContractionMatch &c, func::FuncOp gemm) {
  OpBuilder b(c.op);
  Location loc = c.op.getLoc();
  Value rows = memref::DimOp::create(b, loc, c.in0->get(), 0);
  Value a16 = roundActivationsToBF16(b, c, rows);
  func::CallOp::create(b, loc, gemm,
                       ValueRange{unranked(b, loc, c.in1->get()),
                                  unranked(b, loc, a16),
                                  unranked(b, loc, c.out->get())});
  freeDeviceBuffer(b, loc, a16);
}

struct MFGPULibraryContractionsPass
    : public meshfold::impl::MFGPULibraryContractionsPassBase<
          MFGPULibraryContractionsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<ContractionMatch> found;
    getOperation().walk([&](linalg::GenericOp op) {
      if (std::optional<ContractionMatch> c = matchBF16Linear(op))
        found.push_back(*c);
    });
    if (found.empty())
      return;
    func::FuncOp gemm =
        declareRuntimeFunction(getOperation(), RuntimeFn::mfrt_cg_gemm_bf16);
    for (ContractionMatch &c : found) {
      callLibrary(c, gemm);
      c.op.erase();
    }
  }
};
} // namespace
