//===- MPIPlugin.cpp - libmfrt_mpi.so: the mpi backend --------------------===//
//
// One process per rank (mpirun -np <devices>); host memory. mfrt_launch
// loads this plugin with dlopen and calls mfrt_comm_plugin_create; for the
// nccl backend under mpirun it takes the backend's host transport.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/MPITransport.h"

using namespace mfrt::comm;

extern "C" __attribute__((visibility("default"))) PluginBackend *
mfrt_comm_plugin_create(const PluginRequest *request, std::string *error) {
  if (!request || request->abiVersion != kPluginAbiVersion) {
    *error = "libmfrt_mpi.so was built for another runtime version";
    return nullptr;
  }
  if (request->backend != MFRT_BACKEND_MPI) {
    *error = "libmfrt_mpi.so provides only the mpi backend";
    return nullptr;
  }
  std::unique_ptr<MPITransport> t = MPITransport::create(error);
  if (!t)
    return nullptr;
  return new HostBackend(std::move(t));
}
