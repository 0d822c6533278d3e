//===- OpScaffold.h - The core under the C entry points ---------*- C++ -*-===//
//
// Internal to libmfrt: the calling thread's rank state and last error, the
// opening and closing of an Op around every collective, and the store of the
// token trace's hops (Op.cpp). The C ABI (runtime/api) is written on these;
// the core itself calls none of the C ABI.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_OPSCAFFOLD_H
#define MFRT_COMM_OPSCAFFOLD_H

#include "mfrt/comm/CommRuntime.h"

#include <string>

namespace mfrt::comm {

/// Makes `st` the calling thread's rank state (nullptr: none), for the
/// duration of the user's function in mfrt_launch.
void setCurrentRank(RankState *st);

/// The calling thread's last error (mfrt_last_error); "" when none.
const std::string &lastError();
/// Sets the calling thread's last error to `msg`; returns `code`.
mfrt_status setError(mfrt_status code, const std::string &msg);
/// Clears the calling thread's last error.
void clearError();
/// The error of an entry point called outside mfrt_launch:
/// "mfrt: <fn> called outside mfrt_launch" (MFRT_ERR_STATE).
mfrt_status outsideLaunch(const char *fn);

/// Opens an op on a group (`groupHandle`) or, with `p2p`, for `op.peer`:
/// takes the trace key and marks, checks that no rank failed, picks the
/// group, tag sequence and deadline, and (CUDA mode) synchronizes the
/// rank's stream.
Status beginOp(Op &op, int64_t groupHandle, bool p2p);
/// Closes an op: on failure writes "mfrt: rank R: <where>: <what>" to the
/// thread's last error and tells the other ranks about a failure of this
/// rank's own. Returns the op's status.
mfrt_status finishOp(Op &op, const Status &s);

/// Token tracing: turns the recording of hops on or off (see tracing()).
void setTracing(bool on);
/// Copies up to `max` of the hops every rank of this process recorded to
/// `out` (may be NULL); returns how many were recorded.
int64_t traceHops(mfrt_trace_hop *out, int64_t max);
/// Forgets the recorded hops.
void clearTraceHops();

} // namespace mfrt::comm

#endif // MFRT_COMM_OPSCAFFOLD_H
