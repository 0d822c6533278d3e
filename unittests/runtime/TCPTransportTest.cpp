//===- TCPTransportTest.cpp - The tcp backend's rendezvous and transport --===//
//
// Ranks as threads of this process, meeting on 127.0.0.1: the rendezvous
// (a stray connection ignored, a rank claimed twice refused), messages in
// both orders (receive posted before or after the message), empty and
// multi-part ones, a size mismatch, a lost peer; and the address rules,
// Slurm's host lists and srun's default address.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/TCPTransport.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

using namespace mfrt::comm;

namespace {

uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

RendezvousConfig config(uint16_t port, int rank, int size) {
  RendezvousConfig c;
  c.host = "127.0.0.1";
  c.port = port;
  c.rank = rank;
  c.size = size;
  c.fingerprint = 42;
  c.timeoutS = 10;
  return c;
}

/// Runs body(rank, transport) on `size` threads after their rendezvous.
void withRanks(int size, const std::function<void(int, TCPTransport &)> &body) {
  const uint16_t port = freePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      std::string error;
      auto t = TCPTransport::create(config(port, r, size), &error);
      ASSERT_TRUE(t) << error;
      body(r, *t);
      FailureRecord outcome = t->finish(FailureRecord{}, 10);
      EXPECT_FALSE(outcome.failed()) << outcome.detail;
      t->shutdown(true);
    });
  for (std::thread &t : threads)
    t.join();
}

Status wait(TCPTransport &t, std::vector<Request *> reqs) {
  return t.waitAll(reqs.data(), reqs.size(), deadlineAfter(10), 10);
}

} // namespace

TEST(TCPTransport, EveryPairExchangesInBothOrders) {
  const int n = 5;
  withRanks(n, [&](int me, TCPTransport &t) {
    EXPECT_EQ(t.size(), n);
    EXPECT_EQ(t.localRank(), me); // one host: the rank's index on it
    // Sends first to higher ranks (their receives come later: early
    // messages), receives first from lower ones.
    std::vector<int64_t> got(n, -1);
    std::vector<int64_t> mine(n);
    std::vector<Request *> reqs;
    for (int p = 0; p < n; ++p) {
      if (p == me)
        continue;
      mine[size_t(p)] = me * 100 + p;
      ConstSpan part{&mine[size_t(p)], sizeof(int64_t)};
      Span in{&got[size_t(p)], sizeof(int64_t)};
      if (p > me) {
        reqs.push_back(t.isend(p, 7, &part, 1));
        reqs.push_back(t.irecv(p, 7, &in, 1));
      } else {
        reqs.push_back(t.irecv(p, 7, &in, 1));
        reqs.push_back(t.isend(p, 7, &part, 1));
      }
    }
    Status s = wait(t, reqs);
    ASSERT_TRUE(s.ok()) << s.detail;
    for (int p = 0; p < n; ++p)
      if (p != me)
        EXPECT_EQ(got[size_t(p)], p * 100 + me);
  });
}

TEST(TCPTransport, PartsEmptyMessagesFifoAndSelf) {
  withRanks(2, [&](int me, TCPTransport &t) {
    const int peer = 1 - me;
    // Three messages on one tag arrive in order; parts split differently on
    // each side; an empty message; one to itself.
    std::vector<char> big(1 << 20);
    for (size_t i = 0; i < big.size(); ++i)
      big[i] = char(i * 7 + me);
    int a = me, b = 10 + me;
    ConstSpan first[] = {{&a, sizeof(a)}, {big.data(), big.size()}};
    ConstSpan second{&b, sizeof(b)};
    std::vector<Request *> reqs = {
        t.isend(peer, 3, first, 2), t.isend(peer, 3, &second, 1),
        t.isend(peer, 4, nullptr, 0), t.isend(me, 5, &second, 1)};
    std::vector<char> in(sizeof(int) + big.size());
    int c = -1, self = -1;
    Span whole{in.data(), in.size()};
    Span next{&c, sizeof(c)};
    Span own{&self, sizeof(self)};
    reqs.push_back(t.irecv(peer, 3, &whole, 1));
    reqs.push_back(t.irecv(peer, 3, &next, 1));
    reqs.push_back(t.irecv(peer, 4, nullptr, 0));
    reqs.push_back(t.irecv(me, 5, &own, 1));
    Status s = wait(t, reqs);
    ASSERT_TRUE(s.ok()) << s.detail;
    int head;
    std::memcpy(&head, in.data(), sizeof(head));
    EXPECT_EQ(head, peer);
    EXPECT_EQ(in[sizeof(int) + 12345], char(12345 * 7 + peer));
    EXPECT_EQ(c, 10 + peer);
    EXPECT_EQ(self, 10 + me);
  });
}

TEST(TCPTransport, SizeMismatchIsAnError) {
  withRanks(2, [&](int me, TCPTransport &t) {
    int64_t v = 1;
    if (me == 0) {
      ConstSpan part{&v, sizeof(v)};
      ASSERT_TRUE(wait(t, {t.isend(1, 9, &part, 1)}).ok());
      return;
    }
    int32_t small = 0;
    Span part{&small, sizeof(small)};
    Status s = wait(t, {t.irecv(0, 9, &part, 1)});
    EXPECT_EQ(s.code, MFRT_ERR_BACKEND);
    EXPECT_NE(s.detail.find("rank 0 sent 8 bytes where 4 were expected"),
              std::string::npos)
        << s.detail;
  });
}

TEST(TCPTransport, StrayConnectionIgnoredAndDuplicateRankRefused) {
  const uint16_t port = freePort();
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  // Rank 0, ranks 1 and 1 again, and a stray connection that sends junk.
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      RendezvousConfig c = config(port, i == 2 ? 1 : i, 3);
      c.timeoutS = i == 0 ? 5 : 8;
      if (i == 2)
        usleep(200000);
      EXPECT_FALSE(TCPTransport::create(c, &errors[size_t(i)]));
    });
  threads.emplace_back([&] {
    usleep(100000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0)
      (void)!write(fd, "GET / HTTP/1.0\r\n\r\n", 18);
    close(fd);
  });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(errors[0], "rendezvous: two processes say they are rank 1 (from "
                       "127.0.0.1 and 127.0.0.1)");
  EXPECT_EQ(errors[1], errors[0] + " (rank 0 reports)");
}

TEST(TCPTransport, LostPeerIsNamed) {
  const uint16_t port = freePort();
  std::thread quitter([&] {
    std::string error;
    auto t = TCPTransport::create(config(port, 1, 2), &error);
    ASSERT_TRUE(t) << error;
    // Gone without a word: its socket closes.
  });
  std::string error;
  auto t = TCPTransport::create(config(port, 0, 2), &error);
  ASSERT_TRUE(t) << error;
  quitter.join();
  int v = 0;
  Span part{&v, sizeof(v)};
  Status s = wait(*t, {t->irecv(1, 1, &part, 1)});
  EXPECT_EQ(s.code, MFRT_ERR_PEER);
  EXPECT_EQ(s.cause.rank, 1);
  EXPECT_NE(s.cause.detail.find("exited before the end of the launch"),
            std::string::npos)
      << s.cause.detail;
}

TEST(TCPTransport, RendezvousAddresses) {
  std::string host, error;
  uint16_t port = 0;
  EXPECT_TRUE(parseRendezvousAddress("node01:29500", host, port, &error));
  EXPECT_EQ(host, "node01");
  EXPECT_EQ(port, 29500);
  EXPECT_TRUE(parseRendezvousAddress("[::1]:80", host, port, &error));
  EXPECT_EQ(host, "::1");
  for (const char *bad : {"node01", ":80", "h:0", "h:65536", "h:8x", "h:"}) {
    EXPECT_FALSE(parseRendezvousAddress(bad, host, port, &error)) << bad;
    EXPECT_NE(error.find("must be HOST:PORT"), std::string::npos);
  }
  EXPECT_EQ(firstSlurmHost("node[01-04,07],gpu1"), "node01");
  EXPECT_EQ(firstSlurmHost("gpu1,node[01-04]"), "gpu1");
  EXPECT_EQ(firstSlurmHost("rack[2-3]-n[5,6]"), "rack2-n5");
  EXPECT_EQ(firstSlurmHost("x[7]"), "x7");
}

TEST(TCPTransport, SrunDefaultAddress) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_RANK");
  unsetenv("PMIX_RANK");
  setenv("SLURM_STEP_NODELIST", "gpu[003-010]", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_STEP_NUM_TASKS", "32", 1);
  setenv("SLURM_JOB_ID", "1234", 1);
  setenv("SLURM_STEP_ID", "2", 1);
  EXPECT_EQ(slurmRendezvousAddress(),
            "gpu003:" + std::to_string(20000 + (16 * 1234 + 2) % 20000));
  setenv("PMIX_RANK", "5", 1); // srun --mpi=pmix: MPI's own bootstrap
  EXPECT_EQ(slurmRendezvousAddress(), "");
  unsetenv("PMIX_RANK");
  unsetenv("SLURM_STEP_NUM_TASKS"); // a batch script, not a step's task
  EXPECT_EQ(slurmRendezvousAddress(), "");
  for (const char *v :
       {"SLURM_STEP_NODELIST", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID"})
    unsetenv(v);
}
