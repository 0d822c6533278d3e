//===- Rendezvous.cpp - How the tcp backend's processes find each other ---===//
//
// TCPTransport.h describes the protocol. Every socket is non-blocking and
// every wait is a poll bounded by the rendezvous's one deadline, so a missing
// or dead rank ends each process with one line, never a hang.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/TCPTransport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

using namespace mfrt::comm;

namespace {

constexpr char kMagic[8] = {'m', 'e', 's', 'h', 'f', 'o', 'l', 'd'};
constexpr uint32_t kVersion = 1;

/// A rank's greeting to rank 0.
struct Greeting {
  char magic[8];
  uint32_t version;
  int32_t rank, size, localHint;
  uint64_t fingerprint;
  uint32_t port;
  char host[64];
};

/// Rank 0's answer: a status, then the table or the error's text.
struct AnswerHead {
  char magic[8];
  int32_t failed;
  uint32_t bytes;
};
struct TableEntry {
  char address[64];
  uint32_t port;
  int32_t localRank;
};

/// A rank's greeting to a lower rank above 0.
struct MeshGreeting {
  char magic[8];
  int32_t rank;
  uint64_t fingerprint;
};

/// A socket closed when it goes out of scope unless released.
class Socket {
public:
  explicit Socket(int fd = -1) : fd(fd) {}
  Socket(Socket &&o) noexcept : fd(o.release()) {}
  Socket &operator=(Socket &&o) noexcept {
    reset(o.release());
    return *this;
  }
  ~Socket() { reset(); }
  int get() const { return fd; }
  int release() { return std::exchange(fd, -1); }
  void reset(int next = -1) {
    if (fd >= 0)
      close(fd);
    fd = next;
  }

private:
  int fd;
};

int msUntil(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                  Clock::now())
                .count();
  return int(std::max<long long>(0, std::min<long long>(ms, 1000)));
}

/// Waits until `fd` is ready for `events`; false at the deadline.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, msUntil(deadline));
    if (n > 0)
      return true;
    if (n < 0 && errno != EINTR)
      return true; // the next call reports the error
    if (Clock::now() >= deadline)
      return false;
  }
}

enum class IO { Ok, Timeout, Closed, Error };

IO sendAll(int fd, const void *data, size_t bytes, Clock::time_point deadline) {
  const char *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFor(fd, POLLOUT, deadline))
        return IO::Timeout;
    } else {
      return errno == EPIPE || errno == ECONNRESET ? IO::Closed : IO::Error;
    }
  }
  return IO::Ok;
}

IO recvAll(int fd, void *data, size_t bytes, Clock::time_point deadline) {
  char *p = static_cast<char *>(data);
  while (bytes) {
    ssize_t n = recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
    } else if (n == 0) {
      return IO::Closed;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!waitFor(fd, POLLIN, deadline))
        return IO::Timeout;
    } else {
      return errno == ECONNRESET ? IO::Closed : IO::Error;
    }
  }
  return IO::Ok;
}

void tuneDataSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string secondsText(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", s);
  return text;
}

struct AddrInfoList {
  addrinfo *head = nullptr;
  ~AddrInfoList() {
    if (head)
      freeaddrinfo(head);
  }
};

bool resolve(const std::string &host, uint16_t port, AddrInfoList &list,
             std::string *error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                       &list.head);
  if (rc != 0) {
    *error = "rendezvous: cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  return true;
}

/// One non-blocking connect; 0 when connected, else the errno.
int connectOnce(const addrinfo &ai, Socket &out, Clock::time_point deadline) {
  Socket s(socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai.ai_protocol));
  if (s.get() < 0)
    return errno;
  if (connect(s.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS)
      return errno;
    if (!waitFor(s.get(), POLLOUT, deadline))
      return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err)
      return err;
  }
  out = std::move(s);
  return 0;
}

/// Connects to HOST:PORT, retrying until the deadline (the listener may not
/// be up yet); `who` names it in the error.
bool dial(const std::string &host, uint16_t port, const std::string &who,
          double timeoutS, Clock::time_point deadline, Socket &out,
          std::string *error) {
  AddrInfoList list;
  if (!resolve(host, port, list, error))
    return false;
  int lastErr = ETIMEDOUT;
  while (true) {
    for (addrinfo *ai = list.head; ai; ai = ai->ai_next)
      if ((lastErr = connectOnce(
               *ai, out,
               std::min(deadline, Clock::now() + std::chrono::seconds(2)))) ==
          0)
        return true;
    if (Clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "rendezvous: no " + who + " at " + host + ":" +
           std::to_string(port) + " after " + secondsText(timeoutS) + " s (" +
           std::strerror(lastErr) + ")";
  return false;
}

/// A listening socket on `addr` (its port 0: one the kernel picks).
bool listenOn(const sockaddr *addr, socklen_t len, int backlog, Socket &out,
              std::string *error) {
  Socket s(
      socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int one = 1;
  if (s.get() >= 0)
    setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (s.get() < 0 || bind(s.get(), addr, len) != 0 ||
      listen(s.get(), backlog) != 0) {
    *error = std::strerror(errno);
    return false;
  }
  out = std::move(s);
  return true;
}

std::string numericAddress(const sockaddr_storage &ss, socklen_t len) {
  char host[NI_MAXHOST] = "";
  getnameinfo(reinterpret_cast<const sockaddr *>(&ss), len, host, sizeof(host),
              nullptr, 0, NI_NUMERICHOST);
  return host;
}

/// Accepts one connection before the deadline (non-blocking socket); false
/// at the deadline, or with *failure set when accept itself fails.
bool acceptOne(int listener, Clock::time_point deadline, Socket &out,
               std::string &peerAddress, std::string *failure) {
  while (waitFor(listener, POLLIN, deadline)) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(listener, reinterpret_cast<sockaddr *>(&ss), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      out.reset(fd);
      peerAddress = numericAddress(ss, len);
      return true;
    }
    if (errno == EMFILE || errno == ENFILE) {
      *failure = std::string("cannot accept a rank's connection: ") +
                 std::strerror(errno) + " (raise the open-files limit)";
      return false;
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED &&
        errno != ENOBUFS && errno != ENOMEM && errno != EPERM)
      return false;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Rank 0
//===----------------------------------------------------------------------===//

class Rank0 {
public:
  Rank0(const RendezvousConfig &c, Clock::time_point deadline)
      : c(c), deadline(deadline), conns(size_t(c.size)),
        greetings(size_t(c.size)), addresses(size_t(c.size)) {}

  bool run(RendezvousResult &result, std::string *error);

private:
  bool listen(std::string *error);
  /// Checks one greeting; the error that ends the rendezvous otherwise.
  std::string check(const Greeting &g, const std::string &from) const;
  void answerAll(const std::vector<char> &body, bool failed);
  std::vector<int> localRanks() const;
  bool fail(const std::string &why, std::string *error) {
    answerAll(std::vector<char>(why.begin(), why.end()), true);
    *error = why;
    return false;
  }

  const RendezvousConfig &c;
  Clock::time_point deadline;
  Socket listener;
  std::vector<Socket> conns;
  std::vector<Greeting> greetings;
  std::vector<std::string> addresses;
};

bool Rank0::listen(std::string *error) {
  AddrInfoList list;
  if (!resolve(c.host, c.port, list, error))
    return false;
  std::string why = "no address";
  for (addrinfo *ai = list.head; ai; ai = ai->ai_next)
    if (listenOn(ai->ai_addr, ai->ai_addrlen, c.size + 16, listener, &why))
      return true;
  *error = "rendezvous: rank 0 cannot listen on " + c.host + ":" +
           std::to_string(c.port) + ": " + why +
           " (HOST must name rank 0's machine and PORT be free)";
  return false;
}

std::string Rank0::check(const Greeting &g, const std::string &from) const {
  const std::string who = "rank " + std::to_string(g.rank) + " (" + from + ")";
  if (g.version != kVersion)
    return who + " runs another meshfold runtime version";
  if (g.size != c.size)
    return who + " runs a plan of " + std::to_string(g.size) +
           " devices, rank 0's has " + std::to_string(c.size);
  if (g.fingerprint != c.fingerprint)
    return who + " runs another program (its plans differ from rank 0's)";
  if (g.rank == 0)
    return "two processes say they are rank 0 (this one and " + from + ")";
  if (g.rank < 1 || g.rank >= c.size)
    return "a process (" + from + ") says it is rank " +
           std::to_string(g.rank) + ", but the plan has " +
           std::to_string(c.size) + " devices";
  if (conns[size_t(g.rank)].get() >= 0)
    return "two processes say they are rank " + std::to_string(g.rank) +
           " (from " + addresses[size_t(g.rank)] + " and " + from + ")";
  return "";
}

void Rank0::answerAll(const std::vector<char> &body, bool failed) {
  AnswerHead head{};
  std::memcpy(head.magic, kMagic, sizeof(kMagic));
  head.failed = failed;
  head.bytes = uint32_t(body.size());
  // An error goes out best effort: the launch ends either way.
  Clock::time_point until =
      failed ? std::min(deadline, Clock::now() + std::chrono::seconds(1))
             : deadline;
  if (failed && until <= Clock::now())
    until = Clock::now() + std::chrono::milliseconds(200);
  for (Socket &s : conns)
    if (s.get() >= 0 && sendAll(s.get(), &head, sizeof(head), until) == IO::Ok)
      sendAll(s.get(), body.data(), body.size(), until);
}

std::vector<int> Rank0::localRanks() const {
  std::vector<int> local(size_t(c.size));
  std::map<std::string, int> perHost;
  for (int r = 0; r < c.size; ++r) {
    const Greeting &g = greetings[size_t(r)];
    int &next = perHost[std::string(g.host, strnlen(g.host, sizeof(g.host)))];
    local[size_t(r)] = g.localHint >= 0 ? g.localHint : next;
    ++next;
  }
  return local;
}

bool Rank0::run(RendezvousResult &result, std::string *error) {
  if (!listen(error))
    return false;
  gethostname(greetings[0].host, sizeof(greetings[0].host) - 1);
  greetings[0].localHint = c.localRankHint;
  for (int joined = 1; joined < c.size;) {
    Socket s;
    std::string from;
    std::string failure;
    if (!acceptOne(listener.get(), deadline, s, from, &failure)) {
      if (!failure.empty())
        return fail("rendezvous: rank 0 " + failure, error);
      std::vector<int> missing;
      for (int r = 1; r < c.size; ++r)
        if (conns[size_t(r)].get() < 0)
          missing.push_back(r);
      return fail("rendezvous: " + timeoutDetail(c.timeoutS, missing) +
                      " to join",
                  error);
    }
    Greeting g{};
    Clock::time_point greetBy =
        std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (recvAll(s.get(), &g, sizeof(g), greetBy) != IO::Ok ||
        std::memcmp(g.magic, kMagic, sizeof(kMagic)) != 0)
      continue; // not a meshfold rank: ignored
    g.host[sizeof(g.host) - 1] = 0;
    if (std::string why = check(g, from); !why.empty())
      return fail("rendezvous: " + why, error);
    conns[size_t(g.rank)] = std::move(s);
    greetings[size_t(g.rank)] = g;
    addresses[size_t(g.rank)] = from;
    ++joined;
  }
  listener.reset();
  std::vector<int> local = localRanks();
  std::vector<char> table(sizeof(TableEntry) * size_t(c.size));
  for (int r = 0; r < c.size; ++r) {
    TableEntry e{};
    std::strncpy(e.address, addresses[size_t(r)].c_str(),
                 sizeof(e.address) - 1);
    e.port = greetings[size_t(r)].port;
    e.localRank = local[size_t(r)];
    std::memcpy(table.data() + sizeof(TableEntry) * size_t(r), &e, sizeof(e));
  }
  answerAll(table, false);
  result.localRank = local[0];
  result.sockets.assign(size_t(c.size), -1);
  for (int r = 1; r < c.size; ++r) {
    tuneDataSocket(conns[size_t(r)].get());
    result.sockets[size_t(r)] = conns[size_t(r)].release();
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Ranks above 0
//===----------------------------------------------------------------------===//

class RankN {
public:
  RankN(const RendezvousConfig &c, Clock::time_point deadline)
      : c(c), deadline(deadline), peers(size_t(c.size)) {}

  bool run(RendezvousResult &result, std::string *error);

private:
  /// Rank 0's socket, this rank's listener, and the greeting.
  bool greet(std::string *error);
  bool readTable(std::vector<TableEntry> &table, std::string *error);
  bool connectMesh(const std::vector<TableEntry> &table, std::string *error);
  std::string ioError(IO io, const std::string &what) const {
    return "rendezvous: " + what +
           (io == IO::Timeout  ? ": " + timeoutDetail(c.timeoutS, {0})
            : io == IO::Closed ? ": rank 0 closed the connection (it "
                                 "failed or exited)"
                               : std::string(": ") + std::strerror(errno));
  }

  const RendezvousConfig &c;
  Clock::time_point deadline;
  Socket listener;
  uint32_t listenPort = 0;
  std::vector<Socket> peers;
};

bool RankN::greet(std::string *error) {
  if (!dial(c.host, c.port, "rank 0", c.timeoutS, deadline, peers[0], error))
    return false;
  // Listen where rank 0 was reached from: the interface the others can use.
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(peers[0].get(), reinterpret_cast<sockaddr *>(&ss), &len);
  if (ss.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in *>(&ss)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port = 0;
  std::string why;
  if (!listenOn(reinterpret_cast<sockaddr *>(&ss), len, c.size + 16, listener,
                &why)) {
    *error = "rendezvous: cannot listen for the other ranks: " + why;
    return false;
  }
  len = sizeof(ss);
  getsockname(listener.get(), reinterpret_cast<sockaddr *>(&ss), &len);
  listenPort = ntohs(ss.ss_family == AF_INET
                         ? reinterpret_cast<sockaddr_in *>(&ss)->sin_port
                         : reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port);
  Greeting g{};
  std::memcpy(g.magic, kMagic, sizeof(kMagic));
  g.version = kVersion;
  g.rank = c.rank;
  g.size = c.size;
  g.localHint = c.localRankHint;
  g.fingerprint = c.fingerprint;
  g.port = listenPort;
  gethostname(g.host, sizeof(g.host) - 1);
  if (IO io = sendAll(peers[0].get(), &g, sizeof(g), deadline); io != IO::Ok) {
    *error = ioError(io, "greeting rank 0");
    return false;
  }
  return true;
}

bool RankN::readTable(std::vector<TableEntry> &table, std::string *error) {
  AnswerHead head{};
  // Rank 0 answers by its own deadline, which may come a little after this
  // rank's (it may have started later): its verdict (which ranks are
  // missing) is worth a short wait.
  Clock::time_point verdictBy = deadline + std::chrono::seconds(3);
  IO io = recvAll(peers[0].get(), &head, sizeof(head), verdictBy);
  if (io == IO::Ok && (std::memcmp(head.magic, kMagic, sizeof(kMagic)) != 0 ||
                       head.bytes > (1u << 24))) {
    *error = "rendezvous: " + c.host + ":" + std::to_string(c.port) +
             " answered, but not as a meshfold rank 0";
    return false;
  }
  if (io == IO::Timeout) {
    *error = "rendezvous: rank 0 did not answer within " +
             secondsText(c.timeoutS) + " s (is a rank missing?)";
    return false;
  }
  if (io != IO::Ok) {
    *error = ioError(io, "waiting for rank 0's answer");
    return false;
  }
  std::vector<char> body(head.bytes);
  // Rank 0 has sent its answer already: a short bound past the deadline.
  Clock::time_point by =
      std::max(deadline, Clock::now() + std::chrono::seconds(2));
  if ((io = recvAll(peers[0].get(), body.data(), body.size(), by)) != IO::Ok) {
    *error = ioError(io, "reading rank 0's answer");
    return false;
  }
  if (head.failed) {
    *error = std::string(body.begin(), body.end()) + " (rank 0 reports)";
    return false;
  }
  if (body.size() != sizeof(TableEntry) * size_t(c.size)) {
    *error = "rendezvous: rank 0's answer has the wrong size";
    return false;
  }
  table.resize(size_t(c.size));
  std::memcpy(table.data(), body.data(), body.size());
  return true;
}

bool RankN::connectMesh(const std::vector<TableEntry> &table,
                        std::string *error) {
  MeshGreeting mine{};
  std::memcpy(mine.magic, kMagic, sizeof(kMagic));
  mine.rank = c.rank;
  mine.fingerprint = c.fingerprint;
  for (int r = 1; r < c.rank; ++r) {
    const TableEntry &e = table[size_t(r)];
    std::string address(e.address, strnlen(e.address, sizeof(e.address)));
    if (!dial(address, uint16_t(e.port), "rank " + std::to_string(r),
              c.timeoutS, deadline, peers[size_t(r)], error))
      return false;
    if (sendAll(peers[size_t(r)].get(), &mine, sizeof(mine), deadline) !=
        IO::Ok) {
      *error = "rendezvous: greeting rank " + std::to_string(r) + " failed";
      return false;
    }
  }
  for (int joined = c.rank + 1; joined < c.size;) {
    Socket s;
    std::string from;
    MeshGreeting g{};
    std::string failure;
    if (!acceptOne(listener.get(), deadline, s, from, &failure)) {
      if (!failure.empty()) {
        *error = "rendezvous: rank " + std::to_string(c.rank) + " " + failure;
        return false;
      }
      std::vector<int> missing;
      for (int r = c.rank + 1; r < c.size; ++r)
        if (peers[size_t(r)].get() < 0)
          missing.push_back(r);
      *error =
          "rendezvous: " + timeoutDetail(c.timeoutS, missing) + " to connect";
      return false;
    }
    Clock::time_point greetBy =
        std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (recvAll(s.get(), &g, sizeof(g), greetBy) != IO::Ok ||
        std::memcmp(g.magic, kMagic, sizeof(kMagic)) != 0 ||
        g.fingerprint != c.fingerprint || g.rank <= c.rank ||
        g.rank >= c.size || peers[size_t(g.rank)].get() >= 0)
      continue; // not one of this launch's higher ranks
    peers[size_t(g.rank)] = std::move(s);
    ++joined;
  }
  return true;
}

bool RankN::run(RendezvousResult &result, std::string *error) {
  std::vector<TableEntry> table;
  if (!greet(error) || !readTable(table, error))
    return false;
  // Every rank is there: the mesh gets a few seconds even if the table came
  // in the grace past this rank's deadline.
  deadline = std::max(deadline, Clock::now() + std::chrono::seconds(5));
  if (!connectMesh(table, error))
    return false;
  listener.reset();
  result.localRank = table[size_t(c.rank)].localRank;
  result.sockets.assign(size_t(c.size), -1);
  for (int r = 0; r < c.size; ++r)
    if (r != c.rank) {
      tuneDataSocket(peers[size_t(r)].get());
      result.sockets[size_t(r)] = peers[size_t(r)].release();
    }
  return true;
}

} // namespace

bool mfrt::comm::parseRendezvousAddress(const std::string &text,
                                        std::string &host, uint16_t &port,
                                        std::string *error) {
  size_t colon = text.rfind(':');
  std::string h = colon == std::string::npos ? "" : text.substr(0, colon);
  std::string p = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  bool digits = !p.empty() && p.size() <= 5 &&
                p.find_first_not_of("0123456789") == std::string::npos;
  long value = digits ? std::stol(p) : 0;
  if (h.empty() || !digits || value < 1 || value > 65535) {
    *error = "the rendezvous address must be HOST:PORT (rank 0's host, a "
             "port from 1 to 65535), got '" +
             text + "'";
    return false;
  }
  host = h;
  port = uint16_t(value);
  return true;
}

std::string mfrt::comm::firstSlurmHost(const std::string &hostList) {
  std::string host;
  for (size_t i = 0; i < hostList.size() && hostList[i] != ','; ++i) {
    if (hostList[i] != '[') {
      host += hostList[i];
      continue;
    }
    // A range list: its first number, zero padding kept.
    size_t end = hostList.find(']', i);
    size_t stop = hostList.find_first_of(",-]", i + 1);
    host += hostList.substr(i + 1, stop - i - 1);
    if (end == std::string::npos)
      break;
    i = end;
  }
  return host;
}

std::string mfrt::comm::slurmRendezvousAddress() {
  // A task of an srun step (not a batch script, whose mpirun children
  // inherit its SLURM_PROCID), and not an MPI launcher's process.
  const char *list = std::getenv("SLURM_STEP_NODELIST");
  if (!list || !*list || !std::getenv("SLURM_PROCID") ||
      !std::getenv("SLURM_STEP_NUM_TASKS"))
    return "";
  for (const char *mpi : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"})
    if (std::getenv(mpi))
      return "";
  auto id = [](const char *name) {
    const char *v = std::getenv(name);
    return v ? std::strtoull(v, nullptr, 10) : 0ull;
  };
  unsigned long long port =
      20000 + (16 * id("SLURM_JOB_ID") + id("SLURM_STEP_ID")) % 20000;
  return firstSlurmHost(list) + ":" + std::to_string(port);
}

/// What kind of failure a rendezvous error is: a rank that did not come
/// (its wait ran out), a launch set up wrong, or a socket error.
static mfrt_status classify(const std::string &error) {
  for (const char *late : {"timed out", "did not answer", "no rank 0 at",
                           "no rank ", "closed the connection"})
    if (error.find(late) != std::string::npos)
      return MFRT_ERR_TIMEOUT;
  for (const char *wrong :
       {"two processes", "says it is", "runs a plan", "another program",
        "another meshfold", "is not one of", "must name", "not as a meshfold"})
    if (error.find(wrong) != std::string::npos)
      return MFRT_ERR_ARGUMENT;
  return MFRT_ERR_BACKEND;
}

bool mfrt::comm::rendezvous(const RendezvousConfig &config,
                            RendezvousResult &result, std::string *error,
                            mfrt_status *status) {
  bool ok = false;
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    *error = "rendezvous: rank " + std::to_string(config.rank) +
             " is not one of the plan's " + std::to_string(config.size) +
             " devices (0 to " + std::to_string(config.size - 1) + ")";
  } else if (config.size == 1) {
    result.sockets.assign(1, -1);
    result.localRank = std::max(0, config.localRankHint);
    ok = true;
  } else {
    const Clock::time_point deadline = deadlineAfter(config.timeoutS);
    ok = config.rank == 0 ? Rank0(config, deadline).run(result, error)
                          : RankN(config, deadline).run(result, error);
  }
  if (status)
    *status = ok ? MFRT_OK : classify(*error);
  return ok;
}
