//===- Launch.h - The plugin loader and the process rank --------*- C++ -*-===//
//
// Internal to libmfrt: the loader of the backend plugins (Plugins.cpp) and
// the rank and world size of this process under a plugin (Launch.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_API_LAUNCH_H
#define MFRT_API_LAUNCH_H

#include "mfrt/comm/Comm.h"

#include <string>

namespace mfrt::api {

/// "local", "mpi", "nccl", "tcp" ("unknown" for any other value).
const char *backendName(mfrt_backend b);

/// Loads libmfrt_<name>.so from $MFRT_PLUGIN_DIR, beside the executable, its
/// ../lib, the build's library directory, or the loader's search path, and
/// returns its create function; nullptr with `*error` set when none loads.
comm::PluginCreateFn loadPlugin(mfrt_backend backend, std::string *error);

/// Under mpi / nccl: this process's rank and world size, kept after
/// mfrt_launch returns; -1 and 0 before a plugin ran.
int processRank();
int processWorldSize();

} // namespace mfrt::api

#endif // MFRT_API_LAUNCH_H
