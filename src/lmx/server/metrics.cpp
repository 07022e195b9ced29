// Prometheus text for the server's metrics (metrics.h).
#include "lmx/server/metrics.h"

#include <fmt/format.h>

namespace lmx {
namespace {

void add_metric(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void add_value(std::string& out, const std::string& name, const char* type, const std::string& help,
               T value) {
  add_metric(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) {
      ++counts_[i];
      break;
    }
  ++count_;
  sum_ += seconds;
}

std::string Histogram::text(const std::string& name, const std::string& help) const {
  std::string out;
  add_metric(out, name, "histogram", help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name,
                     count_);
  return out;
}

void ServerMetrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void ServerMetrics::record_generation(int64_t prompt_tokens, int64_t cached_tokens,
                                      int64_t generated_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  generated_tokens_ += generated_tokens;
}

void ServerMetrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_inter_token(double seconds, int64_t tokens) {
  if (tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int64_t i = 0; i < tokens; ++i) inter_token_.observe(seconds / static_cast<double>(tokens));
}

void ServerMetrics::observe_request(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  request_.observe(seconds);
}

void ServerMetrics::publish(const EngineGauges& gauges) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine_ = gauges;
}

std::string ServerMetrics::text(int64_t in_flight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  add_metric(out, "lmx_http_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : requests_)
    out +=
        fmt::format("lmx_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  add_value(out, "lmx_http_requests_in_flight", "gauge", "HTTP requests being served now.", in_flight);
  add_value(out, "lmx_prompt_tokens_total", "counter", "Prompt tokens of finished generations.",
            prompt_tokens_);
  add_value(out, "lmx_prompt_tokens_cached_total", "counter",
            "Prompt tokens whose KV was reused (prefix cache or conversation).", cached_tokens_);
  add_value(out, "lmx_generation_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  out += ttft_.text("lmx_time_to_first_token_seconds", "Time from a request's arrival to its first token.");
  out += inter_token_.text("lmx_inter_token_latency_seconds", "Time between consecutive generated tokens.");
  out += request_.text("lmx_request_duration_seconds", "Time from a request's arrival to its last token.");
  add_value(out, "lmx_queue_depth", "gauge", "Sequences waiting for admission.", engine_.waiting);
  add_value(out, "lmx_running_sequences", "gauge", "Sequences in the running set.", engine_.running);
  add_value(out, "lmx_step_rows", "gauge", "Rows of the engine's last step.", engine_.last_step_rows);
  add_value(out, "lmx_engine_steps_total", "counter", "Engine steps run.", engine_.steps);
  add_value(out, "lmx_preemptions_total", "counter", "Sequences preempted for KV room.", engine_.preemptions);
  add_value(out, "lmx_kv_blocks_used", "gauge", "KV blocks referenced by sequences.", engine_.kv_blocks_used);
  add_value(out, "lmx_kv_blocks_free", "gauge", "KV blocks held for reuse (free or cached).",
            engine_.kv_blocks_free);
  add_value(out, "lmx_kv_bytes_used", "gauge", "Bytes of KV blocks referenced by sequences.",
            engine_.kv_bytes_used);
  add_value(out, "lmx_kv_bytes_budget", "gauge", "The KV pool's byte budget.", engine_.kv_bytes_budget);
  const KvPrefixStats& p = engine_.prefix;
  add_value(out, "lmx_prefix_cache_lookups_total", "counter", "Prompts looked up in the prefix cache.",
            p.lookups);
  add_value(out, "lmx_prefix_cache_hits_total", "counter", "Lookups that reused at least one block.", p.hits);
  add_value(out, "lmx_prefix_cache_looked_up_tokens_total", "counter", "Prompt tokens offered for reuse.",
            p.looked_up_tokens);
  add_value(out, "lmx_prefix_cache_reused_tokens_total", "counter",
            "Prompt tokens whose KV came from the cache.", p.reused_tokens);
  add_value(out, "lmx_prefix_cache_hit_rate", "gauge", "Reused over looked-up prompt tokens.",
            p.looked_up_tokens > 0
                ? static_cast<double>(p.reused_tokens) / static_cast<double>(p.looked_up_tokens)
                : 0.0);
  add_value(out, "lmx_prefix_cache_bytes", "gauge", "Bytes of blocks the prefix cache holds.",
            p.cached_bytes);
  return out;
}

}  // namespace lmx
