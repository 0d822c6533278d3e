//===- Metrics.cpp - The server's Prometheus metrics ----------------------===//

#include "mfrt/serve/Metrics.h"

#include <cstdio>

using namespace mfrt::serve;

Histogram::Histogram(std::vector<double> b)
    : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds.size() && value > bounds[i])
    ++i;
  ++counts[i];
  sum += value;
  ++count;
}

Metrics::Metrics()
    : firstToken_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      interToken_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      batch_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::batch(int64_t requests) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_.observe(double(requests));
}

void Metrics::request(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[status];
}

void Metrics::tokens(int64_t prompt, int64_t generated, int64_t cached) {
  std::lock_guard<std::mutex> lock(mutex_);
  promptTokens_ += uint64_t(prompt);
  generatedTokens_ += uint64_t(generated);
  cachedRows_ += uint64_t(cached);
}

void Metrics::firstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  firstToken_.observe(seconds);
}

void Metrics::interToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  interToken_.observe(seconds);
}

void Metrics::load(int64_t waiting, int64_t running, int64_t kvBlocks,
                   int64_t kvCapacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_ = waiting;
  running_ = running;
  kvBlocks_ = kvBlocks;
  kvCapacity_ = kvCapacity;
}

namespace {
void histogram(std::string &out, const char *name, const char *help,
               const Histogram &h) {
  char line[256];
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name +
         " histogram\n";
  uint64_t running = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    running += h.counts[i];
    if (i < h.bounds.size())
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name,
                    h.bounds[i], (unsigned long long)running);
    else
      std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                    (unsigned long long)running);
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name, h.sum,
                name, (unsigned long long)h.count);
  out += line;
}

void metric(std::string &out, const char *name, const char *type,
            const char *help, double value) {
  char line[256];
  std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n",
                name, help, name, type, name, value);
  out += line;
}
} // namespace

std::string Metrics::text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out =
      "# HELP meshfold_requests_total Requests answered, by HTTP status.\n"
      "# TYPE meshfold_requests_total counter\n";
  for (const auto &[status, n] : requests_)
    out += "meshfold_requests_total{status=\"" + std::to_string(status) +
           "\"} " + std::to_string(n) + "\n";
  metric(out, "meshfold_prompt_tokens_total", "counter",
         "Prompt tokens of served requests.", double(promptTokens_));
  metric(out, "meshfold_generation_tokens_total", "counter",
         "Tokens generated for served requests.", double(generatedTokens_));
  metric(out, "meshfold_prefix_cache_rows_total", "counter",
         "Prompt rows whose K/V came from the prefix cache (--prefix-cache).",
         double(cachedRows_));
  metric(out, "meshfold_requests_waiting", "gauge",
         "Requests waiting for a place in a batch.", double(waiting_));
  metric(out, "meshfold_requests_running", "gauge",
         "Requests in the running batches.", double(running_));
  metric(out, "meshfold_kv_cache_blocks_used", "gauge",
         "K/V cache blocks rank 0 holds.", double(kvBlocks_));
  metric(out, "meshfold_kv_cache_blocks_limit", "gauge",
         "K/V cache blocks rank 0 may hold (-1: no limit, --kv-memory).",
         double(kvCapacity_));
  histogram(out, "meshfold_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first token.",
            firstToken_);
  histogram(out, "meshfold_inter_token_seconds",
            "Seconds between a request's consecutive tokens.", interToken_);
  histogram(out, "meshfold_batch_size",
            "Requests in each decode step of rank 0.", batch_);
  return out;
}
