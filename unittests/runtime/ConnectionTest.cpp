//===- ConnectionTest.cpp - Finding a connection's socket, and its close --===//
//
// Both ends of a TCP connection on 127.0.0.1 live in this process: the
// accepted socket is the one whose local port is the listener's and whose
// remote port is the client's; its peer closing it shows in peerClosed.
//
//===----------------------------------------------------------------------===//

#include "mfrt/serve/Connection.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace mfrt::serve;

namespace {
/// The port of `fd`'s local (or, with `peer`, remote) end.
int portOf(int fd, bool peer) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len)
                : getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  return rc == 0 ? ntohs(addr.sin_port) : -1;
}

/// A listener, a client connected to it and the accepted socket.
struct Pair {
  int listener = -1, client = -1, accepted = -1;
  Pair() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof(addr);
    if (bind(listener, reinterpret_cast<sockaddr *>(&addr), len) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
      return;
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr *>(&addr), len) != 0)
      return;
    accepted = accept(listener, nullptr, nullptr);
  }
  ~Pair() {
    for (int fd : {listener, client, accepted})
      if (fd >= 0)
        close(fd);
  }
  ConnectionEnds ends() const {
    return {"127.0.0.1", portOf(client, false), portOf(listener, false)};
  }
};

TEST(ConnectionTest, FindsTheAcceptedSocket) {
  Pair p;
  ASSERT_GE(p.accepted, 0);
  EXPECT_EQ(findConnectionSocket(p.ends()), p.accepted);
  // The client's own socket has the ends the other way round.
  ConnectionEnds back = {"127.0.0.1", portOf(p.listener, false),
                         portOf(p.client, false)};
  EXPECT_EQ(findConnectionSocket(back), p.client);
}

TEST(ConnectionTest, NoSocketForOtherEnds) {
  Pair p;
  ASSERT_GE(p.accepted, 0);
  ConnectionEnds ends = p.ends();
  ends.remoteAddr = "10.1.2.3";
  EXPECT_EQ(findConnectionSocket(ends), -1);
  ends = p.ends();
  ends.remotePort = -1;
  EXPECT_EQ(findConnectionSocket(ends), -1);
}

TEST(ConnectionTest, PeerClosedOnlyOnceTheClientCloses) {
  Pair p;
  ASSERT_GE(p.accepted, 0);
  EXPECT_FALSE(peerClosed(p.accepted));
  // A pipelined request is data to read, not a close; the peek leaves it.
  ASSERT_EQ(write(p.client, "G", 1), 1);
  EXPECT_FALSE(peerClosed(p.accepted));
  char byte = 0;
  ASSERT_EQ(read(p.accepted, &byte, 1), 1);
  EXPECT_EQ(byte, 'G');
  close(p.client);
  p.client = -1;
  EXPECT_TRUE(peerClosed(p.accepted));
}
} // namespace
