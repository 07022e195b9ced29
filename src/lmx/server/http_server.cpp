// lmx::HttpServer (http_server.h): routes, authorization, limits, the engine thread, and streaming.
#include "lmx/server/http_server.h"

#include "lmx/core/error.h"
#include "lmx/io/json_input.h"
#include "lmx/server/openai_api.h"
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

// The events of one request, from the engine thread to the HTTP worker serving it.
struct Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<RequestEvent> events;
};

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message,
                const std::string& param = {}) {
  send_json(res, status, error_body(message, type, param));
}

std::string sse(const nlohmann::json& body) {
  return "data: " + body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

const char* status_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "server_error";
  }
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

  struct Running {
    std::shared_ptr<Channel> channel;
    RequestId id = 0;
    ApiRequest request;
    ResponseHeader header;
    std::shared_ptr<Slot> slot;
  };

  void forget(RequestId id) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(id);
  }

  // Parses, checks and submits a completion request; fills `res` with the error and returns false when
  // refused.
  bool submit(const httplib::Request& req, httplib::Response& res, bool chat, Running& run) {
    if (draining) {
      send_error(res, 503, "overloaded_error", "the server is shutting down");
      return false;
    }
    if (++in_flight > options.max_concurrent) {
      --in_flight;
      send_error(
          res, 429, "rate_limit_error",
          fmt::format("too many requests at once (the server runs at most {})", options.max_concurrent));
      return false;
    }
    run.slot = std::make_shared<Slot>(this);
    try {
      const nlohmann::ordered_json body = parse_ordered_json(req.body, "the request body");
      run.request = chat ? parse_chat_request(body, options.defaults, tokenizer)
                         : parse_completion_request(body, options.defaults, tokenizer);
    } catch (const ApiError& e) {
      send_error(res, e.http_status(), e.type(), e.what(), e.param());
      return false;
    } catch (const Error& e) {
      send_error(res, 400, "invalid_request_error", e.what());
      return false;
    }
    GenerationRequest& g = run.request.generation;
    if (g.max_tokens > options.max_tokens_limit) {
      send_error(res, 400, "invalid_request_error",
                 fmt::format("max_tokens {} is more than this server allows ({})", g.max_tokens,
                             options.max_tokens_limit),
                 "max_tokens");
      return false;
    }
    if (options.max_prompt_tokens > 0 && static_cast<int64_t>(g.prompt.size()) > options.max_prompt_tokens) {
      send_error(res, 400, "invalid_request_error",
                 fmt::format("the prompt has {} tokens, more than this server allows ({})", g.prompt.size(),
                             options.max_prompt_tokens),
                 chat ? "messages" : "prompt");
      return false;
    }
    run.channel = std::make_shared<Channel>();
    std::shared_ptr<Channel> channel = run.channel;
    try {
      std::lock_guard<std::mutex> lock(live_mutex);
      run.id = engine.submit(g, [channel](const RequestEvent& e) {
        {
          std::lock_guard<std::mutex> guard(channel->mutex);
          channel->events.push_back(e);
        }
        channel->ready.notify_all();
      });
      live.insert(run.id);
    } catch (const Error& e) {
      send_error(res, 400, "invalid_request_error", e.what());
      return false;
    }
    run.header.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", run.id);
    run.header.model = options.model_id;
    run.header.created = static_cast<int64_t>(std::time(nullptr));
    return true;
  }

  // Waits for every choice of a non-streaming request, then answers.
  void answer_whole(Running& run, httplib::Response& res, bool chat) {
    const int n = run.request.generation.n;
    std::vector<ChoiceOutput> choices(static_cast<size_t>(n));
    Usage usage;
    int open = n;
    while (open > 0) {
      std::unique_lock<std::mutex> lock(run.channel->mutex);
      run.channel->ready.wait(lock, [&] { return !run.channel->events.empty(); });
      while (!run.channel->events.empty()) {
        const RequestEvent e = std::move(run.channel->events.front());
        run.channel->events.pop_front();
        accumulate(choices[static_cast<size_t>(e.choice)], e);
        usage.prompt_tokens = e.prompt_tokens;
        usage.cached_tokens = std::max(usage.cached_tokens, e.reused_tokens);
        if (e.finish) --open;
      }
    }
    forget(run.id);
    for (const ChoiceOutput& c : choices) {
      usage.completion_tokens += static_cast<int64_t>(c.tokens.size());
      if (c.finish == FinishReason::kError || c.finish == FinishReason::kCancelled) {
        send_error(
            res, 500, "server_error",
            c.error.empty() ? std::string("the request was cancelled") : "the request failed: " + c.error);
        return;
      }
    }
    const bool logprobs = run.request.generation.top_logprobs >= 0;
    send_json(
        res, 200,
        chat ? chat_completion_json(run.header, choices, usage, logprobs, tokenizer)
             : text_completion_json(run.header, choices, usage, logprobs,
                                    run.request.echo ? run.request.prompt_text : std::string(), tokenizer));
  }

  // Streams a request's events as server-sent events.
  void answer_stream(std::shared_ptr<Running> run, httplib::Response& res, bool chat) {
    struct State {
      std::vector<bool> started;
      std::vector<int64_t> generated;
      Usage usage;
      int open = 0;
    };
    auto state = std::make_shared<State>();
    const int n = run->request.generation.n;
    state->started.assign(static_cast<size_t>(n), false);
    state->generated.assign(static_cast<size_t>(n), 0);
    state->open = n;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, run, state, chat](size_t, httplib::DataSink& sink) {
          std::deque<RequestEvent> events;
          {
            std::unique_lock<std::mutex> lock(run->channel->mutex);
            run->channel->ready.wait_for(lock, std::chrono::milliseconds(100),
                                         [&] { return !run->channel->events.empty(); });
            events.swap(run->channel->events);
          }
          auto write = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
          if (events.empty() && !sink.is_writable()) {
            engine.cancel(run->id);
            return false;
          }
          const bool logprobs = run->request.generation.top_logprobs >= 0;
          for (const RequestEvent& e : events) {
            const auto c = static_cast<size_t>(e.choice);
            state->usage.prompt_tokens = e.prompt_tokens;
            state->usage.cached_tokens = std::max(state->usage.cached_tokens, e.reused_tokens);
            state->generated[c] = e.generated_tokens;
            bool ok = true;
            if (chat && !state->started[c]) {
              ok = write(sse(
                  chat_chunk_json(run->header, e.choice, {{"role", "assistant"}, {"content", ""}}, nullptr)));
            } else if (!chat && !state->started[c] && run->request.echo) {
              ok = write(sse(text_chunk_json(run->header, e.choice, run->request.prompt_text, nullptr)));
            }
            state->started[c] = true;
            if (ok && (!e.text.empty() || (logprobs && !e.logprobs.empty()))) {
              nlohmann::json lp = nullptr;
              if (logprobs)
                lp = chat ? chat_logprobs_json(e.logprobs, tokenizer)
                          : completion_logprobs_json(e.logprobs, tokenizer);
              ok = write(sse(chat ? chat_chunk_json(run->header, e.choice, {{"content", e.text}}, nullptr, lp)
                                  : text_chunk_json(run->header, e.choice, e.text, nullptr, lp)));
            }
            if (ok && e.finish) {
              --state->open;
              if (*e.finish == FinishReason::kError || *e.finish == FinishReason::kCancelled) {
                ok = write(
                    sse(error_body(e.error.empty() ? "the request was cancelled" : e.error, "server_error")));
              } else {
                const char* reason = openai_finish_reason(*e.finish);
                ok = write(sse(chat ? chat_chunk_json(run->header, e.choice, nlohmann::json::object(), reason)
                                    : text_chunk_json(run->header, e.choice, "", reason)));
              }
            }
            if (!ok) {
              engine.cancel(run->id);
              return false;
            }
          }
          if (state->open > 0) return true;
          forget(run->id);
          for (int64_t g : state->generated) state->usage.completion_tokens += g;
          if (run->request.include_usage) {
            write(sse(chat ? chat_usage_chunk_json(run->header, state->usage)
                           : text_usage_chunk_json(run->header, state->usage)));
          }
          write("data: [DONE]\n\n");
          sink.done();
          return true;
        },
        [this, run](bool success) {
          if (!success) engine.cancel(run->id);
        });
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto run = std::make_shared<Running>();
    if (!submit(req, res, chat, *run)) return;
    if (run->request.stream)
      answer_stream(run, res, chat);
    else
      answer_whole(*run, res, chat);
  }

  void routes() {
    http.set_payload_max_length(options.max_body_bytes);
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets a second server share a port in
    // use instead of failing to bind.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    const int threads = options.max_concurrent + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) == 0 && !authorized(req)) {
        send_error(res, 401, "authentication_error",
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
      send_error(res, res.status, status_type(res.status), message);
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string message = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
      }
      send_error(res, 500, "server_error", message);
    });
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s\n",
                   nlohmann::json({{"method", req.method},
                                   {"path", req.path},
                                   {"status", res.status},
                                   {"remote", req.remote_addr}})
                       .dump()
                       .c_str());
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, models_json(options.model_id, static_cast<int64_t>(std::time(nullptr))));
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  }

  void run_engine() {
    while (!engine_stop) {
      try {
        if (!engine.step()) engine.wait_for_work(std::chrono::milliseconds(50));
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
