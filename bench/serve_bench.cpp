// Serving benchmark: a client that sends streamed completion requests to a running OpenAI-compatible server
// (lmx serve, or any other) with Poisson arrivals at each request rate, and reports what users see: request
// throughput, output tokens per second, time to first token (TTFT), time per output token after the first
// (TPOT) and inter-token latency (ITL), p50 and p99. Prompts and output lengths are generated here
// (deterministically from --seed, new words for every run so that no run reuses an earlier one's KV): prompt
// words and output lengths uniform in [0.5, 1.5] x their means; the "shared" workload starts every prompt
// with one common prefix of --shared-words words (a system prompt), the "unique" workload gives every prompt
// its own words. Output lengths are fixed with ignore_eos.
//
//   bench_serve_bench --url http://127.0.0.1:8080 [--rates 1,4,inf] [--requests 32] [--prompt-words 200]
//                     [--output-tokens 64] [--shared-words 400] [--workloads unique,shared] [--seed 1]
//                     [--wait-seconds 0]
//
// --wait-seconds S first polls GET /health until it answers 200 (a server still loading), for at most S
// seconds. Prints one markdown table row per (workload, rate). A rate of "inf" sends every request at once.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string url = "http://127.0.0.1:8080";
  std::vector<double> rates = {1, 4, INFINITY};
  int requests = 32;
  int prompt_words = 200, output_tokens = 64, shared_words = 400;
  std::vector<std::string> workloads = {"unique", "shared"};
  uint64_t seed = 1;
  double wait_seconds = 0;
};

// Polls GET /health until it answers 200 or `seconds` pass; false if it never did.
bool wait_until_healthy(const std::string& url, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  do {
    httplib::Client client(url);
    client.set_connection_timeout(1, 0);
    if (auto response = client.Get("/health"); response && response->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < deadline);
  return false;
}

// What one request saw.
struct Result {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;  // seconds from its send
  std::vector<double> itl;   // gaps between consecutive chunks carrying text
  int64_t output_tokens = 0, prompt_tokens = 0;
};

const char* const kWords[] = {"river",  "stone",  "light",  "quiet",   "market",  "garden",  "winter",
                              "paper",  "signal", "orange", "window",  "travel",  "engine",  "silver",
                              "forest", "letter", "number", "planet",  "morning", "bridge",  "coffee",
                              "music",  "yellow", "dinner", "circle",  "animal",  "history", "machine",
                              "summer", "island", "pocket", "mountain"};

std::string words(std::mt19937_64& rng, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = static_cast<size_t>(std::ceil(at));
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

Result send(const Options& o, const std::string& prompt, int max_tokens) {
  Result r;
  httplib::Client client(o.url);
  client.set_read_timeout(600, 0);
  const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", max_tokens},
                               {"temperature", 0}, {"ignore_eos", true},
                               {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> last;
  int64_t text_chunks = 0;
  bool usage = false;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.contains("usage") && j["usage"].is_object()) {
        usage = true;
        r.output_tokens = j["usage"].value("completion_tokens", 0);
        r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty() || j["choices"][0].value("text", "").empty())
        continue;
      ++text_chunks;
      const Clock::time_point now = Clock::now();
      if (!last)
        r.ttft = std::chrono::duration<double>(now - start).count();
      else
        r.itl.push_back(std::chrono::duration<double>(now - *last).count());
      last = now;
    }
    return true;
  };
  auto res = client.send(req);
  r.e2e = std::chrono::duration<double>(Clock::now() - start).count();
  if (!res) {
    r.error = httplib::to_string(res.error());
  } else if (res->status != 200) {
    r.error = "HTTP " + std::to_string(res->status);
  } else {
    if (!usage) r.output_tokens = text_chunks;  // a server that sends no usage: one token per chunk
    r.ok = last.has_value() && r.output_tokens > 0;
    if (!r.ok) r.error = "no tokens";
  }
  return r;
}

void run(const Options& o, const std::string& workload, double rate) {
  // Fresh words for every run (a server's prefix cache would otherwise serve a later run the earlier runs'
  // prompts), the same arrival times for the same rate.
  static int runs = 0;
  std::mt19937_64 rng(o.seed * 1000 + static_cast<uint64_t>(runs++)), arrivals(o.seed);
  const std::string shared = workload == "shared" ? words(rng, o.shared_words) + "\n\n" : std::string();
  std::uniform_real_distribution<double> spread(0.5, 1.5);
  std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
  struct Planned {
    std::string prompt;
    int max_tokens;
    double at;
  };
  std::vector<Planned> plan;
  double t = 0;
  for (int i = 0; i < o.requests; ++i) {
    const int n = std::max(1, static_cast<int>(std::lround(o.prompt_words * spread(rng))));
    const int out = std::max(1, static_cast<int>(std::lround(o.output_tokens * spread(rng))));
    plan.push_back({shared + words(rng, n), out, t});
    if (!std::isinf(rate)) t += gap(arrivals);
  }
  std::vector<Result> results(plan.size());
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < plan.size(); ++i)
    threads.emplace_back([&, i] {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan[i].at)));
      results[i] = send(o, plan[i].prompt, plan[i].max_tokens);
    });
  for (auto& th : threads) th.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, tpot, itl;
  int64_t out_tokens = 0, prompt_tokens = 0;
  int ok = 0;
  std::string first_error;
  for (const Result& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    out_tokens += r.output_tokens;
    prompt_tokens += r.prompt_tokens;
    ttft.push_back(r.ttft * 1e3);
    if (r.output_tokens > 1)
      tpot.push_back((r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1) * 1e3);
    for (double g : r.itl) itl.push_back(g * 1e3);
  }
  char rate_text[32] = "inf";
  if (!std::isinf(rate)) std::snprintf(rate_text, sizeof rate_text, "%g", rate);
  std::printf("| %s | %s | %d/%d | %.0f | %.1f | %.2f | %.1f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f |%s\n",
              workload.c_str(), rate_text, ok, o.requests,
              ok > 0 ? static_cast<double>(prompt_tokens) / ok : 0.0, duration, ok / duration,
              out_tokens / duration, percentile(ttft, 0.5), percentile(ttft, 0.99), percentile(tpot, 0.5),
              percentile(tpot, 0.99), percentile(itl, 0.5), percentile(itl, 0.99),
              first_error.empty() ? "" : (" " + first_error).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      auto list = [](const std::string& s) {
        std::vector<std::string> out;
        std::stringstream in(s);
        for (std::string item; std::getline(in, item, ',');) out.push_back(item);
        return out;
      };
      if (a == "--url") {
        o.url = value();
      } else if (a == "--rates") {
        o.rates.clear();
        for (const std::string& r : list(value())) o.rates.push_back(r == "inf" ? INFINITY : std::stod(r));
      } else if (a == "--requests") {
        o.requests = std::stoi(value());
      } else if (a == "--prompt-words") {
        o.prompt_words = std::stoi(value());
      } else if (a == "--output-tokens") {
        o.output_tokens = std::stoi(value());
      } else if (a == "--shared-words") {
        o.shared_words = std::stoi(value());
      } else if (a == "--workloads") {
        o.workloads = list(value());
      } else if (a == "--wait-seconds") {
        o.wait_seconds = std::stod(value());
      } else if (a == "--seed") {
        o.seed = std::stoull(value());
      } else {
        throw std::invalid_argument("unknown option " + a);
      }
    }
    if (o.url.find("://") == std::string::npos)
      throw std::invalid_argument("--url must look like http://HOST:PORT");
    for (const std::string& w : o.workloads)
      if (w != "unique" && w != "shared")
        throw std::invalid_argument("workloads are unique and shared, got " + w);
    for (double r : o.rates)
      if (!(r > 0)) throw std::invalid_argument("rates must be positive (or inf)");
    if (o.requests < 1 || o.prompt_words < 1 || o.output_tokens < 1 || o.shared_words < 0)
      throw std::invalid_argument("--requests, --prompt-words and --output-tokens must be positive");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve_bench: %s\n", e.what());
    return 2;
  }
  if (o.wait_seconds > 0 && !wait_until_healthy(o.url, o.wait_seconds)) {
    std::fprintf(stderr, "bench_serve_bench: %s/health did not answer 200 within %.0f s\n", o.url.c_str(),
                 o.wait_seconds);
    return 1;
  }
  std::printf(
      "| workload | rate (req/s) | ok | prompt tok (mean) | duration s | req/s | output tok/s | TTFT p50 / "
      "p99 ms "
      "| TPOT p50 / p99 ms | ITL p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& w : o.workloads)
    for (double rate : o.rates) run(o, w, rate);
  return 0;
}
