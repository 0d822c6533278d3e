//===- StridedCopiesToLinalg.cpp - memref.copy of strided views as linalg -===//
//
// A memref.copy with a strided layout on either side lowers to a call of the
// runner library's `memrefCopy`, which emitted programs do not link; as a
// linalg.copy it becomes loops (split over the threads) like the other ops.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "mf-strided-copies-to-linalg"

namespace meshfold {
#define GEN_PASS_DEF_MFSTRIDEDCOPIESTOLINALGPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
struct MFStridedCopiesToLinalgPass
    : public meshfold::impl::MFStridedCopiesToLinalgPassBase<
          MFStridedCopiesToLinalgPass> {
  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) {
      auto src = cast<MemRefType>(copy.getSource().getType());
      auto dst = cast<MemRefType>(copy.getTarget().getType());
      if (!src.getLayout().isIdentity() || !dst.getLayout().isIdentity())
        copies.push_back(copy);
    });
    for (memref::CopyOp copy : copies) {
      OpBuilder b(copy);
      linalg::CopyOp::create(b, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      copy.erase();
    }
  }
};
} // namespace
