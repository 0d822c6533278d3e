//===- TCPTransport.h - The tcp backend's transport -------------*- C++ -*-===//
//
// One process per rank, with no MPI: started by srun, by a cluster's own
// launcher or by hand, each process told its rank (--rank or SLURM_PROCID)
// and rank 0's address (--rendezvous HOST:PORT). The rendezvous:
//
//  1. rank 0 listens on HOST:PORT; every other rank connects to it (retrying
//     until the timeout: rank 0 may start last), opens a listening socket of
//     its own on the address that reached rank 0, and greets rank 0 with its
//     rank, the world size, the plan's fingerprint, its host name and port;
//  2. rank 0 checks the greetings (each rank once, one world size, one plan)
//     and answers each with every rank's address and local rank (SLURM_LOCALID
//     where srun gave it, else the rank's index among the ranks of its host),
//     or with the one-line error that ends every rank;
//  3. each pair of ranks above 0 connects (the higher one dials), so every
//     pair has one socket; rank 0's are the rendezvous connections.
//
// Messages are frames [kind, tag, bytes] + bytes on those sockets, read and
// written without blocking by one poll loop that the waits run until their
// deadline: a receive posted before its message arrives is filled straight
// from the socket, an early message is held until its receive is posted
// (FIFO per sender and tag). A failure notice goes to every rank as a frame;
// a peer whose connection closes before the launch's end counts as a failed
// rank ("exited before the end of the launch"), so a dead rank ends every
// other rank at once, and a late one within the timeout. Byte order is the
// host's: the ranks of one launch run on one architecture.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_BACKENDS_TCPTRANSPORT_H
#define MFRT_BACKENDS_TCPTRANSPORT_H

#include "mfrt/comm/Comm.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mfrt::comm {

/// How one process joins the launch.
struct RendezvousConfig {
  /// Rank 0's address: a host name or numeric address, and a port.
  std::string host;
  uint16_t port = 0;
  int rank = 0;
  int size = 0;
  /// The launcher's local rank (SLURM_LOCALID), or -1: the index among the
  /// ranks of the same host.
  int localRankHint = -1;
  /// Equal on every rank of one program (a hash of its plans).
  uint64_t fingerprint = 0;
  double timeoutS = 60;
};

/// "HOST:PORT" ("[v6]:PORT" for an IPv6 literal) into `host` and `port`;
/// false and a one-line *error naming the rule otherwise.
bool parseRendezvousAddress(const std::string &text, std::string &host,
                            uint16_t &port, std::string *error);

/// The first host of a Slurm host list ("node[01-04,07],gpu1" -> "node01").
std::string firstSlurmHost(const std::string &hostList);

/// In a task of an srun step (SLURM_STEP_NODELIST, SLURM_STEP_NUM_TASKS and
/// SLURM_PROCID set, no MPI launcher's variables): rank 0's HOST:PORT, the
/// step's first node (where srun's block and cyclic distributions put rank
/// 0) and a port from the job and step ids (20000 + (16 * job + step) mod
/// 20000, so concurrent steps on one node differ); "" otherwise.
std::string slurmRendezvousAddress();

/// After the rendezvous: a connected socket to every other rank (-1 for this
/// one) and this rank's local index on its host.
struct RendezvousResult {
  std::vector<int> sockets;
  int localRank = 0;
};

/// Runs the rendezvous of `config` (bounded by its timeout); false, a
/// one-line *error (naming the missing or offending ranks) and *status
/// (MFRT_ERR_TIMEOUT when a rank did not come, else MFRT_ERR_ARGUMENT for a
/// misconfigured launch or MFRT_ERR_BACKEND for a socket error) on failure.
bool rendezvous(const RendezvousConfig &config, RendezvousResult &result,
                std::string *error, mfrt_status *status = nullptr);

class TCPTransport final : public HostTransport {
public:
  /// Runs the rendezvous and returns the transport, or nullptr and *error.
  static std::unique_ptr<TCPTransport> create(const RendezvousConfig &config,
                                              std::string *error,
                                              mfrt_status *status = nullptr);
  ~TCPTransport() override;

  int rank() const override { return me; }
  int size() const override { return int(peers.size()); }
  int localRank() const override { return local; }
  Request *isend(int peer, Tag tag, const ConstSpan *parts,
                 size_t numParts) override;
  Status sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                      size_t numParts, Clock::time_point deadline,
                      double timeoutS) override;
  Request *irecv(int peer, Tag tag, const Span *parts,
                 size_t numParts) override;
  Status waitAll(Request *const *requests, size_t numRequests,
                 Clock::time_point deadline, double timeoutS) override;
  void raiseFailure(const FailureRecord &record) override;
  bool failureSeen(FailureRecord &record) override;
  void beforeExit() override;
  FailureRecord finish(const FailureRecord &mine, double timeoutS) override;
  void shutdown(bool success) override;

  struct Peer;
  struct Outgoing;

private:
  TCPTransport() = default;
  /// Reads and writes what the sockets allow, waiting up to `timeoutMs` for
  /// the first readiness.
  void progress(int timeoutMs);
  void readFrom(int peer);
  void writeTo(int peer);
  void frameArrived(int peer);
  /// Fills the receives posted for (peer, tag) from its early messages.
  void matchEarly(int peer, Tag tag);
  /// A peer's connection closed or failed: noted, and blamed by
  /// blameLosses unless its outcome came first or another failure explains
  /// it.
  void lost(int peer, const std::string &why);
  void blameLosses();
  void queue(int peer, std::unique_ptr<Outgoing> out);
  void control(int peer, uint32_t kind, const FailureRecord &record);
  void noteFailure(const FailureRecord &record);
  /// Writes what is queued, reading meanwhile, until `until`; with
  /// `untilClosed`, then waits for every peer's end of the connection.
  void drain(Clock::time_point until, bool untilClosed);

  int me = 0, local = 0;
  std::vector<std::unique_ptr<Peer>> peers;
  bool finishing = false;
  std::vector<std::pair<int, std::string>> losses;
  bool seenFailure = false;
  FailureRecord seen;
};

} // namespace mfrt::comm

#endif // MFRT_BACKENDS_TCPTRANSPORT_H
