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
  return trafficModelInput(*info, hierarchical);
}

TrafficModelInput meshfold::trafficModelInput(const moe::ModelInfo &info,
                                              bool hierarchical) {
  TrafficModelInput input{info.hidden,     info.numKVHeads, info.headDim,
                          info.numExperts, info.topK,       info.numLayers,
                          hierarchical};
  input.numMoELayers = info.numMoELayers;
  input.kvCopies = info.kvCopies();
  input.projNorms = info.projNorms != 0;
  input.vocab = info.vocab;
  return input;
}

void meshfold::printOrderExplanation(raw_ostream &os, const PlanFlags &flags,
                                     const TrafficModelInput &model,
                                     double tokens) {
  // Elements of bf16: 2 bytes.
  std::vector<OrderCost> orders = rankOrders(flags, model, tokens, 2.0);
  const bool expertOrders = flags.etp > 1 || flags.edp > 1;
  os << llvm::format("axis orders for TP%lld x CP%lld x DP%lld x PP%lld",
                     (long long)flags.tp, (long long)flags.cp,
                     (long long)flags.dp, (long long)flags.pp);
  if (expertOrders) {
    int64_t stage = flags.tp * flags.cp * flags.dp;
    int64_t ep = flags.ep ? flags.ep : stage / (flags.etp * flags.edp);
    os << llvm::format(" (experts ETP%lld x EP%lld x EDP%lld)",
                       (long long)flags.etp, (long long)ep,
                       (long long)flags.edp);
  }
  os << llvm::format(" on nodes of %lld, per GPU per layer, T = %.0f tokens "
                     "per replica, bf16, %s dispatch, best first\n",
                     (long long)flags.gpusPerNode, tokens,
                     model.hierarchical ? "hierarchical" : "flat");
  os << (expertOrders ? "  order        expert order  " : "  order       ")
     << "  NVLink T*d    IB T*d  EP IB T*d   time ms\n";
  for (const OrderCost &c : orders) {
    double nvlink = 0, ib = 0, epIb = 0;
    for (const TrafficRow &r : c.rows) {
      nvlink += r.nvlink;
      ib += r.ib;
      if (r.collective == "dispatch" || r.collective == "combine")
        epIb += r.ib;
    }
    os << llvm::format("  %-12s", c.order.c_str());
    if (expertOrders)
      os << llvm::format(" %-13s", c.expertAxes.c_str());
    os << llvm::format(" %11.4f %9.4f %10.4f %9.3f\n", nvlink, ib, epIb,
                       c.seconds * 1e3);
  }
}
