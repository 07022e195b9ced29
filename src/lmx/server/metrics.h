// The server's counters, latency histograms and engine gauges, exposed at GET /metrics in the Prometheus
// text format (version 0.0.4). Thread-safe: HTTP workers record requests and tokens, the engine thread
// publishes the engine's state after each step, /metrics reads both.
#pragma once

#include "lmx/kv/prefix_cache.h"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace lmx {

// A cumulative histogram over fixed bucket bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  void observe(double seconds);
  // Prometheus lines for a histogram named `name` (its _bucket, _sum and _count series).
  std::string text(const std::string& name, const std::string& help) const;

 private:
  std::array<int64_t, kBounds.size()> counts_{};  // observations <= kBounds[i] (non-cumulative here)
  int64_t count_ = 0;
  double sum_ = 0;
};

// The engine's state as the engine thread last published it.
struct EngineGauges {
  int64_t waiting = 0, running = 0;  // scheduler queue depth, sequences in the running set
  int64_t last_step_rows = 0;        // rows of the last step
  int64_t kv_blocks_used = 0, kv_blocks_free = 0;
  size_t kv_bytes_used = 0, kv_bytes_budget = 0;
  KvPrefixStats prefix;
  int64_t steps = 0, preemptions = 0;
};

class ServerMetrics {
 public:
  // One finished HTTP request: its route ("/v1/chat/completions", ...) and status.
  void count_request(const std::string& route, int status);
  // A generation's tokens and latencies: time to first token, the gaps between later tokens' events (each
  // gap spread over the tokens it brought), the whole request.
  void record_generation(int64_t prompt_tokens, int64_t cached_tokens, int64_t generated_tokens);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds, int64_t tokens);
  void observe_request(double seconds);
  void publish(const EngineGauges& gauges);
  // Everything above in the Prometheus text format; `in_flight` is the HTTP requests being served now.
  std::string text(int64_t in_flight) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, inter_token_, request_;
  EngineGauges engine_;
};

}  // namespace lmx
