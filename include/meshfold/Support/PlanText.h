//===- PlanText.h - The plan as text ----------------------------*- C++ -*-===//
//
// The plan in the text form that the compiler embeds in the program and the
// runtime reads back (mfrt_options carries it): written and parsed here, so
// the two sides cannot drift. MeshLayout validates what is parsed.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_PLANTEXT_H
#define MESHFOLD_SUPPORT_PLANTEXT_H

#include "meshfold/Support/MeshLayout.h"

#include <optional>
#include <string>

namespace meshfold {

/// The plan text of `spec`: every field, in the order parsePlanText reads
/// them (devices, gpus_per_node, link rates, attention, experts).
std::string formatPlanText(const PlanSpec &spec);

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
bool parsePlanText(const std::string &text, PlanSpec &out, std::string *error);

/// parsePlanText + MeshLayout::create; *error is the first problem.
std::optional<MeshLayout> layoutFromPlanText(const std::string &text,
                                             std::string *error);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_PLANTEXT_H
