//===- Plan.h - The plan text of mfrt_options -------------------*- C++ -*-===//
//
// Parses the plan text that mfrt_options carries into a meshfold::PlanSpec;
// MeshLayout validates it.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_RUNTIME_PLAN_H
#define MESHFOLD_RUNTIME_PLAN_H

#include "meshfold/Analysis/MeshLayout.h"

#include <optional>
#include <string>

namespace mfrt::comm {

/// Parses whitespace-separated `key=value` fields:
///   devices=32 gpus_per_node=8 attention=tp:2,cp:2,dp:4,pp:2
///   experts=ep:16:tp+cp+dp,pp:2:pp nvlink_gbps=450 ib_gbps=50
/// An attention axis is `name:size` (first axis varies fastest); an expert
/// axis is `name:size:part+part...` naming its attention axes. `attention` is
/// required. Defaults: devices = the product of the attention axes,
/// gpus_per_node = 8, experts = `ep` over the non-pp attention axes in mesh
/// order plus `pp` (when the attention mesh has pp), link rates 450 / 50 GB/s.
/// Returns false and sets *error ("plan: ...") on a syntax error; the mesh
/// rules are MeshLayout::create's.
bool parsePlanText(const std::string &text, meshfold::PlanSpec &out,
                   std::string *error);

/// parsePlanText + MeshLayout::create; *error is the first problem.
std::optional<meshfold::MeshLayout> layoutFromPlanText(const std::string &text,
                                                       std::string *error);

} // namespace mfrt::comm

#endif // MESHFOLD_RUNTIME_PLAN_H
