//===- Runtime.cpp - The mfrt C ABI: launch, groups, ops, counters --------===//
//
// Every C entry point finds the calling rank's state, opens an Op (checks
// that no rank failed, picks the tag sequence and the deadline), runs the
// generic algorithm or the backend's native one, and closes the Op: on
// failure it writes "mfrt: rank R: <op> on group <g>: <what>" to the thread's
// last error and, for a failure of its own, tells every other rank.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/CommRuntime.h"
#include "mfrt/comm/Device.h"
#include "mfrt/backends/LocalBackend.h"
#include "meshfold/Support/PlanText.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>

using namespace mfrt::comm;
using meshfold::LinkClass;
using meshfold::MeshLayout;

namespace {

thread_local RankState *tlsRank = nullptr;
thread_local std::string tlsError;
/// Under mpi / nccl: this process's rank and world size, kept after
/// mfrt_launch returns.
int gProcessRank = -1, gProcessWorld = 0;

/// Token tracing: on/off and the hops every rank of this process recorded.
std::atomic<bool> gTracing{false};
std::mutex gTraceMutex;
std::vector<mfrt_trace_hop> gTraceHops;

std::string fullMessage(const FailureRecord &r) {
  return "mfrt: rank " + std::to_string(r.rank) + ": " + r.detail;
}

/// Sets the thread's last error; returns `code`.
mfrt_status setError(mfrt_status code, const std::string &msg) {
  tlsError = msg;
  return code;
}

/// An error of a call made outside mfrt_launch.
mfrt_status stateError(const char *fn) {
  return setError(MFRT_ERR_STATE,
                  std::string("mfrt: ") + fn + " called outside mfrt_launch");
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

std::vector<std::string> splitAxes(const std::string &text) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    std::string trimmed;
    for (char c : item)
      if (c != ' ' && c != '\t')
        trimmed += c;
    out.push_back(trimmed);
  }
  return out;
}

std::string axisNames(const MeshLayout &layout) {
  std::string out;
  for (const meshfold::MeshAxis &a : layout.spec().attention)
    out += (out.empty() ? "" : ", ") + a.name;
  for (const meshfold::ExpertAxis &a : layout.spec().experts)
    if (out.find(a.name) == std::string::npos)
      out += ", " + a.name;
  return out;
}

//===----------------------------------------------------------------------===//
// Plugins (mpi, nccl)
//===----------------------------------------------------------------------===//

const char *backendName(mfrt_backend b) {
  switch (b) {
  case MFRT_BACKEND_LOCAL:
    return "local";
  case MFRT_BACKEND_MPI:
    return "mpi";
  case MFRT_BACKEND_NCCL:
    return "nccl";
  }
  return "unknown";
}

std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// Loads libmfrt_<name>.so from $MFRT_PLUGIN_DIR, beside the executable, its
/// ../lib, the build's library directory, or the loader's search path.
PluginCreateFn loadPlugin(mfrt_backend backend, std::string *error) {
  const std::string file =
      std::string("libmfrt_") + backendName(backend) + ".so";
  std::vector<std::string> candidates;
  if (const char *dir = std::getenv("MFRT_PLUGIN_DIR"))
    candidates.push_back(std::string(dir) + "/" + file);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string dir = dirOf(exe);
    candidates.push_back(dir + "/" + file);
    candidates.push_back(dir + "/../lib/" + file);
  }
#ifdef MFRT_PLUGIN_BUILD_DIR
  candidates.push_back(std::string(MFRT_PLUGIN_BUILD_DIR) + "/" + file);
#endif
  candidates.push_back(file);
  std::string tried;
  for (const std::string &path : candidates) {
    if (path.find('/') != std::string::npos && access(path.c_str(), R_OK))
      continue;
    // RTLD_GLOBAL: Open MPI's components must see libmpi's symbols.
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      tried += std::string("; ") + dlerror();
      continue;
    }
    auto fn =
        reinterpret_cast<PluginCreateFn>(dlsym(handle, kPluginCreateSymbol));
    if (fn)
      return fn;
    tried += "; " + path + " has no " + kPluginCreateSymbol;
  }
  *error = "the " + std::string(backendName(backend)) +
           " backend is not available: cannot load " + file +
           " (set MFRT_PLUGIN_DIR to the directory holding it" +
           (backend == MFRT_BACKEND_NCCL ? "; it is built only where "
                                           "CUDA and NCCL are installed"
                                         : "") +
           ")" + tried;
  return nullptr;
}

} // namespace

//===----------------------------------------------------------------------===//
// Op, Phase
//===----------------------------------------------------------------------===//

RankState *mfrt::comm::currentRank() { return tlsRank; }

std::string Op::where() const {
  std::string out = name;
  if (group)
    return out + " on group " + group->name;
  if (peer >= 0)
    return out +
           (std::strcmp(name, "send") == 0 ? " to rank " : " from rank ") +
           std::to_string(peer);
  return out;
}

void Op::account(int to, uint64_t bytes) {
  LinkClass link = st.layout.link(st.rank, to);
  if (link == LinkClass::Self)
    return;
  int l = link == LinkClass::NVLink ? MFRT_LINK_NVLINK : MFRT_LINK_IB;
  st.bytes[kind][l][st.layerSlot()] += bytes;
}

bool mfrt::comm::tracing() { return gTracing.load(std::memory_order_relaxed); }

namespace {
void recordTraceHop(const Op &op, int to) {
  if (!tracing())
    return;
  std::lock_guard<std::mutex> lock(gTraceMutex);
  gTraceHops.push_back(mfrt_trace_hop{op.traceLayer, op.traceOp,
                                      int32_t(op.kind), int32_t(op.st.rank),
                                      int32_t(to)});
}
} // namespace

void Op::traceHop(int to) const {
  if (to != st.rank)
    recordTraceHop(*this, to);
}

void Op::traceStay() const { recordTraceHop(*this, st.rank); }

Phase::~Phase() {
  if (!requests.empty())
    (void)op.st.transport.waitAll(requests.data(), requests.size(),
                                  Clock::now(), op.st.timeoutS);
}

void Phase::send(int peer, const ConstSpan *parts, size_t numParts) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < numParts; ++i)
    bytes += parts[i].bytes;
  op.account(peer, bytes);
  requests.push_back(
      op.st.transport.isend(peer, op.tag(phase), parts, numParts));
}

void Phase::recv(int peer, const Span *parts, size_t numParts) {
  requests.push_back(
      op.st.transport.irecv(peer, op.tag(phase), parts, numParts));
}

Status Phase::wait() {
  if (!op.st.faultExitOp.empty() && op.st.faultExitOp == op.name) {
    std::fprintf(stderr,
                 "mfrt: rank %d: fault injection (MFRT_FAULT_EXIT): exiting "
                 "with status 3 inside %s\n",
                 op.st.rank, op.where().c_str());
    std::fflush(stderr);
    _exit(3);
  }
  Status s = op.st.transport.waitAll(requests.data(), requests.size(),
                                     op.deadline, op.st.timeoutS);
  requests.clear();
  return s;
}

namespace {

/// CUDA mode: the kernels queued on the rank's stream finish before a
/// collective reads or writes their buffers.
Status syncDevice() {
  Device *device = activeDevice();
  if (!device || !device->attached())
    return Status::success();
  return device->synchronize();
}

/// Opens an op on a group (handle >= 0) or for a peer (p2p).
Status beginOp(Op &op, int64_t groupHandle, bool p2p) {
  RankState &st = op.st;
  // The trace key and marks first: every call takes them, failed or not.
  op.traceLayer = st.traceLayer;
  op.traceOp = st.traceOp++;
  op.traceMarks.swap(st.traceMarks);
  st.traceMarks.clear();
  op.traceRowElems = st.traceRowElems;
  // The group first, so that every error below names it.
  if (!p2p)
    op.group = st.group(groupHandle);
  if (st.failure.failed())
    return Status::error(MFRT_ERR_STATE, "this rank already failed (" +
                                             st.failure.detail + ")");
  FailureRecord seen;
  if (st.transport.failureSeen(seen))
    return Status::peer(seen);
  op.deadline = deadlineAfter(st.timeoutS);
  if (p2p) {
    op.channel = kP2PChannel;
    return syncDevice();
  }
  if (!op.group)
    return Status::error(MFRT_ERR_ARGUMENT,
                         "no group with handle " + std::to_string(groupHandle) +
                             " (make groups with mfrt_group)");
  op.channel = unsigned(op.group->handle);
  op.seq = op.group->seq++;
  return syncDevice();
}

/// Closes an op: reports a failure (and tells the other ranks about one of
/// this rank's own).
mfrt_status finishOp(Op &op, const Status &s) {
  if (s.ok())
    return MFRT_OK;
  RankState &st = op.st;
  std::string detail = op.where() + ": ";
  if (s.code == MFRT_ERR_PEER)
    detail +=
        "rank " + std::to_string(s.cause.rank) + " failed: " + s.cause.detail;
  else
    detail += s.detail;
  tlsError = "mfrt: rank " + std::to_string(st.rank) + ": " + detail;
  if (s.code != MFRT_ERR_PEER && s.code != MFRT_ERR_STATE &&
      !st.failure.failed()) {
    st.failure = FailureRecord{st.rank, s.code, detail};
    st.transport.raiseFailure(st.failure);
  }
  return s.code;
}

Status checkBuffer(const void *p, int64_t count, const char *what) {
  if (count > 0 && !p)
    return Status::error(MFRT_ERR_ARGUMENT, std::string(what) +
                                                " is NULL with count " +
                                                std::to_string(count));
  return Status::success();
}

Status checkCountDtype(int64_t count, mfrt_dtype dtype) {
  if (count < 0)
    return Status::error(MFRT_ERR_ARGUMENT, "count is " +
                                                std::to_string(count) +
                                                ", but must be >= 0");
  if (dtypeSize(dtype) == 0)
    return Status::error(MFRT_ERR_ARGUMENT,
                         "unknown dtype " + std::to_string(int(dtype)));
  return Status::success();
}

/// Records the hops of a traced group op: every marked row goes to every
/// other member, or, with `block` > 0 (reduce-scatter), to the member whose
/// block of `block` elements holds it.
void traceToMembers(Op &op, int64_t block) {
  const int n = op.group->size();
  std::vector<char> to(static_cast<size_t>(n), block <= 0);
  if (block > 0)
    for (int64_t row : op.traceMarks) {
      int64_t member = row * op.traceRowElems / block;
      if (member >= 0 && member < n)
        to[size_t(member)] = 1;
    }
  for (int i = 0; i < n; ++i)
    if (to[size_t(i)] && i != op.group->index)
      op.traceHop(op.group->members[size_t(i)]);
}

/// Counts what a native collective moves as if it ran the generic (direct)
/// algorithm: `bytesTo(i)` bytes to each other member i.
template <typename F> void accountDirect(Op &op, F bytesTo) {
  for (int i = 0; i < op.group->size(); ++i)
    if (i != op.group->index)
      op.account(op.group->members[size_t(i)], bytesTo(i));
}

} // namespace

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

extern "C" mfrt_status mfrt_launch(const mfrt_options *options,
                                   int (*fn)(void *user), void *user) {
  if (tlsRank)
    return setError(MFRT_ERR_STATE,
                    "mfrt: mfrt_launch called inside mfrt_launch");
  if (!options || !fn)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: mfrt_launch needs options and a function");
  if (!options->plan)
    return setError(MFRT_ERR_ARGUMENT, "mfrt: mfrt_options.plan is NULL");
  std::string error;
  std::optional<MeshLayout> layout = meshfold::layoutFromPlanText(options->plan, &error);
  if (!layout)
    return setError(MFRT_ERR_ARGUMENT, "mfrt: " + error);
  const double timeoutS = resolveTimeout(options);
  const int devices = int(layout->numDevices());
  tlsError.clear();

  Device *device = activeDevice();
  if (options->backend == MFRT_BACKEND_LOCAL) {
    LocalFabric fabric(devices);
    auto body = [&](int rank) {
      // CUDA mode: every rank (thread) on device 0, each with its own stream.
      if (device) {
        Status s = device->attach(rank, 0);
        if (!s.ok()) {
          fabric.raise(FailureRecord{rank, s.code, s.detail});
          return;
        }
      }
      std::unique_ptr<Transport> transport = fabric.transport(rank);
      std::unique_ptr<Compute> host = createHostCompute();
      RankState st(*layout, rank, timeoutS, *transport, *host, nullptr);
      st.faultExitOp = faultExitOpFor(rank);
      tlsRank = &st;
      int rc = fn(user);
      tlsRank = nullptr;
      if (rc != 0 && !fabric.failed())
        fabric.raise(FailureRecord{rank, MFRT_ERR_PEER,
                                   "fn returned " + std::to_string(rc)});
      if (device)
        device->detach();
    };
    std::vector<std::thread> threads;
    threads.reserve(size_t(devices));
    for (int r = 0; r < devices; ++r) {
      try {
        threads.emplace_back(body, r);
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

  if (options->backend != MFRT_BACKEND_MPI &&
      options->backend != MFRT_BACKEND_NCCL)
    return setError(MFRT_ERR_ARGUMENT,
                    "mfrt: unknown backend " +
                        std::to_string(int(options->backend)));
  PluginCreateFn create = loadPlugin(options->backend, &error);
  if (!create)
    return setError(MFRT_ERR_BACKEND, "mfrt: " + error);
  PluginRequest request;
  request.backend = options->backend;
  request.devices = devices;
  request.timeoutS = timeoutS;
  request.device = device;
  std::unique_ptr<PluginBackend> backend(create(&request, &error));
  if (!backend)
    return setError(MFRT_ERR_BACKEND, std::string("mfrt: ") +
                                          backendName(options->backend) +
                                          " backend: " + error);
  Transport &transport = backend->transport();
  gProcessRank = transport.rank();
  gProcessWorld = transport.size();
  if (transport.size() != devices) {
    std::string msg = "mfrt: rank " + std::to_string(transport.rank()) +
                      ": the " + backendName(options->backend) +
                      " backend runs " + std::to_string(transport.size()) +
                      " processes (the MPI world size), but the plan has " +
                      std::to_string(devices) + " devices: start it with " +
                      "mpirun -np " + std::to_string(devices);
    backend->shutdown(true);
    return setError(MFRT_ERR_ARGUMENT, msg);
  }
  // CUDA mode: this process's rank on device (local rank mod device count),
  // unless the plugin attached it already (nccl, which shares the stream).
  if (device && !device->attached()) {
    int count = 0;
    Status s = device->deviceCount(count);
    if (s.ok())
      s = device->attach(transport.rank(),
                         localRankFromEnvironment(transport.rank()) % count);
    if (!s.ok()) {
      std::string msg =
          "mfrt: rank " + std::to_string(transport.rank()) + ": " + s.detail;
      transport.raiseFailure(FailureRecord{transport.rank(), s.code, s.detail});
      backend->shutdown(false);
      return setError(s.code, msg);
    }
  }
  std::unique_ptr<Compute> host;
  Compute *compute = backend->compute();
  if (!compute) {
    host = createHostCompute();
    compute = host.get();
  }
  FailureRecord outcome;
  {
    RankState st(*layout, transport.rank(), timeoutS, transport, *compute,
                 backend->native());
    st.faultExitOp = faultExitOpFor(st.rank);
    tlsRank = &st;
    int rc = fn(user);
    tlsRank = nullptr;
    FailureRecord mine = st.failure;
    FailureRecord seen;
    if (!mine.failed() && transport.failureSeen(seen))
      mine = seen;
    if (!mine.failed() && rc != 0) {
      mine = FailureRecord{st.rank, MFRT_ERR_PEER,
                           "fn returned " + std::to_string(rc)};
      transport.raiseFailure(mine);
    }
    outcome = backend->finish(mine, timeoutS);
  }
  backend->shutdown(!outcome.failed());
  // The plugin's device memory and communicators go before the stream.
  backend.reset();
  if (device)
    device->detach();
  if (!outcome.failed())
    return MFRT_OK;
  return setError(outcome.status, fullMessage(outcome));
}

extern "C" const char *mfrt_last_error(void) { return tlsError.c_str(); }

extern "C" int mfrt_rank(void) {
  return tlsRank ? tlsRank->rank : gProcessRank;
}

extern "C" int mfrt_world_size(void) {
  return tlsRank ? tlsRank->size : gProcessWorld;
}

//===----------------------------------------------------------------------===//
// Groups
//===----------------------------------------------------------------------===//

extern "C" int64_t mfrt_group(const char *axesText) {
  RankState *st = tlsRank;
  if (!st) {
    stateError("mfrt_group");
    return -1;
  }
  auto fail = [&](mfrt_status code, const std::string &what) -> int64_t {
    setError(code, "mfrt: rank " + std::to_string(st->rank) +
                       ": mfrt_group(\"" + (axesText ? axesText : "") +
                       "\"): " + what);
    return -1;
  };
  if (!axesText)
    return fail(MFRT_ERR_ARGUMENT, "axes is NULL");
  std::vector<std::string> axes = splitAxes(axesText);
  std::string key;
  for (const std::string &a : axes) {
    if (a.empty())
      return fail(MFRT_ERR_ARGUMENT, "empty axis name");
    if (!st->layout.hasAxis(a))
      return fail(MFRT_ERR_ARGUMENT, "the plan has no axis '" + a +
                                         "' (axes: " + axisNames(st->layout) +
                                         ")");
    key += (key.empty() ? "" : ",") + a;
  }
  if (key.empty())
    return fail(MFRT_ERR_ARGUMENT, "no axes");
  auto found = st->groupByAxes.find(key);
  if (found != st->groupByAxes.end())
    return found->second;
  if (st->groups.size() >= kMaxGroups)
    return fail(MFRT_ERR_ARGUMENT,
                "too many groups (at most " + std::to_string(kMaxGroups) + ")");
  auto g = std::make_unique<Group>();
  g->handle = int64_t(st->groups.size());
  g->axes = key;
  for (int64_t m : st->layout.group(st->rank, axes))
    g->members.push_back(int(m));
  g->index = int(st->layout.groupRank(st->rank, axes));
  g->name = key + "{";
  for (size_t i = 0; i < g->members.size(); ++i) {
    g->name += (i ? "," : "") + std::to_string(g->members[i]);
    g->indexOf[g->members[i]] = int(i);
  }
  g->name += "}";
  if (st->native) {
    Status s = st->native->createGroup(g->handle, g->members, g->index);
    if (!s.ok()) {
      Op op(*st, "mfrt_group", MFRT_OP_BARRIER);
      finishOp(op, s);
      return -1;
    }
  }
  st->groupByAxes[key] = g->handle;
  st->groups.push_back(std::move(g));
  return st->groups.back()->handle;
}

extern "C" int mfrt_group_size(int64_t group) {
  Group *g = tlsRank ? tlsRank->group(group) : nullptr;
  return g ? g->size() : -1;
}

extern "C" int mfrt_group_rank(int64_t group) {
  Group *g = tlsRank ? tlsRank->group(group) : nullptr;
  return g ? g->index : -1;
}

extern "C" int mfrt_group_member(int64_t group, int i) {
  Group *g = tlsRank ? tlsRank->group(group) : nullptr;
  if (!g || i < 0 || i >= g->size())
    return -1;
  return g->members[size_t(i)];
}

extern "C" void mfrt_set_layer(int64_t layer) {
  if (!tlsRank)
    return;
  tlsRank->layer = layer;
  if (layer >= 0) {
    tlsRank->traceLayer = layer;
    tlsRank->traceOp = 0;
  }
}

//===----------------------------------------------------------------------===//
// Token tracing
//===----------------------------------------------------------------------===//

extern "C" void mfrt_trace_enable(int on) { gTracing = on != 0; }

extern "C" void mfrt_trace_mark(const int64_t *rows, int64_t n,
                                int64_t row_elems) {
  if (!tlsRank || !tracing())
    return;
  tlsRank->traceMarks.assign(rows, rows + (rows && n > 0 ? n : 0));
  tlsRank->traceRowElems = row_elems;
}

extern "C" void mfrt_trace_new_request(void) {
  if (!tlsRank)
    return;
  tlsRank->traceLayer = -1;
  tlsRank->traceOp = 0;
}

extern "C" int64_t mfrt_trace_hops(mfrt_trace_hop *out, int64_t max) {
  std::lock_guard<std::mutex> lock(gTraceMutex);
  for (int64_t i = 0; out && i < max && i < int64_t(gTraceHops.size()); ++i)
    out[i] = gTraceHops[size_t(i)];
  return int64_t(gTraceHops.size());
}

extern "C" void mfrt_trace_clear(void) {
  std::lock_guard<std::mutex> lock(gTraceMutex);
  gTraceHops.clear();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {
using NativeCollective = Status (Native::*)(int64_t, const void *, void *,
                                            int64_t, mfrt_dtype,
                                            Clock::time_point, double);
using CoreCollective = Status (*)(Op &, const void *, void *, int64_t,
                                  mfrt_dtype);

/// The entry points of the buffer collectives: check the arguments, then run
/// the backend's own collective (counting `bytesTo(member)` per member) or
/// the core's over the transport.
template <typename BytesTo>
mfrt_status runCollective(const char *entry, const char *name,
                          mfrt_op_kind kind, int64_t group, const void *send,
                          void *recv, int64_t count, mfrt_dtype dtype,
                          NativeCollective native, CoreCollective core,
                          BytesTo bytesTo, bool byBlock = false) {
  RankState *st = tlsRank;
  if (!st)
    return stateError(entry);
  Op op(*st, name, kind);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(send, count, "send");
  if (s.ok())
    s = checkBuffer(recv, count, "recv");
  if (s.ok() && st->native) {
    accountDirect(op, [&](int i) { return bytesTo(op, i); });
    s = (st->native->*native)(op.group->handle, send, recv, count, dtype,
                              op.deadline, st->timeoutS);
  } else if (s.ok()) {
    s = core(op, send, recv, count, dtype);
  }
  if (s.ok() && op.traced())
    traceToMembers(op, byBlock ? count : 0);
  return finishOp(op, s);
}

/// Opens a point-to-point op with `peer` and checks its arguments.
Status beginPeerOp(Op &op, int peer, const void *buf, int64_t count,
                   mfrt_dtype dtype) {
  op.peer = peer;
  Status s = beginOp(op, -1, true);
  if (s.ok() && (peer < 0 || peer >= op.st.size))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "peer " + std::to_string(peer) + " is not a rank (0.." +
                          std::to_string(op.st.size - 1) + ")");
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(buf, count, "buf");
  return s;
}

/// A traced ring step's message goes to the next group rank.
void traceRingNext(Op &op) {
  const int n = op.group->size();
  op.traceHop(op.group->members[size_t((op.group->index + 1) % n)]);
}
} // namespace

extern "C" mfrt_status mfrt_all_gather(int64_t group, const void *send,
                                       void *recv, int64_t count,
                                       mfrt_dtype dtype) {
  return runCollective(
      "mfrt_all_gather", "all_gather", MFRT_OP_ALL_GATHER, group, send, recv,
      count, dtype, &Native::allGather, &allGather,
      [&](Op &, int) { return uint64_t(count * int64_t(dtypeSize(dtype))); });
}

extern "C" mfrt_status mfrt_reduce_scatter(int64_t group, const void *send,
                                           void *recv, int64_t count,
                                           mfrt_dtype dtype) {
  return runCollective(
      "mfrt_reduce_scatter", "reduce_scatter", MFRT_OP_REDUCE_SCATTER, group,
      send, recv, count, dtype, &Native::reduceScatter, &reduceScatter,
      [&](Op &, int) { return uint64_t(count * int64_t(dtypeSize(dtype))); },
      /*byBlock=*/true);
}

extern "C" mfrt_status mfrt_all_reduce(int64_t group, const void *send,
                                       void *recv, int64_t count,
                                       mfrt_dtype dtype) {
  // Natively: reduce-scatter + all-gather of the blocks, each block to every
  // member.
  return runCollective(
      "mfrt_all_reduce", "all_reduce", MFRT_OP_ALL_REDUCE, group, send, recv,
      count, dtype, &Native::allReduce, &allReduce, [&](Op &op, int i) {
        const int n = op.group->size(), me = op.group->index;
        auto block = [&](int j) { return count * (j + 1) / n - count * j / n; };
        return uint64_t((block(i) + block(me)) * int64_t(dtypeSize(dtype)));
      });
}

extern "C" mfrt_status mfrt_kv_ring_step(int64_t group, const void *k,
                                         const void *v, void *k_out,
                                         void *v_out, int64_t count,
                                         mfrt_dtype dtype) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_kv_ring_step");
  Op op(*st, "kv_ring_step", MFRT_OP_KV_RING);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = checkCountDtype(count, dtype);
  for (auto [p, what] : {std::pair<const void *, const char *>{k, "k"},
                         {v, "v"},
                         {k_out, "k_out"},
                         {v_out, "v_out"}})
    if (s.ok())
      s = checkBuffer(p, count, what);
  if (s.ok() && count > 0 &&
      (k_out == k || k_out == v || v_out == k || v_out == v))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "k_out and v_out must not be k or v (the step sends "
                      "while it receives)");
  if (s.ok())
    s = kvRingStep(op, k, v, k_out, v_out, count, dtype);
  if (s.ok() && op.traced())
    traceRingNext(op);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_ring_step_bytes(int64_t group, const void *send,
                                            void *recv, int64_t bytes) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_ring_step_bytes");
  Op op(*st, "ring_step", MFRT_OP_KV_RING);
  Status s = beginOp(op, group, false);
  if (s.ok() && bytes < 0)
    s = Status::error(MFRT_ERR_ARGUMENT, "bytes is " + std::to_string(bytes) +
                                             ", but must be >= 0");
  if (s.ok())
    s = checkBuffer(send, bytes, "send");
  if (s.ok())
    s = checkBuffer(recv, bytes, "recv");
  if (s.ok() && bytes > 0 && send == recv)
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "recv must not be send (the step sends while it "
                      "receives)");
  if (s.ok())
    s = ringStep(op, {ConstSpan{send, size_t(bytes)}},
                 {Span{recv, size_t(bytes)}});
  if (s.ok() && op.traced())
    traceRingNext(op);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_send(int peer, const void *buf, int64_t count,
                                 mfrt_dtype dtype) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_send");
  Op op(*st, "send", MFRT_OP_PP);
  Status s = beginPeerOp(op, peer, buf, count, dtype);
  if (s.ok())
    s = sendTo(op, peer, buf, count, dtype);
  if (s.ok() && op.traced())
    op.traceHop(peer);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_recv(int peer, void *buf, int64_t count,
                                 mfrt_dtype dtype) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_recv");
  Op op(*st, "recv", MFRT_OP_PP);
  Status s = beginPeerOp(op, peer, buf, count, dtype);
  if (s.ok())
    s = recvFrom(op, peer, buf, count, dtype);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_gather(int64_t group, int root, const void *send,
                                   void *recv, int64_t count,
                                   mfrt_dtype dtype) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_gather");
  Op op(*st, "gather", MFRT_OP_GATHER);
  Status s = beginOp(op, group, false);
  if (s.ok() && (root < 0 || root >= op.group->size()))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "root " + std::to_string(root) +
                          " is not a group rank (0.." +
                          std::to_string(op.group->size() - 1) + ")");
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(send, count, "send");
  if (s.ok() && root == op.group->index)
    s = checkBuffer(recv, count, "recv (on the root)");
  if (s.ok())
    s = gather(op, root, send, recv, count, dtype);
  if (s.ok() && op.traced())
    op.traceHop(op.group->members[size_t(root)]);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_barrier(int64_t group) {
  RankState *st = tlsRank;
  if (!st)
    return stateError("mfrt_barrier");
  Op op(*st, "barrier", MFRT_OP_BARRIER);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = barrier(op);
  return finishOp(op, s);
}

//===----------------------------------------------------------------------===//
// Counters
//===----------------------------------------------------------------------===//

extern "C" uint64_t mfrt_bytes_sent(mfrt_op_kind kind, mfrt_link link,
                                    int64_t layer) {
  RankState *st = tlsRank;
  if (!st || kind < 0 || kind >= MFRT_OP_KIND_COUNT || link < 0 ||
      link >= MFRT_LINK_COUNT || layer < -1 || layer >= MFRT_MAX_LAYERS)
    return 0;
  return st->bytes[kind][link][layer + 1];
}

extern "C" uint64_t mfrt_bytes_sent_total(mfrt_op_kind kind, mfrt_link link) {
  RankState *st = tlsRank;
  if (!st || kind < 0 || kind >= MFRT_OP_KIND_COUNT || link < 0 ||
      link >= MFRT_LINK_COUNT)
    return 0;
  uint64_t total = 0;
  for (int l = 0; l < kLayerSlots; ++l)
    total += st->bytes[kind][link][l];
  return total;
}

extern "C" void mfrt_reset_counters(void) {
  if (tlsRank)
    std::memset(tlsRank->bytes, 0, sizeof(tlsRank->bytes));
}

extern "C" const char *mfrt_op_kind_name(mfrt_op_kind kind) {
  switch (kind) {
  case MFRT_OP_ALL_GATHER:
    return "all_gather";
  case MFRT_OP_REDUCE_SCATTER:
    return "reduce_scatter";
  case MFRT_OP_KV_RING:
    return "kv_ring";
  case MFRT_OP_DISPATCH:
    return "dispatch";
  case MFRT_OP_COMBINE:
    return "combine";
  case MFRT_OP_PP:
    return "pp";
  case MFRT_OP_GATHER:
    return "gather";
  case MFRT_OP_ALL_REDUCE:
    return "all_reduce";
  case MFRT_OP_BARRIER:
    return "barrier";
  case MFRT_OP_KIND_COUNT:
    break;
  }
  return "unknown";
}

namespace mfrt::comm {
/// For Dispatch.cpp: op scaffolding shared with the C entry points.
Status beginGroupOp(Op &op, int64_t group) { return beginOp(op, group, false); }
mfrt_status finishGroupOp(Op &op, const Status &s) { return finishOp(op, s); }
mfrt_status outsideLaunch(const char *fn) { return stateError(fn); }
} // namespace mfrt::comm
