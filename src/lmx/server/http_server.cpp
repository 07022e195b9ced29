// lmx::HttpServer (http_server.h): routes, authorization, limits, the engine thread, and streaming.
#include "lmx/server/http_server.h"

#include "lmx/core/error.h"
#include "lmx/io/json_input.h"
#include "lmx/server/anthropic_api.h"
#include "lmx/server/metrics.h"
#include "lmx/server/openai_api.h"
#include "lmx/server/sse.h"
#include "lmx/text/tokenizer.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <set>

namespace lmx {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The three generation APIs.
enum class Api { kChat, kCompletion, kMessages };

const char* route_of(Api api) {
  switch (api) {
    case Api::kChat:
      return "/v1/chat/completions";
    case Api::kCompletion:
      return "/v1/completions";
    case Api::kMessages:
      break;
  }
  return "/v1/messages";
}

// The events of one request, from the engine thread to the HTTP worker serving it, with when they came.
struct Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<RequestEvent, Clock::time_point>> events;
};

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

// An error in the shape of the API the path belongs to (Anthropic's for /v1/messages, else OpenAI's).
void send_error(httplib::Response& res, const std::string& path, int status, const std::string& message,
                const std::string& param = {}) {
  if (path.rfind("/v1/messages", 0) == 0)
    send_json(res, status, anthropic_error_body(message, anthropic_error_type(status)));
  else
    send_json(res, status, error_body(message, openai_error_type(status), param));
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const Tokenizer& tokenizer;
  HttpServerOptions options;
  httplib::Server http;
  std::thread http_thread, engine_thread;
  std::atomic<bool> draining{false}, engine_stop{false};
  std::atomic<int> in_flight{0};
  std::mutex live_mutex;
  std::set<RequestId> live;  // submitted, not finished
  ServerMetrics metrics;
  socket_t listen_socket = INVALID_SOCKET;  // the bound socket (recorded while cpp-httplib creates it)
  bool stopped = false;

  Impl(Engine& e, const Tokenizer& t, HttpServerOptions o) : engine(e), tokenizer(t), options(std::move(o)) {}

  bool authorized(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    const std::string bearer = req.get_header_value("Authorization");
    return bearer == "Bearer " + options.api_key || req.get_header_value("x-api-key") == options.api_key;
  }

  // One request slot (of max_concurrent) for as long as the holder lives.
  struct Slot {
    Impl* impl;
    explicit Slot(Impl* i) : impl(i) {}
    ~Slot() { --impl->in_flight; }
  };

  // A generation request from submission to its last byte: what it asked, its events' bookkeeping, and the
  // numbers its log line and the metrics report.
  struct Running {
    Api api = Api::kChat;
    std::shared_ptr<Channel> channel;
    RequestId id = 0;
    ApiRequest request;
    ResponseHeader header;
    std::shared_ptr<Slot> slot;
    std::unique_ptr<EventStream> stream;
    std::string remote;
    Clock::time_point arrived = Clock::now();
    std::optional<Clock::time_point> first_token, last_token;
    Usage usage;
    std::vector<int64_t> generated;  // per choice
    int open = 0;                    // choices not finished
    std::string finish;              // the first choice's finish reason
    bool done = false;               // logged and counted
  };

  void forget(RequestId id) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(id);
  }

  // Books one event into the request's usage, latencies and open choices.
  void book(Running& run, const RequestEvent& e, Clock::time_point at) {
    run.usage.prompt_tokens = e.prompt_tokens;
    run.usage.cached_tokens = std::max(run.usage.cached_tokens, e.reused_tokens);
    run.generated[static_cast<size_t>(e.choice)] = e.generated_tokens;
    if (!e.tokens.empty()) {
      if (!run.first_token) {
        run.first_token = at;
        metrics.observe_ttft(std::chrono::duration<double>(at - run.arrived).count());
      } else {
        metrics.observe_inter_token(std::chrono::duration<double>(at - *run.last_token).count(),
                                    static_cast<int64_t>(e.tokens.size()));
      }
      run.last_token = at;
    }
    if (e.finish) {
      --run.open;
      if (run.finish.empty()) run.finish = finish_reason_name(*e.finish);
    }
    if (run.open == 0) {
      run.usage.completion_tokens = 0;
      for (int64_t g : run.generated) run.usage.completion_tokens += g;
    }
  }

  // The request is over: its metrics and its one log line.
  void finished(Running& run, int status) {
    if (run.done) return;
    run.done = true;
    forget(run.id);
    metrics.record_generation(run.usage.prompt_tokens, run.usage.cached_tokens, run.usage.completion_tokens);
    metrics.observe_request(seconds_since(run.arrived));
    metrics.count_request(route_of(run.api), status);
    nlohmann::json line = {{"method", "POST"},
                           {"path", route_of(run.api)},
                           {"status", status},
                           {"remote", run.remote},
                           {"id", run.header.id},
                           {"stream", run.request.stream},
                           {"prompt_tokens", run.usage.prompt_tokens},
                           {"cached_tokens", run.usage.cached_tokens},
                           {"completion_tokens", run.usage.completion_tokens},
                           {"finish", run.finish},
                           {"duration_ms", seconds_since(run.arrived) * 1e3}};
    if (run.first_token)
      line["ttft_ms"] = std::chrono::duration<double>(*run.first_token - run.arrived).count() * 1e3;
    std::fprintf(stderr, "%s\n", json_text(line).c_str());
  }

  ApiRequest parse(Api api, const nlohmann::ordered_json& body) const {
    switch (api) {
      case Api::kChat:
        return parse_chat_request(body, options.defaults, tokenizer);
      case Api::kCompletion:
        return parse_completion_request(body, options.defaults, tokenizer);
      case Api::kMessages:
        break;
    }
    return parse_messages_request(body, options.defaults, tokenizer);
  }

  // Parses, checks and submits a generation request; fills `res` with the error and returns false when
  // refused.
  bool submit(const httplib::Request& req, httplib::Response& res, Running& run) {
    const std::string path = route_of(run.api);
    if (draining) {
      send_error(res, path, 503, "the server is shutting down");
      return false;
    }
    if (++in_flight > options.max_concurrent) {
      --in_flight;
      send_error(
          res, path, 429,
          fmt::format("too many requests at once (the server runs at most {})", options.max_concurrent));
      return false;
    }
    run.slot = std::make_shared<Slot>(this);
    try {
      run.request = parse(run.api, parse_ordered_json(req.body, "the request body"));
    } catch (const ApiError& e) {
      send_error(res, path, e.http_status(), e.what(), e.param());
      return false;
    } catch (const Error& e) {
      send_error(res, path, 400, e.what());
      return false;
    }
    GenerationRequest& g = run.request.generation;
    if (g.max_tokens > options.max_tokens_limit) {
      send_error(res, path, 400,
                 fmt::format("max_tokens {} is more than this server allows ({})", g.max_tokens,
                             options.max_tokens_limit),
                 "max_tokens");
      return false;
    }
    if (options.max_prompt_tokens > 0 && static_cast<int64_t>(g.prompt.size()) > options.max_prompt_tokens) {
      send_error(res, path, 400,
                 fmt::format("the prompt has {} tokens, more than this server allows ({})", g.prompt.size(),
                             options.max_prompt_tokens),
                 run.api == Api::kCompletion ? "prompt" : "messages");
      return false;
    }
    run.channel = std::make_shared<Channel>();
    std::shared_ptr<Channel> channel = run.channel;
    try {
      std::lock_guard<std::mutex> lock(live_mutex);
      run.id = engine.submit(g, [channel](const RequestEvent& e) {
        {
          std::lock_guard<std::mutex> guard(channel->mutex);
          channel->events.emplace_back(e, Clock::now());
        }
        channel->ready.notify_all();
      });
      live.insert(run.id);
    } catch (const Error& e) {
      send_error(res, path, 400, e.what());
      return false;
    }
    static constexpr const char* kIdPrefix[] = {"chatcmpl", "cmpl", "msg"};
    run.header.id = fmt::format("{}-{}", kIdPrefix[static_cast<int>(run.api)], run.id);
    run.header.model = options.model_id;
    run.header.created = static_cast<int64_t>(std::time(nullptr));
    run.remote = req.remote_addr;
    run.open = g.n;
    run.generated.assign(static_cast<size_t>(g.n), 0);
    return true;
  }

  // Waits for every choice of a non-streaming request, then answers.
  void answer_whole(Running& run, httplib::Response& res) {
    std::vector<ChoiceOutput> choices(run.generated.size());
    while (run.open > 0) {
      std::unique_lock<std::mutex> lock(run.channel->mutex);
      run.channel->ready.wait(lock, [&] { return !run.channel->events.empty(); });
      while (!run.channel->events.empty()) {
        const auto [e, at] = std::move(run.channel->events.front());
        run.channel->events.pop_front();
        accumulate(choices[static_cast<size_t>(e.choice)], e);
        book(run, e, at);
      }
    }
    for (const ChoiceOutput& c : choices) {
      if (c.finish == FinishReason::kError || c.finish == FinishReason::kCancelled) {
        send_error(
            res, route_of(run.api), 500,
            c.error.empty() ? std::string("the request was cancelled") : "the request failed: " + c.error);
        finished(run, 500);
        return;
      }
    }
    switch (run.api) {
      case Api::kChat:
        send_json(res, 200, chat_completion_json(run.header, choices, run.usage, run.request, tokenizer));
        break;
      case Api::kCompletion:
        send_json(
            res, 200,
            text_completion_json(run.header, choices, run.usage, run.request.generation.top_logprobs >= 0,
                                 run.request.echo ? run.request.prompt_text : std::string(), tokenizer));
        break;
      case Api::kMessages:
        send_json(res, 200, message_json(run.header, choices[0], run.usage, run.request));
        break;
    }
    finished(run, 200);
  }

  // Streams a request's events as server-sent events in its API's shape.
  void answer_stream(std::shared_ptr<Running> run, httplib::Response& res) {
    switch (run->api) {
      case Api::kChat:
        run->stream = chat_event_stream(run->request, run->header, tokenizer);
        break;
      case Api::kCompletion:
        run->stream = text_event_stream(run->request, run->header, tokenizer);
        break;
      case Api::kMessages:
        run->stream = messages_event_stream(run->request, run->header);
        break;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, run](size_t, httplib::DataSink& sink) {
          std::deque<std::pair<RequestEvent, Clock::time_point>> events;
          {
            std::unique_lock<std::mutex> lock(run->channel->mutex);
            run->channel->ready.wait_for(lock, std::chrono::milliseconds(100),
                                         [&] { return !run->channel->events.empty(); });
            events.swap(run->channel->events);
          }
          auto write = [&](const std::string& text) {
            return text.empty() || sink.write(text.data(), text.size());
          };
          if (events.empty() && !sink.is_writable()) {
            engine.cancel(run->id);
            return false;
          }
          for (const auto& [e, at] : events) {
            book(*run, e, at);
            if (!write(run->stream->event(e, run->usage))) {
              engine.cancel(run->id);
              return false;
            }
          }
          if (run->open > 0) return true;
          write(run->stream->end(run->usage));
          sink.done();
          finished(*run, 200);
          return true;
        },
        [this, run](bool success) {
          if (success) return;
          engine.cancel(run->id);
          finished(*run, 499);  // the client closed the connection (nginx's code for it)
        });
  }

  void generation(const httplib::Request& req, httplib::Response& res, Api api) {
    auto run = std::make_shared<Running>();
    run->api = api;
    if (!submit(req, res, *run)) return;
    if (run->request.stream)
      answer_stream(run, res);
    else
      answer_whole(*run, res);
  }

  static bool generation_route(const std::string& path) {
    return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/messages";
  }

  void routes() {
    http.set_payload_max_length(options.max_body_bytes);
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets a second server share a port in
    // use instead of failing to bind.
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_socket = sock;
    });
    const int threads = options.max_concurrent + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) == 0 && !authorized(req)) {
        send_error(res, req.path, 401,
                   "a valid API key is required (Authorization: Bearer KEY or x-api-key)");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? "no route " + req.method + " " + req.path
                                  : res.status == 413 ? "the request body is too large"
                                                      : "the request could not be served";
      send_error(res, req.path, res.status, message);
    });
    http.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          std::string message = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            message = e.what();
          } catch (...) {
          }
          send_error(res, req.path, 500, message);
        });
    // One log line per request: generation requests that reached the engine log their own (with tokens and
    // latencies) when they end; this logs every other request.
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (generation_route(req.path) && res.status == 200) return;
      metrics.count_request(req.path, res.status);
      std::fprintf(stderr, "%s\n",
                   json_text({{"method", req.method},
                              {"path", req.path},
                              {"status", res.status},
                              {"remote", req.remote_addr}})
                       .c_str());
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.text(in_flight.load()), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, models_json(options.model_id, static_cast<int64_t>(std::time(nullptr))));
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generation(req, res, Api::kChat);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generation(req, res, Api::kCompletion);
    });
    http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      generation(req, res, Api::kMessages);
    });
    http.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        send_json(
            res, 200,
            count_tokens_json(parse_ordered_json(req.body, "the request body"), options.defaults, tokenizer));
      } catch (const ApiError& e) {
        send_error(res, req.path, e.http_status(), e.what(), e.param());
      } catch (const Error& e) {
        send_error(res, req.path, 400, e.what());
      }
    });
  }

  // Publishes the engine's state for /metrics (on the engine thread, between steps).
  void publish_gauges() {
    EngineGauges g;
    const Scheduler& scheduler = engine.scheduler();
    g.waiting = static_cast<int64_t>(scheduler.waiting().size());
    g.running = static_cast<int64_t>(scheduler.running().size());
    const KvCache& kv = engine.model().kv_cache();
    const KvBlockPool& pool = kv.pool();
    for (int group = 0; group < pool.num_groups(); ++group) {
      g.kv_blocks_used += pool.used_blocks(group);
      g.kv_blocks_free += pool.free_blocks(group);
    }
    g.kv_bytes_used = pool.used_bytes();
    g.kv_bytes_budget = pool.budget_bytes();
    g.prefix = kv.prefix_stats();
    g.steps = engine.stats().steps;
    g.preemptions = engine.stats().preemptions;
    g.last_step_rows = last_step_rows;
    metrics.publish(g);
  }
  int64_t last_step_rows = 0;

  void run_engine() {
    engine.set_step_observer([this](const StepRecord& r) { last_step_rows = r.rows; });
    publish_gauges();
    while (!engine_stop) {
      try {
        const bool stepped = engine.step();
        publish_gauges();
        if (!stepped) engine.wait_for_work(std::chrono::milliseconds(50));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "lmx serve: engine step failed: %s\n", e.what());
      }
    }
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() {
  stop(0.0);
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    port_ = s.http.bind_to_any_port(s.options.host);
  } else {
    port_ = s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1;
  }
  LMX_REQUIRE(IoError, port_ > 0, "cannot listen on {}:{}", s.options.host, s.options.port);
  // cpp-httplib listens with a backlog of 5, so a burst of clients connecting at once has connections
  // dropped; listening again on the bound socket raises it to the system's limit.
  if (s.listen_socket != INVALID_SOCKET) ::listen(s.listen_socket, SOMAXCONN);
  s.engine_thread = std::thread([&s] { s.run_engine(); });
  s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
}

void HttpServer::stop(double drain_seconds) {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.draining = true;
  const auto deadline = Clock::now() + std::chrono::duration<double>(drain_seconds);
  while (s.in_flight > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  {
    std::lock_guard<std::mutex> lock(s.live_mutex);
    for (RequestId id : s.live) s.engine.cancel(id);
  }
  while (s.in_flight > 0 && Clock::now() < deadline + std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http.stop();
  if (s.http_thread.joinable()) s.http_thread.join();
  s.engine_stop = true;
  if (s.engine_thread.joinable()) s.engine_thread.join();
}

}  // namespace lmx
