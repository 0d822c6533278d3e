//===- ExplainOrder.cpp - axis orders ranked by their traffic -------------===//

#include "meshfold/Analysis/ExplainOrder.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "llvm/Support/Format.h"

using namespace mlir;
using namespace meshfold;

FailureOr<TrafficModelInput> meshfold::getTrafficModelInput(ModuleOp module,
                                                            bool hierarchical) {
  FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
  if (failed(info) || info->numLayers == 0)
    return failure();
  return TrafficModelInput{info->hidden,     info->numKVHeads, info->headDim,
                           info->numExperts, info->topK,       info->numLayers,
                           hierarchical};
}

void meshfold::printOrderExplanation(raw_ostream &os, int64_t tp, int64_t cp,
                                     int64_t dp, int64_t pp,
                                     int64_t gpusPerNode,
                                     const TrafficModelInput &model,
                                     double tokens) {
  // Elements of bf16: 2 bytes.
  std::vector<OrderCost> orders =
      rankOrders(tp, cp, dp, pp, gpusPerNode, model, tokens, 2.0);
  os << llvm::format(
      "axis orders for TP%lld x CP%lld x DP%lld x PP%lld on nodes of %lld, "
      "per GPU per layer, T = %.0f tokens per replica, bf16, %s "
      "dispatch, best first\n",
      (long long)tp, (long long)cp, (long long)dp, (long long)pp,
      (long long)gpusPerNode, tokens,
      model.hierarchical ? "hierarchical" : "flat");
  os << "  order         NVLink T*d    IB T*d  EP IB T*d   time ms\n";
  for (const OrderCost &c : orders) {
    double nvlink = 0, ib = 0, epIb = 0;
    for (const TrafficRow &r : c.rows) {
      nvlink += r.nvlink;
      ib += r.ib;
      if (r.collective == "dispatch" || r.collective == "combine")
        epIb += r.ib;
    }
    os << llvm::format("  %-12s %11.4f %9.4f %10.4f %9.3f\n", c.order.c_str(),
                       nvlink, ib, epIb, c.seconds * 1e3);
  }
}
