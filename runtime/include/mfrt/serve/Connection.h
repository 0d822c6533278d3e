//===- Connection.h - A client's connection, closed or not ------*- C++ -*-===//
//
// A non-streamed completion answers once, when it ends: until then its
// handler writes nothing, so only the socket tells that the client went
// away. cpp-httplib 0.11 (Debian's) gives a handler neither its socket nor
// a closed-connection check (`Request::is_connection_closed` came later), so
// the socket is found by the addresses of its two ends, which the request
// records and which name one connection (Connection.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_SERVE_CONNECTION_H
#define MFRT_SERVE_CONNECTION_H

#include <string>

namespace mfrt::serve {

/// The ends of one TCP connection, as cpp-httplib records them in a request
/// (numeric host, port).
struct ConnectionEnds {
  std::string remoteAddr;
  int remotePort = -1;
  int localPort = -1;
};

/// This process's socket of the connection `ends`, or -1 if none.
int findConnectionSocket(const ConnectionEnds &ends);

/// Whether the peer of connected socket `fd` closed it or reset it (a peek
/// that reads the end of the stream or fails). Data the peer sent next (a
/// pipelined request) is left to be read and counts as open. A client that
/// shut down only its sending side also reads as gone, as with cpp-httplib's
/// own later check; HTTP clients keep both sides open while they wait.
bool peerClosed(int fd);

} // namespace mfrt::serve

#endif // MFRT_SERVE_CONNECTION_H
