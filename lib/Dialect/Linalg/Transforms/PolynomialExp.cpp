//===- PolynomialExp.cpp - math.exp as arithmetic the vectorizer takes ----===//
//
// `math.exp` lowers to a call of libm's `expf` per element, which LLVM's loop
// vectorizer cannot widen: attention's softmax tiles and the experts' SiLU
// then run one scalar call at a time. Upstream's polynomial approximation
// (range reduction by ln 2, a minimax polynomial, the exponent built in the
// bits; a few ulp of f32 within its range, 0 below -87.8, the value at 88.8
// above it) is plain arithmetic that vectorizes.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "mf-math-polynomial-exp"

namespace meshfold {
#define GEN_PASS_DEF_MFMATHPOLYNOMIALEXPPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
struct MFMathPolynomialExpPass
    : public meshfold::impl::MFMathPolynomialExpPassBase<
          MFMathPolynomialExpPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(
        patterns, [](StringRef name) { return name == "math.exp"; });
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
