//===- PartitionUtils.h - shared helpers of the partitioning passes -------===//
//
// What the partitioning passes share: the plan's layout, the layers, and
// small builders. Group math stays in MeshLayout.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_LIB_DIALECT_MF_TRANSFORMS_PARTITIONUTILS_H
#define MESHFOLD_LIB_DIALECT_MF_TRANSFORMS_PARTITIONUTILS_H

#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Support/MeshLayout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace meshfold::mf {

/// The layout of the module's plan; emits an error naming `pass` and fails
/// when there is no (valid) plan. Records the model's global dimensions on
/// the module (moe.model_info) before the first pass makes them local.
mlir::FailureOr<MeshLayout> requireLayout(mlir::ModuleOp module,
                                          llvm::StringRef pass);

/// A copy of `param` with local type `type` and the slice it holds.
moe::ParamOp shardParam(mlir::OpBuilder &b, moe::ParamOp param,
                        mlir::RankedTensorType type, int64_t dim,
                        llvm::StringRef mesh, llvm::StringRef axis,
                        int64_t parts);

/// The moe.param defining `v`, or null.
moe::ParamOp paramOf(mlir::Value v);

/// Erases `ops` (users before producers) and then every op they leave
/// trivially dead.
void eraseAndClean(llvm::ArrayRef<mlir::Operation *> ops);

/// Removes trivially dead ops from `region` until none is left.
void removeDeadOps(mlir::Region &region);

/// The attention-side chain of one layer, as the importer builds it:
/// q = rope(expand(linear(x, Wq))), k = rope(expand(linear(x, Wk))),
/// v = expand(linear(x, Wv)); out = linear(collapse(attention), Wo). In a
/// decode step the attention reads k and v through a moe.kv_history. Q and
/// K may be normalised per head between the split and RoPE (Qwen3-MoE's
/// q_norm/k_norm: rope(rms_norm(expand(...)))), or over the whole
/// projection before the split (OLMoE's: expand(rms_norm(linear(...))), or
/// its TP form expand(rms_scale(linear, all_reduce(sum_squares(linear))))):
/// each kind on both or neither. OLMoE's clip_qkv clamps q and k (after
/// their norms) and v just before the split: moe.clip, on all three or none.
struct AttentionChain {
  moe::LinearOp qLin, kLin, vLin, oLin;
  mlir::tensor::ExpandShapeOp qExp, kExp, vExp;
  moe::RMSNormOp qNorm, kNorm; // null without per-head norms
  /// moe.rms_norm, or moe.rms_scale once TP-split; null without.
  mlir::Operation *qProjNorm = nullptr, *kProjNorm = nullptr;
  moe::ClipOp qClip, kClip, vClip; // null without clip_qkv
  moe::RoPEOp qRope, kRope;
  mlir::Operation *attention = nullptr; // AttentionOp or its ring form.
  mlir::tensor::CollapseShapeOp collapse;
  llvm::SmallVector<moe::KVCacheOp> caches;
  moe::KVHistoryOp history; // null in prefill
};

/// Matches the chain around `attention`; emits an error and fails when the
/// structure is not the one the passes know.
mlir::FailureOr<AttentionChain> matchAttentionChain(moe::AttentionOp attention);

/// DeepSeek-V3's multi-head latent attention (MLA) as the importer builds
/// it, in the latent space:
///   q3 = expand(linear(xq, Wq)) [T, H, nope + rope] (xq = x, or the
///        normalised q_a_proj(x) with a query LoRA);
///   q = concat(head_linear(q3[.., :nope], W_UK, transposed),
///              rope(q3[.., nope:]))                       [T, H, r + rope];
///   kv = concat(expand(rms_norm(kva[:, :r])), rope(expand(kva[:, r:])))
///        with kva = linear(x, W_kva): the latent, [T, 1, r + rope], the
///        attention's key and value (through a moe.kv_history in decode);
///   out = linear(collapse(head_linear(attention[.., :r], W_UV)), Wo);
/// W_UK and W_UV are slices of expand(kv_b_proj) [H, nope + v, r].
/// Per-head are Wq's rows, kv_b_proj's rows and Wo's columns; the latent is
/// shared by every head.
struct LatentAttentionChain {
  moe::LinearOp qLin, kvLin, oLin;
  moe::LinearOp qInLin; // q_a_proj, null without a query LoRA
  mlir::tensor::ExpandShapeOp qExp, wkvExp;
  mlir::tensor::ExtractSliceOp qNope, qRopeIn, wUK, wUV, outSlice;
  moe::RoPEOp qRope;
  moe::HeadLinearOp absorb, up;
  mlir::tensor::ConcatOp qCat;
  /// The latent's row splits ([T, 1, r] and [T, 1, rope]).
  llvm::SmallVector<mlir::tensor::ExpandShapeOp> kvExps;
  moe::AttentionOp attention;
  moe::KVHistoryOp history; // null in prefill
  mlir::tensor::CollapseShapeOp collapse;
};

/// Whether `attention` is the latent form (its query a tensor.concat).
bool isLatentAttention(moe::AttentionOp attention);

/// Matches the latent chain around `attention`; emits an error and fails
/// when the structure is not the one the passes know.
mlir::FailureOr<LatentAttentionChain>
matchLatentAttention(moe::AttentionOp attention);

/// The module's attentions: prefill's (`overHistory` false) or decode
/// steps', whose K/V are a moe.kv_history (`overHistory` true).
llvm::SmallVector<moe::AttentionOp> attentionsOf(mlir::ModuleOp module,
                                                 bool overHistory);

/// `coord(axis) * num / den` as an index value.
mlir::Value scaledCoord(mlir::OpBuilder &b, mlir::Location loc,
                        llvm::StringRef mesh, llvm::StringRef axis, int64_t num,
                        int64_t den);

/// A decode step's head: `rms_norm -> linear (of a moe.param) ->
/// moe.step_logits`, each result used once.
struct StepHead {
  moe::RMSNormOp norm;
  moe::LinearOp lin;
  moe::ParamOp weight;
};

/// Matches the head whose logits `op` records; emits an error naming `pass`
/// and fails when it is not that chain.
mlir::FailureOr<StepHead> matchStepHead(moe::StepLogitsOp op,
                                        llvm::StringRef pass);

/// The rows of `x` whose logits a decode step records, and their
/// `positions` (moe.step_head_rows, then moe.take_rows of both).
std::pair<mlir::Value, mlir::Value> takeStepHeadRows(mlir::OpBuilder &b,
                                                     mlir::Location loc,
                                                     mlir::Value x,
                                                     mlir::Value positions);

} // namespace meshfold::mf

#endif // MESHFOLD_LIB_DIALECT_MF_TRANSFORMS_PARTITIONUTILS_H
