//===- plan-text.cpp - Fuzz the plan text ---------------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a plan text (what an emitted program's manifest and
// meshfold's plan flags carry). A plan it accepts prints back to a text that
// parses again, and answers the group questions of its first ranks.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/MeshLayout.h"
#include "meshfold/Support/PlanText.h"

#include <algorithm>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string error;
  std::optional<meshfold::MeshLayout> layout =
      meshfold::layoutFromPlanText(text, &error);
  if (!layout)
    return 0;
  meshfold::PlanSpec again;
  if (!meshfold::parsePlanText(meshfold::formatPlanText(layout->spec()), again,
                               &error))
    std::abort(); // A plan's own text must parse.
  int64_t ranks = std::min<int64_t>(layout->numDevices(), 64);
  for (int64_t r = 0; r < ranks; ++r) {
    (void)layout->describe(r);
    (void)layout->groupRank(r, {"tp", "cp"});
    (void)layout->groupRank(r, {"ep"});
    (void)layout->link(0, r);
  }
  (void)layout->stageOfLayer(0, 8);
  return 0;
}
