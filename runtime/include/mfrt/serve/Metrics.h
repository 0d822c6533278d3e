//===- Metrics.h - The server's Prometheus metrics --------------*- C++ -*-===//
//
// What GET /metrics reports, in Prometheus' text exposition format (written
// here: Debian has no Prometheus C++ client, and the format is a few lines
// of text): requests by outcome, prompt and generated tokens, the queue and
// the batch, the K/V cache, and histograms of the time to first token and
// between tokens (Metrics.cpp). Thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_SERVE_METRICS_H
#define MFRT_SERVE_METRICS_H

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mfrt::serve {

/// A Prometheus histogram (of seconds, or of batch sizes).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts; // per bound, then +Inf
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b);
  void observe(double value);
};

class Metrics {
public:
  Metrics();
  /// A request ended with HTTP status `status` (200: served).
  void request(int status);
  /// A request's prompt and generated tokens, and the prompt rows whose
  /// K/V it took from the prefix cache (--prefix-cache).
  void tokens(int64_t prompt, int64_t generated, int64_t cached);
  void firstToken(double seconds);
  void interToken(double seconds);
  /// Rank 0 ran a decode step of `requests` rows' requests.
  void batch(int64_t requests);
  /// The scheduler's view: requests waiting, running, and the K/V blocks of
  /// rank 0 in use and their limit (-1: none).
  void load(int64_t waiting, int64_t running, int64_t kvBlocks,
            int64_t kvCapacity);
  /// The exposition text.
  std::string text() const;

private:
  mutable std::mutex mutex_;
  std::map<int, uint64_t> requests_;
  uint64_t promptTokens_ = 0, generatedTokens_ = 0, cachedRows_ = 0;
  int64_t waiting_ = 0, running_ = 0, kvBlocks_ = 0, kvCapacity_ = -1;
  Histogram firstToken_, interToken_, batch_;
};

} // namespace mfrt::serve

#endif // MFRT_SERVE_METRICS_H
