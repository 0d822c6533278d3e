//===- Builders.h - linalg building blocks of the moe lowering --*- C++ -*-===//
//
// Small helpers shared by the moe-to-linalg patterns: affine maps, filled
// tensors, a generic with a body, the multiply-accumulate body of every
// contraction and the widening of narrow weight elements.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_LIB_CONVERSION_MOETOLINALG_BUILDERS_H
#define MESHFOLD_LIB_CONVERSION_MOETOLINALG_BUILDERS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/DialectConversion.h"

namespace meshfold::moe_to_linalg {
using namespace mlir;
using IT = utils::IteratorType;
constexpr IT kPar = IT::parallel;
constexpr IT kRed = IT::reduction;
using BodyFn = function_ref<void(OpBuilder &, Location, ValueRange)>;

/// An affine map of `numDims` loops that picks the listed loop dims.
AffineMap pick(MLIRContext *ctx, unsigned numDims, ArrayRef<unsigned> dims);

/// tensor.empty of `type`, dynamic dims taken from `sources`: (value, dim
/// index) pairs, either one per dim of `type` (entries for static dims are
/// ignored) or one per dynamic dim, in order.
Value makeEmpty(OpBuilder &b, Location loc, RankedTensorType type,
                ArrayRef<std::pair<Value, int64_t>> sources);

/// A tensor of `type` filled with `value`.
Value makeFilled(OpBuilder &b, Location loc, RankedTensorType type,
                 ArrayRef<std::pair<Value, int64_t>> sources, TypedAttr value);

Value zeros(OpBuilder &b, Location loc, RankedTensorType type,
            ArrayRef<std::pair<Value, int64_t>> sources);

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt);

ResultRange generic(OpBuilder &b, Location loc, ValueRange ins, ValueRange outs,
                    ArrayRef<AffineMap> maps, ArrayRef<IT> iters, BodyFn body);

Value idx(OpBuilder &b, Location loc, int64_t dim);

Value cstF(OpBuilder &b, Location loc, Type t, double v);

/// An index constant.
Value cstIndex(OpBuilder &b, Location loc, int64_t v);

Value negInf(OpBuilder &b, Location loc, Type t);

int64_t dimOf(Value v, unsigned i);

/// `v` in the float type `to`: a weight element stored in a narrower type is
/// extended (exactly) to the compute type; anything else is returned as is.
Value widen(OpBuilder &b, Location loc, Value v, Type to);

/// The body of a generic that accumulates in0 * in1 into its output, in the
/// output's type (a narrower weight operand is widened first).
void multiplyAccumulate(OpBuilder &nb, Location l, ValueRange a);

/// x [T, in] times w [out, in]^T -> [T, out].
Value buildLinear(OpBuilder &b, Location loc, Value x, Value w,
                  RankedTensorType resultType);

/// x [T, in] times w [out, in]^T into `dest` [T, out], which is zero-filled
/// first: destination-passing style, so that a product computed into a slice
/// of a larger tensor (extract_slice ... insert_slice) bufferizes in place.
Value buildLinearInto(OpBuilder &b, Location loc, Value x, Value w, Value dest);

/// silu(g) * u = g / (1 + exp(-g)) * u.
Value buildSwiGLU(OpBuilder &b, Location loc, Type elt, Value g, Value u);

/// The row of `pos` (i64 positions) holding `target` (an index): whether
/// there is one, and its index (0 when there is none).
std::pair<Value, Value> findRow(OpBuilder &b, Location loc, Value pos,
                                Value target);

/// Patterns of the attention ops (attention, attention_partial,
/// attention_merge); `fuse` picks the tiled online-softmax lowering of
/// attention and attention_partial over the materialised one.
void populateAttentionPatterns(RewritePatternSet &patterns, bool fuse,
                               int64_t tile);
/// Patterns of the routed expert ops (experts, expert_ffn). With
/// `groupExperts`, each expert multiplies its weights against all the rows
/// routed to it at once; without, every row gathers its expert's weights
/// element by element.
void populateExpertPatterns(RewritePatternSet &patterns,
                            bool groupExperts = true);
} // namespace meshfold::moe_to_linalg

#endif // MESHFOLD_LIB_CONVERSION_MOETOLINALG_BUILDERS_H
