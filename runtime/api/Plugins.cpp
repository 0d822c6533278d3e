//===- Plugins.cpp - The loader of the backend plugins (mpi, nccl) --------===//
//
// `mpi` and `nccl` are shared objects that mfrt_launch loads with dlopen, so
// an executable links only libmfrt.a and still runs every backend.
//
//===----------------------------------------------------------------------===//

#include "mfrt/api/Launch.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <vector>

using namespace mfrt::comm;

namespace {
std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}
} // namespace

const char *mfrt::api::backendName(mfrt_backend b) {
  switch (b) {
  case MFRT_BACKEND_LOCAL:
    return "local";
  case MFRT_BACKEND_MPI:
    return "mpi";
  case MFRT_BACKEND_NCCL:
    return "nccl";
  case MFRT_BACKEND_TCP:
    return "tcp";
  }
  return "unknown";
}

PluginCreateFn mfrt::api::loadPlugin(mfrt_backend backend, std::string *error) {
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
