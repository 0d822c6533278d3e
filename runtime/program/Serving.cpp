//===- Serving.cpp - The generation loop's side of serving ----------------===//
//
// The Intake message, the serving group and the checks of --serve
// (Serving.h).
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Serving.h"

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Options.h"
#include "mfrt/program/Weights.h"

#include "meshfold/Support/MeshLayout.h"

using namespace mfrt;
using namespace meshfold;

namespace {
/// The message: [stop, arrivals, cancellations, (slot, replica) x
/// kIntakeRequests, slot x kIntakeRequests].
constexpr size_t kIntakeWidth = 3 + 3 * kIntakeRequests;
} // namespace

ServeGroups mfrt::servingGroups(const Program &prog,
                                std::map<std::string, int64_t> &groups,
                                int64_t replica) {
  MeshLayout layout = layoutOf(prog.manifest);
  ServeGroups g;
  g.replica = replica;
  std::string axes;
  for (const MeshAxis &a : layout.spec().attention)
    if (a.size > 1 && a.name != "pp")
      axes += (axes.empty() ? "" : ",") + a.name;
  if (!axes.empty())
    g.stage = groupOf(groups, axes);
  if (!layout.hasAxis("pp") || layout.axisSize("pp") == 1)
    return g;
  int64_t pp = groupOf(groups, "pp");
  int me = mfrt_group_rank(pp), stages = mfrt_group_size(pp);
  if (me > 0)
    g.previous = mfrt_group_member(pp, me - 1);
  if (me + 1 < stages)
    g.next = mfrt_group_member(pp, me + 1);
  return g;
}

std::vector<float> mfrt::encodeIntake(const Intake &in) {
  if (int64_t(in.arrived.size()) > kIntakeRequests ||
      int64_t(in.cancelled.size()) > kIntakeRequests)
    fatal("internal: an intake of more than " +
          std::to_string(kIntakeRequests) + " requests");
  std::vector<float> msg(kIntakeWidth, 0.0f);
  msg[0] = in.stop ? 1.0f : 0.0f;
  msg[1] = float(in.arrived.size());
  msg[2] = float(in.cancelled.size());
  for (size_t i = 0; i < in.arrived.size(); ++i) {
    msg[3 + 2 * i] = float(in.arrived[i].first);
    msg[4 + 2 * i] = float(in.arrived[i].second);
  }
  for (size_t i = 0; i < in.cancelled.size(); ++i)
    msg[3 + 2 * kIntakeRequests + i] = float(in.cancelled[i]);
  return msg;
}

Intake mfrt::decodeIntake(const std::vector<float> &msg) {
  Intake in;
  in.stop = msg[0] != 0.0f;
  for (size_t i = 0; i < size_t(msg[1]); ++i)
    in.arrived.emplace_back(int64_t(msg[3 + 2 * i]), int64_t(msg[4 + 2 * i]));
  for (size_t i = 0; i < size_t(msg[2]); ++i)
    in.cancelled.push_back(int64_t(msg[3 + 2 * kIntakeRequests + i]));
  return in;
}

void mfrt::checkServing(const Options &options, const Program &prog) {
  auto refuse = [](const std::string &what) { die("--serve " + what); };
  for (const auto &[flag, given] :
       std::initializer_list<std::pair<const char *, bool>>{
           {"--prompts", !options.prompts.empty()},
           {"--prompts-text", !options.promptsText.empty()},
           {"--prompts-jsonl", !options.promptsJsonl.empty()},
           {"--out", !options.out.empty()},
           {"--out-jsonl", !options.outJsonl.empty()},
           {"--trace-token", !options.traceToken.empty()},
           {"--step-logits", options.generation.stepLogits},
           {"--report", options.reportTraffic || options.reportDecode ||
                            options.reportLoad || options.reportRouting},
           {"--routing-json", !options.routingJson.empty()}})
    if (given)
      refuse(std::string("takes its requests over HTTP: ") + flag +
             " is for batch runs");
  if (options.backend != "local")
    refuse("runs every rank in this process (--backend local): serving "
           "under --backend " +
           options.backend + " is not supported yet");
  if (prog.pools)
    refuse("cannot serve a program of two pools (--decode-plan) yet");
  if (prog.manifest.promptLogits)
    refuse("cannot serve a program that records prompt logprobs "
           "(--prompt-logprobs): compile it without");
  if (prog.manifest.decode.empty())
    refuse("needs a decode step: compile the program with meshfold-compile "
           "--decode");
}

void mfrt::prepareServing(Program &prog, int64_t slots) {
  prog.requests.assign(size_t(slots), {});
  prog.outputs.assign(size_t(slots), nullptr);
  prog.served.assign(size_t(slots), prog.generation);
}

void mfrt::placeRequest(Program &prog, int64_t slot,
                        std::vector<int64_t> prompt, const Generation &g) {
  auto out = std::make_shared<RequestOutput>();
  out->tokens = out->length = int64_t(prompt.size());
  prog.requests[size_t(slot)] = std::move(prompt);
  prog.outputs[size_t(slot)] = std::move(out);
  prog.served[size_t(slot)] = g;
}
