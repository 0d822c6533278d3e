//===- Launch.cpp - mfrt_launch: the ranks of a job and their outcome -----===//
//
// mfrt_launch parses the plan, then runs the user's function once per rank:
// under `local` on one thread per rank of this process, under a plugin (mpi,
// nccl) once in this process, which is one rank of an MPI job. Each rank gets
// its RankState (the calling thread's, see OpScaffold.h); the job's first
// failure becomes mfrt_launch's status and last error.
//
//===----------------------------------------------------------------------===//

#include "mfrt/api/Launch.h"
#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/PlanText.h"
#include "mfrt/backends/LocalBackend.h"
#include "mfrt/comm/Device.h"
#include "mfrt/comm/OpScaffold.h"

#include <cstdlib>
#include <system_error>
#include <thread>

using namespace mfrt::comm;
using meshfold::MeshLayout;

namespace {

/// Under mpi / nccl: this process's rank and world size, kept after
/// mfrt_launch returns.
int gProcessRank = -1, gProcessWorld = 0;

/// What every rank of one mfrt_launch runs with.
struct Launch {
  const MeshLayout &layout;
  /// The second pool's (mfrt_options.second_plan), or nullptr.
  const MeshLayout *second;
  /// Both pools' devices.
  int devices;
  double timeoutS;
  /// CUDA mode: the registered device; nullptr otherwise.
  Device *device;
  int (*fn)(void *user);
  void *user;
};

std::string fullMessage(const FailureRecord &r) {
  return "mfrt: rank " + std::to_string(r.rank) + ": " + r.detail;
}

double resolveTimeout(const mfrt_options *options) {
  if (options->timeout_s > 0)
    return options->timeout_s;
  if (const char *env = std::getenv("MFRT_TIMEOUT_S")) {
    char *end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && *end == 0 && v > 0)
      return v;
  }
  return MFRT_DEFAULT_TIMEOUT_S;
}

/// MFRT_FAULT_EXIT="<rank>:<op>": that rank _exit(3)s inside that op.
std::string faultExitOpFor(int rank) {
  const char *env = std::getenv("MFRT_FAULT_EXIT");
  if (!env)
    return "";
  std::string spec(env);
  size_t colon = spec.find(':');
  if (colon == std::string::npos)
    return "";
  if (std::atoi(spec.substr(0, colon).c_str()) != rank)
    return "";
  return spec.substr(colon + 1);
}

/// Global rank `rank`'s pool and its layout.
PoolPlace placeOf(const Launch &l, int rank, const MeshLayout *&layout) {
  PoolPlace place;
  place.sizes = {int(l.layout.numDevices()),
                 l.second ? int(l.second->numDevices()) : 0};
  layout = &l.layout;
  if (rank >= place.sizes[0]) {
    place.pool = 1;
    place.base = place.sizes[0];
    layout = l.second;
  }
  return place;
}

/// Runs the user's function as the rank of `st`; returns what it returned.
int runAs(RankState &st, const Launch &l) {
  st.faultExitOp = faultExitOpFor(st.rank);
  setCurrentRank(&st);
  int rc = l.fn(l.user);
  setCurrentRank(nullptr);
  return rc;
}

//===----------------------------------------------------------------------===//
// local: every rank a thread of this process
//===----------------------------------------------------------------------===//

/// The thread of `rank`: its failures (and a non-zero return) go to the
/// fabric.
void runLocalRank(LocalFabric &fabric, const Launch &l, int rank) {
  // CUDA mode: every rank (thread) on device 0, each with its own stream.
  if (l.device) {
    Status s = l.device->attach(rank, 0);
    if (!s.ok()) {
      fabric.raise(FailureRecord{rank, s.code, s.detail});
      return;
    }
  }
  std::unique_ptr<Transport> transport = fabric.transport(rank);
  std::unique_ptr<Compute> host = createHostCompute();
  const MeshLayout *layout = nullptr;
  PoolPlace place = placeOf(l, rank, layout);
  RankState st(*layout, rank, l.timeoutS, *transport, *host, nullptr, place);
  int rc = runAs(st, l);
  if (rc != 0 && !fabric.failed())
    fabric.raise(FailureRecord{rank, MFRT_ERR_PEER,
                               "fn returned " + std::to_string(rc)});
  if (l.device)
    l.device->detach();
}

mfrt_status launchLocal(const Launch &l) {
  LocalFabric fabric(l.devices);
  std::vector<std::thread> threads;
  threads.reserve(size_t(l.devices));
  for (int r = 0; r < l.devices; ++r) {
    try {
      threads.emplace_back([&fabric, &l, r] { runLocalRank(fabric, l, r); });
    } catch (const std::system_error &e) {
      fabric.raise(
          FailureRecord{r, MFRT_ERR_BACKEND,
                        std::string("cannot start the thread: ") + e.what()});
      break;
    }
  }
  for (std::thread &t : threads)
    t.join();
  if (!fabric.failed())
    return MFRT_OK;
  FailureRecord first = fabric.firstFailure();
  return setError(first.status, fullMessage(first));
}

//===----------------------------------------------------------------------===//
// mpi, nccl: this process is one rank of an MPI job
//===----------------------------------------------------------------------===//

/// Loads the plugin of `which` and creates its backend into `backend`.
mfrt_status createPlugin(mfrt_backend which, const Launch &l,
                         std::unique_ptr<PluginBackend> &backend) {
  std::string error;
  PluginCreateFn create = mfrt::api::loadPlugin(which, &error);
  if (!create)
    return setError(MFRT_ERR_BACKEND, "mfrt: " + error);
  PluginRequest request;
  request.backend = which;
  request.devices = l.devices;
  request.timeoutS = l.timeoutS;
  request.device = l.device;
  backend.reset(create(&request, &error));
  if (!backend)
    return setError(MFRT_ERR_BACKEND, std::string("mfrt: ") +
                                          mfrt::api::backendName(which) +
                                          " backend: " + error);
  return MFRT_OK;
}

/// Checks that the job runs one process per device of the plan.
mfrt_status checkWorldSize(PluginBackend &backend, mfrt_backend which,
                           int devices) {
  Transport &transport = backend.transport();
  if (transport.size() == devices)
    return MFRT_OK;
  std::string msg = "mfrt: rank " + std::to_string(transport.rank()) +
                    ": the " + mfrt::api::backendName(which) +
                    " backend runs " + std::to_string(transport.size()) +
                    " processes (the MPI world size), but the plan has " +
                    std::to_string(devices) + " devices: start it with " +
                    "mpirun -np " + std::to_string(devices);
  backend.shutdown(true);
  return setError(MFRT_ERR_ARGUMENT, msg);
}

/// CUDA mode: this process's rank on device (local rank mod device count),
/// unless the plugin attached it already (nccl, which shares the stream).
mfrt_status attachDevice(PluginBackend &backend, Device *device) {
  if (!device || device->attached())
    return MFRT_OK;
  Transport &transport = backend.transport();
  int count = 0;
  Status s = device->deviceCount(count);
  if (s.ok())
    s = device->attach(transport.rank(),
                       localRankFromEnvironment(transport.rank()) % count);
  if (s.ok())
    return MFRT_OK;
  std::string msg =
      "mfrt: rank " + std::to_string(transport.rank()) + ": " + s.detail;
  transport.raiseFailure(FailureRecord{transport.rank(), s.code, s.detail});
  backend.shutdown(false);
  return setError(s.code, msg);
}

/// Runs the user's function as this process's rank; returns the job's
/// outcome (the first failure of any rank, as the backend agrees on it).
FailureRecord runPluginRank(PluginBackend &backend, Compute &compute,
                            const Launch &l) {
  Transport &transport = backend.transport();
  const MeshLayout *layout = nullptr;
  PoolPlace place = placeOf(l, transport.rank(), layout);
  RankState st(*layout, transport.rank(), l.timeoutS, transport, compute,
               backend.native(), place);
  int rc = runAs(st, l);
  FailureRecord mine = st.failure;
  FailureRecord seen;
  if (!mine.failed() && transport.failureSeen(seen))
    mine = seen;
  if (!mine.failed() && rc != 0) {
    mine = FailureRecord{st.rank, MFRT_ERR_PEER,
                         "fn returned " + std::to_string(rc)};
    transport.raiseFailure(mine);
  }
  return backend.finish(mine, l.timeoutS);
}

mfrt_status launchPlugin(mfrt_backend which, const Launch &l) {
  if (which != MFRT_BACKEND_MPI && which != MFRT_BACKEND_NCCL)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: unknown backend " + std::to_string(int(which)));
  std::unique_ptr<PluginBackend> backend;
  if (mfrt_status rc = createPlugin(which, l, backend))
    return rc;
  gProcessRank = backend->transport().rank();
  gProcessWorld = backend->transport().size();
  if (mfrt_status rc = checkWorldSize(*backend, which, l.devices))
    return rc;
  if (mfrt_status rc = attachDevice(*backend, l.device))
    return rc;
  std::unique_ptr<Compute> host;
  Compute *compute = backend->compute();
  if (!compute) {
    host = createHostCompute();
    compute = host.get();
  }
  FailureRecord outcome = runPluginRank(*backend, *compute, l);
  backend->shutdown(!outcome.failed());
  // The plugin's device memory and communicators go before the stream.
  backend.reset();
  if (l.device)
    l.device->detach();
  if (!outcome.failed())
    return MFRT_OK;
  return setError(outcome.status, fullMessage(outcome));
}

} // namespace

int mfrt::api::processRank() { return gProcessRank; }

int mfrt::api::processWorldSize() { return gProcessWorld; }

//===----------------------------------------------------------------------===//
// mfrt_launch, mfrt_last_error
//===----------------------------------------------------------------------===//

extern "C" mfrt_status mfrt_launch(const mfrt_options *options,
                                   int (*fn)(void *user), void *user) {
  if (currentRank())
    return setError(MFRT_ERR_STATE,
                    "mfrt: mfrt_launch called inside mfrt_launch");
  if (!options || !fn)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: mfrt_launch needs options and a function");
  if (!options->plan)
    return setError(MFRT_ERR_ARGUMENT, "mfrt: mfrt_options.plan is NULL");
  std::string error;
  std::optional<MeshLayout> layout =
      meshfold::layoutFromPlanText(options->plan, &error);
  if (!layout)
    return setError(MFRT_ERR_ARGUMENT, "mfrt: " + error);
  std::optional<MeshLayout> second;
  if (options->second_plan) {
    second = meshfold::layoutFromPlanText(options->second_plan, &error);
    if (!second)
      return setError(MFRT_ERR_ARGUMENT, "mfrt: the second plan: " + error);
    if (std::string why = meshfold::checkPools(*layout, *second); !why.empty())
      return setError(MFRT_ERR_ARGUMENT, "mfrt: " + why);
  }
  const int devices =
      int(layout->numDevices() + (second ? second->numDevices() : 0));
  const double timeoutS = resolveTimeout(options);
  const Launch l{*layout,
                 second ? &*second : nullptr,
                 devices,
                 timeoutS,
                 activeDevice(),
                 fn,
                 user};
  clearError();
  if (options->backend == MFRT_BACKEND_LOCAL)
    return launchLocal(l);
  return launchPlugin(options->backend, l);
}

extern "C" const char *mfrt_last_error(void) { return lastError().c_str(); }
