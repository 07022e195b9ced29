// lmx::HttpServer: the OpenAI-compatible HTTP API over one Engine (cpp-httplib). One thread steps the engine;
// each HTTP request runs on a worker of the server's pool, submits its GenerationRequest and waits for its
// events (non-streaming: the whole answer; streaming: server-sent events as OpenAI sends them, ending with
// `data: [DONE]`).
//
// Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions. Errors are OpenAI
// error objects with 400 (malformed request: the field named), 401 (API key), 404 (unknown route), 413 (body
// too large), 429 (too many requests at once), 500 (the engine failed the request). A streaming client that
// disconnects has its request cancelled within the next step.
#pragma once

#include "lmx/engine/engine.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace lmx {

class Tokenizer;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (port() tells which)
  std::string api_key;  // non-empty: /v1 requests need "Authorization: Bearer KEY" or "x-api-key: KEY"
  std::string model_id = "lmx";  // what /v1/models lists and responses echo
  size_t max_body_bytes = size_t{8} << 20;
  int64_t max_prompt_tokens = 0;   // 0: up to the model's context
  int max_tokens_limit = 1 << 20;  // largest max_tokens a request may ask for
  int max_concurrent = 64;         // requests in flight at once; more get 429
  GenerationRequest defaults;      // sampling, max_tokens and stop tokens a request starts from
};

class HttpServer {
 public:
  // The engine (and the tokenizer) must outlive the server.
  HttpServer(Engine& engine, const Tokenizer& tokenizer, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (IoError naming them when it cannot) and starts serving on background threads.
  void start();
  // The bound port (after start()).
  int port() const { return port_; }
  // Stops accepting requests, lets the running ones finish (up to `drain_seconds`, then cancels them), stops
  // the engine thread. Idempotent.
  void stop(double drain_seconds = 30.0);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace lmx
