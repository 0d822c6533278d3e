//===- TCPTransport.cpp - The tcp backend's transport ---------------------===//
//
// TCPTransport.h describes the design. One Peer per other rank holds its
// socket, the frames queued for it (each written from the caller's memory, or
// from a copy for buffered sends and notices), the frame being read, the
// receives posted for it and the messages that arrived before theirs.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/TCPTransport.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <utility>

using namespace mfrt::comm;

namespace {

enum FrameKind : uint32_t { kData = 1, kFailure = 2, kOutcome = 3 };

struct FrameHeader {
  uint32_t kind;
  uint32_t tag;
  uint64_t bytes;
};

/// A header as this transport writes them: a known kind, notices short,
/// data below 1 TiB.
bool plausible(const FrameHeader &h) {
  if (h.kind == kData)
    return h.bytes < (uint64_t(1) << 40);
  return (h.kind == kFailure || h.kind == kOutcome) && h.bytes < (1u << 20);
}

std::string unsent(int peer) {
  return "the connection to rank " + std::to_string(peer) +
         " closed before the message was sent";
}

/// How many pieces one sendmsg / readv takes at most.
constexpr size_t kMaxIov = 64;

std::vector<char> encode(const FailureRecord &r) {
  std::vector<char> out(8 + r.detail.size());
  int32_t head[2] = {int32_t(r.rank), int32_t(r.status)};
  std::memcpy(out.data(), head, 8);
  std::memcpy(out.data() + 8, r.detail.data(), r.detail.size());
  return out;
}

FailureRecord decode(const std::vector<char> &buf) {
  FailureRecord r;
  if (buf.size() < 8)
    return FailureRecord{-1, MFRT_ERR_BACKEND, "a malformed failure notice"};
  int32_t head[2];
  std::memcpy(head, buf.data(), 8);
  r.rank = head[0];
  r.status = mfrt_status(head[1]);
  r.detail.assign(buf.data() + 8, buf.size() - 8);
  return r;
}

struct TCPRequest final : Request {
  bool isSend = false;
  int peer = -1;
  size_t bytes = 0;
  /// A receive's destination.
  std::vector<Span> parts;
  bool done = false;
  std::string error;
};

/// Fills `iov` with the pieces of `parts` from byte `offset` on.
template <typename SpanT>
size_t piecesFrom(const std::vector<SpanT> &parts, size_t offset, iovec *iov) {
  size_t n = 0;
  for (const SpanT &s : parts) {
    if (offset >= s.bytes) {
      offset -= s.bytes;
      continue;
    }
    iov[n].iov_base =
        const_cast<char *>(static_cast<const char *>(s.data)) + offset;
    iov[n].iov_len = s.bytes - offset;
    offset = 0;
    if (++n == kMaxIov)
      break;
  }
  return n;
}

} // namespace

/// A frame on its way out.
struct TCPTransport::Outgoing {
  FrameHeader header{};
  /// The payload: the caller's memory (isend) or `owned`.
  std::vector<ConstSpan> parts;
  std::vector<char> owned;
  size_t total = 0, sent = 0;
  /// The isend completed by this frame, if any.
  TCPRequest *request = nullptr;
};

struct TCPTransport::Peer {
  int fd = -1;
  std::deque<std::unique_ptr<Outgoing>> out;
  // The frame being read.
  FrameHeader header{};
  size_t headerGot = 0;
  uint64_t bodyGot = 0;
  /// Where the body goes: a posted receive, or `held` (an early message, a
  /// notice, or the bytes of a receive of another size).
  TCPRequest *target = nullptr;
  std::vector<char> held;
  /// The held body is dropped (its receive failed or was abandoned).
  bool discard = false;
  std::map<Tag, std::deque<TCPRequest *>> posted;
  std::map<Tag, std::deque<std::vector<char>>> early;
  bool outcomeSeen = false;
  FailureRecord outcome;
};

std::unique_ptr<TCPTransport>
TCPTransport::create(const RendezvousConfig &config, std::string *error,
                     mfrt_status *status) {
  RendezvousResult joined;
  if (!rendezvous(config, joined, error, status))
    return nullptr;
  std::unique_ptr<TCPTransport> t(new TCPTransport);
  t->me = config.rank;
  t->local = joined.localRank;
  for (int fd : joined.sockets) {
    t->peers.push_back(std::make_unique<Peer>());
    t->peers.back()->fd = fd;
  }
  return t;
}

TCPTransport::~TCPTransport() {
  for (auto &p : peers)
    if (p->fd >= 0)
      close(p->fd);
}

//===----------------------------------------------------------------------===//
// Sending
//===----------------------------------------------------------------------===//

void TCPTransport::queue(int peer, std::unique_ptr<Outgoing> out) {
  out->total = sizeof(FrameHeader) + out->header.bytes;
  Peer &p = *peers[size_t(peer)];
  if (peer == me) { // to itself: held as an early message, then matched
    std::vector<char> body;
    for (const ConstSpan &s : out->parts) {
      const char *c = static_cast<const char *>(s.data);
      body.insert(body.end(), c, c + s.bytes);
    }
    if (out->header.kind == kData)
      p.early[out->header.tag].push_back(std::move(body));
    if (out->request)
      out->request->done = true;
    matchEarly(peer, out->header.tag);
    return;
  }
  if (p.fd < 0) { // lost: the failure is known already
    if (out->request) {
      out->request->error = unsent(peer);
      out->request->done = true;
    }
    return;
  }
  // Failure notices go ahead of the data frames not yet started (an
  // outcome stays behind the data it follows).
  auto at = p.out.end();
  if (out->header.kind == kFailure)
    at = p.out.begin() + (!p.out.empty() && p.out.front()->sent ? 1 : 0);
  p.out.insert(at, std::move(out));
  writeTo(peer);
}

void TCPTransport::writeTo(int peer) {
  Peer &p = *peers[size_t(peer)];
  while (p.fd >= 0 && !p.out.empty()) {
    Outgoing &o = *p.out.front();
    iovec iov[kMaxIov + 1];
    size_t n = 0;
    if (o.sent < sizeof(FrameHeader))
      iov[n++] = {reinterpret_cast<char *>(&o.header) + o.sent,
                  sizeof(FrameHeader) - o.sent};
    size_t bodySent =
        o.sent > sizeof(FrameHeader) ? o.sent - sizeof(FrameHeader) : 0;
    n += piecesFrom(o.parts, bodySent, iov + n);
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t wrote = sendmsg(p.fd, &msg, MSG_NOSIGNAL);
    if (wrote < 0) {
      if (errno == EAGAIN || errno == EINTR)
        return;
      lost(peer, "its connection failed while rank " + std::to_string(me) +
                     " was sending (" + std::strerror(errno) + ")");
      return;
    }
    o.sent += size_t(wrote);
    if (o.sent < o.total)
      continue;
    if (o.request)
      o.request->done = true;
    p.out.pop_front();
  }
}

Request *TCPTransport::isend(int peer, Tag tag, const ConstSpan *parts,
                             size_t numParts) {
  auto *r = new TCPRequest;
  r->isSend = true;
  r->peer = peer;
  auto o = std::make_unique<Outgoing>();
  for (size_t i = 0; i < numParts; ++i)
    if (parts[i].bytes) {
      o->parts.push_back(parts[i]);
      r->bytes += parts[i].bytes;
    }
  o->header = {kData, tag, r->bytes};
  o->request = r;
  queue(peer, std::move(o));
  return r;
}

Status TCPTransport::sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                                  size_t numParts, Clock::time_point, double) {
  auto o = std::make_unique<Outgoing>();
  for (size_t i = 0; i < numParts; ++i) {
    const char *p = static_cast<const char *>(parts[i].data);
    o->owned.insert(o->owned.end(), p, p + parts[i].bytes);
  }
  o->parts.push_back({o->owned.data(), o->owned.size()});
  o->header = {kData, tag, o->owned.size()};
  queue(peer, std::move(o));
  return Status::success();
}

void TCPTransport::control(int peer, uint32_t kind,
                           const FailureRecord &record) {
  auto o = std::make_unique<Outgoing>();
  o->owned = encode(record);
  o->parts.push_back({o->owned.data(), o->owned.size()});
  o->header = {kind, 0, o->owned.size()};
  queue(peer, std::move(o));
}

//===----------------------------------------------------------------------===//
// Receiving
//===----------------------------------------------------------------------===//

Request *TCPTransport::irecv(int peer, Tag tag, const Span *parts,
                             size_t numParts) {
  auto *r = new TCPRequest;
  r->peer = peer;
  for (size_t i = 0; i < numParts; ++i)
    if (parts[i].bytes) {
      r->parts.push_back(parts[i]);
      r->bytes += parts[i].bytes;
    }
  peers[size_t(peer)]->posted[tag].push_back(r);
  matchEarly(peer, tag);
  return r;
}

void TCPTransport::matchEarly(int peer, Tag tag) {
  Peer &p = *peers[size_t(peer)];
  auto early = p.early.find(tag);
  auto posted = p.posted.find(tag);
  while (early != p.early.end() && !early->second.empty() &&
         posted != p.posted.end() && !posted->second.empty()) {
    TCPRequest *r = posted->second.front();
    const std::vector<char> &msg = early->second.front();
    if (msg.size() != r->bytes) {
      r->error = "message size mismatch: rank " + std::to_string(peer) +
                 " sent " + std::to_string(msg.size()) + " bytes where " +
                 std::to_string(r->bytes) + " were expected";
    } else {
      size_t off = 0;
      for (const Span &s : r->parts) {
        std::memcpy(s.data, msg.data() + off, s.bytes);
        off += s.bytes;
      }
    }
    r->done = true;
    posted->second.pop_front();
    early->second.pop_front();
  }
  // Every op has tags of its own: spent entries go.
  if (early != p.early.end() && early->second.empty())
    p.early.erase(early);
  if (posted != p.posted.end() && posted->second.empty())
    p.posted.erase(posted);
}

void TCPTransport::frameArrived(int peer) {
  Peer &p = *peers[size_t(peer)];
  const FrameHeader h = p.header;
  p.headerGot = 0;
  p.bodyGot = 0;
  if (p.target) {
    p.target->done = true;
    p.target = nullptr;
    return;
  }
  std::vector<char> body = std::move(p.held);
  p.held.clear();
  if (std::exchange(p.discard, false))
    return;
  if (h.kind == kFailure) {
    noteFailure(decode(body));
  } else if (h.kind == kOutcome) {
    p.outcomeSeen = true;
    p.outcome = decode(body);
    if (p.outcome.failed())
      noteFailure(p.outcome);
  } else if (h.kind == kData) {
    p.early[h.tag].push_back(std::move(body));
    matchEarly(peer, h.tag);
  }
}

/// A data frame's header arrived: its body goes to the first receive posted
/// for its tag, if any, else it is held.
static TCPRequest *matchPosted(TCPTransport::Peer &p, int peer,
                               bool &mismatch) {
  const FrameHeader &h = p.header;
  if (h.kind != kData)
    return nullptr;
  auto it = p.posted.find(h.tag);
  if (it == p.posted.end() || it->second.empty())
    return nullptr;
  TCPRequest *r = it->second.front();
  it->second.pop_front();
  if (it->second.empty())
    p.posted.erase(it);
  if (r->bytes == h.bytes)
    return r;
  r->error = "message size mismatch: rank " + std::to_string(peer) + " sent " +
             std::to_string(h.bytes) + " bytes where " +
             std::to_string(r->bytes) + " were expected";
  r->done = true;
  mismatch = true;
  return nullptr;
}

void TCPTransport::readFrom(int peer) {
  Peer &p = *peers[size_t(peer)];
  while (p.fd >= 0) {
    ssize_t got;
    if (p.headerGot < sizeof(FrameHeader)) {
      got = recv(p.fd, reinterpret_cast<char *>(&p.header) + p.headerGot,
                 sizeof(FrameHeader) - p.headerGot, 0);
      if (got > 0 && (p.headerGot += size_t(got)) == sizeof(FrameHeader)) {
        if (!plausible(p.header)) {
          lost(peer, "sent a malformed frame (kind " +
                         std::to_string(p.header.kind) + ", " +
                         std::to_string(p.header.bytes) + " bytes)");
          return;
        }
        bool mismatch = false;
        p.target = matchPosted(p, peer, mismatch);
        p.discard = mismatch;
        if (!p.target)
          p.held.resize(p.header.bytes);
        if (p.header.bytes == 0)
          frameArrived(peer);
      }
    } else {
      iovec iov[kMaxIov];
      size_t n = p.target ? piecesFrom(p.target->parts, p.bodyGot, iov) : 1;
      if (!p.target)
        iov[0] = {p.held.data() + p.bodyGot, p.header.bytes - p.bodyGot};
      got = readv(p.fd, iov, int(n));
      if (got > 0 && (p.bodyGot += uint64_t(got)) == p.header.bytes)
        frameArrived(peer);
    }
    if (got < 0 && errno == ECONNRESET)
      got = 0;
    if (got == 0) {
      lost(peer, "exited before the end of the launch (its connection to "
                 "rank " +
                     std::to_string(me) + " closed)");
      return;
    }
    if (got < 0) {
      if (errno != EAGAIN && errno != EINTR)
        lost(peer, std::string("its connection failed (") +
                       std::strerror(errno) + ")");
      return;
    }
  }
}

//===----------------------------------------------------------------------===//
// Progress, failures, the launch's end
//===----------------------------------------------------------------------===//

void TCPTransport::lost(int peer, const std::string &why) {
  Peer &p = *peers[size_t(peer)];
  close(p.fd);
  p.fd = -1;
  for (auto &o : p.out)
    if (o->request) {
      o->request->error = unsent(peer);
      o->request->done = true;
    }
  p.out.clear();
  if (!p.outcomeSeen && !finishing)
    losses.push_back({peer, why});
}

void TCPTransport::blameLosses() {
  if (losses.empty())
    return;
  // A rank that ends because of another's failure got that rank's notice
  // first: read what every connection holds before blaming the closed one.
  for (int p = 0; p < size(); ++p)
    if (peers[size_t(p)]->fd >= 0)
      readFrom(p);
  std::vector<std::pair<int, std::string>> found = std::move(losses);
  losses.clear();
  if (seenFailure || finishing)
    return;
  // Passed on to every rank: the others then blame this peer, not the
  // ranks that end because of it.
  raiseFailure(FailureRecord{found[0].first, MFRT_ERR_PEER, found[0].second});
}

void TCPTransport::noteFailure(const FailureRecord &record) {
  if (seenFailure)
    return;
  seenFailure = true;
  seen = record;
}

void TCPTransport::progress(int timeoutMs) {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (size_t i = 0; i < peers.size(); ++i) {
    const Peer &p = *peers[i];
    if (p.fd < 0)
      continue;
    fds.push_back({p.fd, short(POLLIN | (p.out.empty() ? 0 : POLLOUT)), 0});
    who.push_back(int(i));
  }
  if (fds.empty() || poll(fds.data(), fds.size(), timeoutMs) <= 0) {
    blameLosses();
    return;
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents & POLLOUT)
      writeTo(who[i]);
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
      readFrom(who[i]);
  }
  blameLosses();
}

Status TCPTransport::waitAll(Request *const *requests, size_t numRequests,
                             Clock::time_point deadline, double timeoutS) {
  std::vector<std::unique_ptr<TCPRequest>> reqs;
  for (size_t i = 0; i < numRequests; ++i)
    reqs.emplace_back(static_cast<TCPRequest *>(requests[i]));
  Status result = waitLoop(
      *this, reqs,
      [&] {
        for (auto &r : reqs)
          if (!r->done)
            return false;
        return true;
      },
      [&] {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - Clock::now())
                        .count();
        progress(int(std::clamp<long long>(left, 0, 50)));
      },
      deadline, timeoutS);
  for (auto &r : reqs) {
    if (result.ok() && !r->error.empty())
      result = Status::error(MFRT_ERR_BACKEND, r->error);
    if (r->done)
      continue;
    // Abandoned: its frame must not touch the caller's memory any more.
    Peer &p = *peers[size_t(r->peer)];
    if (!r->isSend) {
      for (auto it = p.posted.begin(); it != p.posted.end();) {
        auto &q = it->second;
        q.erase(std::remove(q.begin(), q.end(), r.get()), q.end());
        it = q.empty() ? p.posted.erase(it) : std::next(it);
      }
      if (p.target == r.get()) { // the rest of its bytes are dropped
        p.target = nullptr;
        p.held.resize(p.header.bytes);
        p.discard = true;
      }
      continue;
    }
    for (auto &o : p.out) {
      if (o->request != r.get())
        continue;
      o->request = nullptr;
      for (const ConstSpan &s : o->parts) {
        const char *c = static_cast<const char *>(s.data);
        o->owned.insert(o->owned.end(), c, c + s.bytes);
      }
      o->parts.assign(1, {o->owned.data(), o->owned.size()});
    }
  }
  return result;
}

void TCPTransport::raiseFailure(const FailureRecord &record) {
  noteFailure(record);
  for (int p = 0; p < size(); ++p)
    if (p != me)
      control(p, kFailure, record);
}

bool TCPTransport::failureSeen(FailureRecord &record) {
  progress(0);
  if (seenFailure)
    record = seen;
  return seenFailure;
}

FailureRecord TCPTransport::finish(const FailureRecord &mine, double timeoutS) {
  const Clock::time_point deadline = deadlineAfter(timeoutS);
  for (int p = 0; p < size(); ++p)
    if (p != me)
      control(p, kOutcome, mine);
  std::vector<FailureRecord> candidates;
  if (mine.failed())
    candidates.push_back(mine);
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (int p = 0; p < size(); ++p)
      if (p != me && !peers[size_t(p)]->outcomeSeen &&
          peers[size_t(p)]->fd >= 0)
        missing.push_back(p);
    if (missing.empty() || Clock::now() >= deadline)
      break;
    progress(50);
  }
  FailureRecord notice;
  if (failureSeen(notice))
    candidates.push_back(notice);
  for (int p = 0; p < size(); ++p)
    if (p != me && peers[size_t(p)]->outcomeSeen &&
        peers[size_t(p)]->outcome.failed())
      candidates.push_back(peers[size_t(p)]->outcome);
  if (!missing.empty())
    candidates.push_back(FailureRecord{
        me, MFRT_ERR_TIMEOUT,
        "mfrt_launch: " + timeoutDetail(timeoutS, missing) + " to finish"});
  finishing = true;
  if (candidates.empty())
    return FailureRecord{};
  return *std::min_element(candidates.begin(), candidates.end(), preferRoot);
}

void TCPTransport::drain(Clock::time_point until, bool untilClosed) {
  auto busy = [&] {
    for (auto &p : peers) {
      int unsent = 0;
      if (p->fd >= 0 && (!p->out.empty() || untilClosed ||
                         (ioctl(p->fd, SIOCOUTQ, &unsent) == 0 && unsent)))
        return true;
    }
    return false;
  };
  while (busy() && Clock::now() < until)
    progress(10);
}

void TCPTransport::beforeExit() {
  // The failure this rank ends for goes ahead of its closing: a peer reading
  // both blames the rank that failed, not this one.
  if (seenFailure)
    for (int p = 0; p < size(); ++p)
      if (p != me)
        control(p, kFailure, seen);
  finishing = true;
  // Queued frames out, and the kernel's copy sent: the process's end may
  // reset the connections, which drops what is still unsent.
  drain(Clock::now() + std::chrono::seconds(2), false);
}

void TCPTransport::shutdown(bool success) {
  finishing = true;
  // What is queued (the outcome, notices) goes out, each peer is told that
  // nothing more comes, and its own end is read: closing with unread bytes
  // would reset the connection under the peer's last reads.
  const Clock::time_point until =
      Clock::now() + std::chrono::seconds(success ? 5 : 1);
  drain(until, false);
  for (auto &p : peers)
    if (p->fd >= 0)
      ::shutdown(p->fd, SHUT_WR);
  drain(until, true);
  for (auto &p : peers)
    if (p->fd >= 0) {
      close(p->fd);
      p->fd = -1;
    }
}
