//===- Launch.cpp - mfrt_launch: the ranks of a job and their outcome -----===//
//
// mfrt_launch parses the plan, then runs the user's function once per rank:
// under `local` on one thread per rank of this process; under tcp, mpi or
// nccl once in this process, which is one rank of the job (joined by a
// rendezvous or by MPI; nccl's host messages go over the one or the other).
// Each rank gets its RankState (the calling thread's, see OpScaffold.h); the
// job's first failure becomes mfrt_launch's status and last error.
//
//===----------------------------------------------------------------------===//

#include "mfrt/api/Launch.h"
#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/PlanText.h"
#include "mfrt/backends/LocalBackend.h"
#include "mfrt/backends/TCPTransport.h"
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
  /// tcp / nccl: rank 0's HOST:PORT ("" under mpirun), this process's rank
  /// if given (else -1), and the plans' fingerprint.
  std::string rendezvous;
  int rank;
  uint64_t fingerprint;
};

std::string fullMessage(const FailureRecord &r) {
  return "mfrt: rank " + std::to_string(r.rank) + ": " + r.detail;
}

/// FNV-1a over the plans' texts: ranks of one program agree on it.
uint64_t fingerprintOf(const mfrt_options *options) {
  uint64_t h = 1469598103934665603ull;
  for (const char *text : {options->plan, options->second_plan}) {
    for (const char *c = text ? text : ""; *c; ++c)
      h = (h ^ uint8_t(*c)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return h;
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
// tcp, mpi, nccl: this process is one rank of the job
//===----------------------------------------------------------------------===//

/// Loads the plugin of `which` and creates its backend into `backend`;
/// `host` is the host transport lent to nccl.
mfrt_status createPlugin(mfrt_backend which, const Launch &l,
                         HostTransport *host,
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
  request.host = host;
  backend.reset(create(&request, &error));
  if (!backend)
    return setError(MFRT_ERR_BACKEND, std::string("mfrt: ") +
                                          mfrt::api::backendName(which) +
                                          " backend: " + error);
  return MFRT_OK;
}

/// A whole non-negative decimal number from the environment, or -1.
int envIndex(const char *name) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return -1;
  char *end = nullptr;
  long r = std::strtol(v, &end, 10);
  return end && *end == 0 && r >= 0 && r < (1L << 30) ? int(r) : -1;
}

/// The rendezvous's view of this process: its rank (given, or srun's), the
/// world size and the local-rank hint.
mfrt_status rendezvousConfig(const Launch &l, RendezvousConfig &c) {
  std::string error;
  if (!parseRendezvousAddress(l.rendezvous, c.host, c.port, &error))
    return setError(MFRT_ERR_ARGUMENT, "mfrt: " + error);
  c.rank = l.rank >= 0 ? l.rank : envIndex("SLURM_PROCID");
  if (c.rank < 0)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: a rendezvous needs this process's rank: --rank R "
                    "(mfrt_options.rank), or srun's SLURM_PROCID");
  int tasks = envIndex("SLURM_NTASKS");
  if (l.rank < 0 && tasks >= 0 && tasks != l.devices)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: srun started " + std::to_string(tasks) +
                        " tasks (SLURM_NTASKS), but the plan has " +
                        std::to_string(l.devices) +
                        " devices: start it with "
                        "srun -n " +
                        std::to_string(l.devices));
  c.size = l.devices;
  c.localRankHint = l.rank < 0 ? envIndex("SLURM_LOCALID") : -1;
  c.fingerprint = l.fingerprint;
  c.timeoutS = l.timeoutS;
  return MFRT_OK;
}

/// The tcp transport, after the rendezvous, as a backend of its own.
mfrt_status joinRendezvous(const Launch &l,
                           std::unique_ptr<PluginBackend> &backend) {
  RendezvousConfig c;
  if (mfrt_status rc = rendezvousConfig(l, c))
    return rc;
  std::string error;
  mfrt_status status = MFRT_OK;
  std::unique_ptr<TCPTransport> t = TCPTransport::create(c, &error, &status);
  if (!t)
    return setError(status,
                    "mfrt: rank " + std::to_string(c.rank) + ": " + error);
  backend = std::make_unique<HostBackend>(std::move(t));
  return MFRT_OK;
}

/// The calling thread's last error without its "mfrt: " prefix, to be
/// wrapped in another line or sent as a failure record.
std::string lastErrorDetail() {
  const std::string prefix = "mfrt: ";
  const std::string &e = lastError();
  return e.compare(0, prefix.size(), prefix) == 0 ? e.substr(prefix.size()) : e;
}

/// The nccl backend over the host transport of `lender` (tcp after a
/// rendezvous, else the mpi plugin's).
mfrt_status createNCCL(const Launch &l, std::unique_ptr<PluginBackend> &lender,
                       std::unique_ptr<PluginBackend> &backend) {
  if (l.rendezvous.empty() && l.rank >= 0)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: a rank (--rank, mfrt_options.rank) is for a "
                    "rendezvous (--rendezvous HOST:PORT); under mpirun the "
                    "launcher numbers the ranks");
  mfrt_status rc = l.rendezvous.empty()
                       ? createPlugin(MFRT_BACKEND_MPI, l, nullptr, lender)
                       : joinRendezvous(l, lender);
  if (rc != MFRT_OK && l.rendezvous.empty())
    return setError(rc, "mfrt: the nccl backend runs under mpirun (over the "
                        "mpi backend) or with a rendezvous (--rendezvous "
                        "HOST:PORT): " +
                            lastErrorDetail());
  if (rc != MFRT_OK)
    return rc;
  HostTransport &host = *lender->hostTransport();
  if ((rc = createPlugin(MFRT_BACKEND_NCCL, l, &host, backend)) == MFRT_OK)
    return MFRT_OK;
  host.raiseFailure(FailureRecord{host.rank(), rc, lastErrorDetail()});
  lender->shutdown(false);
  return rc;
}

/// The backend of a launch whose ranks are processes.
mfrt_status createProcessBackend(mfrt_backend which, const Launch &l,
                                 std::unique_ptr<PluginBackend> &lender,
                                 std::unique_ptr<PluginBackend> &backend) {
  switch (which) {
  case MFRT_BACKEND_TCP:
    return joinRendezvous(l, backend);
  case MFRT_BACKEND_MPI:
    return createPlugin(which, l, nullptr, backend);
  case MFRT_BACKEND_NCCL:
    return createNCCL(l, lender, backend);
  default:
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: unknown backend " + std::to_string(int(which)));
  }
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
  HostTransport *host = backend.hostTransport();
  int local =
      host ? host->localRank() : localRankFromEnvironment(transport.rank());
  if (s.ok())
    s = device->attach(transport.rank(), local % count);
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
  // nccl's host transport's owner, released after the nccl backend.
  std::unique_ptr<PluginBackend> lender;
  std::unique_ptr<PluginBackend> backend;
  if (mfrt_status rc = createProcessBackend(which, l, lender, backend))
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
  lender.reset();
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
  // The rendezvous: given, else MFRT_RENDEZVOUS, else srun's first node
  // (tcp, and nccl when srun started it).
  const char *given = options->rendezvous ? options->rendezvous
                                          : std::getenv("MFRT_RENDEZVOUS");
  std::string rendezvous = given ? given : "";
  if (rendezvous.empty() && (options->backend == MFRT_BACKEND_TCP ||
                             options->backend == MFRT_BACKEND_NCCL))
    rendezvous = slurmRendezvousAddress();
  const Launch l{*layout,
                 second ? &*second : nullptr,
                 devices,
                 timeoutS,
                 activeDevice(),
                 fn,
                 user,
                 rendezvous,
                 options->has_rank ? options->rank : -1,
                 fingerprintOf(options)};
  clearError();
  if (options->backend == MFRT_BACKEND_LOCAL)
    return launchLocal(l);
  if (options->backend == MFRT_BACKEND_TCP && l.rendezvous.empty())
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: the tcp backend needs a rendezvous: rank 0's "
                    "HOST:PORT (--rendezvous, mfrt_options.rendezvous or "
                    "MFRT_RENDEZVOUS), or srun's SLURM_STEP_NODELIST");
  if (options->has_rank && (options->rank < 0 || options->rank >= devices))
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: rank " + std::to_string(options->rank) +
                        " is not one of the plan's " + std::to_string(devices) +
                        " devices (0 to " + std::to_string(devices - 1) + ")");
  return launchPlugin(options->backend, l);
}

extern "C" const char *mfrt_last_error(void) { return lastError().c_str(); }
