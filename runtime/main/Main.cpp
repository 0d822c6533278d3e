//===- Main.cpp - The emitted executable's main ---------------------------===//
//
// Every executable meshfold emits links this main (see Program.h for the
// steps). Nothing else in the runtime refers to this file, so that a test
// that links the runtime brings its own main.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Options.h"
#include "mfrt/program/Outputs.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Reports.h"
#include "mfrt/program/Run.h"
#include "mfrt/program/Trace.h"
#include "mfrt/program/Weights.h"
#include "mfrt/serve/Server.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include <malloc.h>
#include <unistd.h>

using namespace mfrt;

namespace {
/// Buffers a step frees serve the next step. glibc otherwise maps every
/// block over 128 KiB afresh and unmaps it when freed, so each decode step
/// page-faulted and zeroed its K/V histories and activations again (15% of
/// an 8-stream step's time in the kernel). The peak is unchanged: freed
/// blocks stay with the process instead of going back to the system.
void keepFreedBlocks() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 32 << 20); // glibc's largest threshold
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}
} // namespace

int main(int argc, char **argv) {
  keepFreedBlocks();
  setProgramName(argc > 0 ? argv[0] : nullptr);
  Options options;
  if (!parseCommandLine(argc, argv, options))
    return 0; // --help or --version
  mfrt_options launch = launchOptions(options);
  // Fail before the work, not after it, when an output cannot be written.
  checkOutputPaths(options);

  Program &prog = program();
  loadProgram(options, prog);
  if (!options.serve.empty()) {
    prog.threadsPerRank =
        threadsPerRank(options, ranksOfPlan(planText(prog.manifest)));
    std::string plan = planText(prog.manifest);
    launch.plan = plan.c_str();
    return serve::serveProgram(options, prog, launch);
  }
  configureTrace(options, prog);
  prog.reportTraffic = options.reportTraffic;
  prog.reportLoad = options.reportLoad;
  prog.reportRouting = options.reportRouting || !options.routingJson.empty();
  if (prog.reportRouting)
    checkRoutingReport(prog);
  prog.collectOutputs = launch.backend != MFRT_BACKEND_LOCAL;
  prog.bufferedSends = launch.backend != MFRT_BACKEND_NCCL;
  std::string plan = planText(prog.manifest);
  launch.plan = plan.c_str();
  // A program of two pools: the decode pool's ranks after the prefill
  // pool's.
  std::string decodePlan = prog.pools ? planText(prog.decodeManifest) : "";
  if (prog.pools)
    launch.second_plan = decodePlan.c_str();
  int localRanks =
      ranksOfPlan(plan) + (prog.pools ? ranksOfPlan(decodePlan) : 0);
  prog.threadsPerRank = threadsPerRank(
      options, launch.backend == MFRT_BACKEND_LOCAL ? localRanks : 1);
  std::string reportPlan = reportPlanText(options, prog, plan);
  prepareTraffic(prog, plan);
  if (prog.reportLoad)
    prog.loads.assign(size_t(localRanks), {});
  if (prog.reportRouting)
    prog.routing.assign(size_t(localRanks), {});
  auto t0 = std::chrono::steady_clock::now();
  // Progress for a terminal only: a log gets no \r-updated lines.
  std::atomic<bool> stopProgress{false};
  std::thread progress;
  if (!options.quiet && ::isatty(STDERR_FILENO))
    progress = std::thread(showLoadProgress, std::ref(stopProgress));
  mfrt_status launched = mfrt_launch(&launch, rankMain, nullptr);
  stopProgress = true;
  if (progress.joinable())
    progress.join();
  if (launched != MFRT_OK)
    die(mfrt_last_error());
  if (launch.backend != MFRT_BACKEND_LOCAL && mfrt_rank() > 0)
    return 0; // Under MPI, rank 0 writes the outputs.

  SafetensorsWriter writer;
  writer.setMetadata("format", "meshfold-prefill-output");
  addOutputs(prog, writer, options.quiet);
  // The trace (and its map) before the outputs: nothing is written when
  // the map cannot be.
  if (traceConfig().traceToken)
    reportTrace(prog, plan);
  std::string error;
  if (!options.routingJson.empty() &&
      !writeRoutingJson(prog, options.routingJson, &error))
    die(error);
  if (!writer.write(options.out, &error))
    die(error);
  writeJsonlResults(options, prog);
  if (prog.reportTraffic)
    printTraffic(prog, reportPlan);
  if (options.reportDecode)
    printDecodeReport(prog);
  if (prog.reportLoad)
    printLoadReport(prog);
  if (options.reportRouting)
    printRoutingReport(prog);
  if (!options.quiet) {
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    std::string kv = prog.kvOutputs
                         ? std::to_string(prog.manifest.layers) + " layers"
                         : std::string("no K/V (--no-kv-out)");
    std::printf("wrote %s%s%s: %zu requests, %s (%.3f s)\n",
                options.out.c_str(), options.outJsonl.empty() ? "" : " and ",
                options.outJsonl.c_str(), prog.requests.size(), kv.c_str(), s);
  }
  return 0;
}
