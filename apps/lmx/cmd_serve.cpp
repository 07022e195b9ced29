// `lmx serve`: the OpenAI-compatible HTTP server (lmx/server/http_server.h) on one model, until SIGINT or
// SIGTERM, which drain the running requests first.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/language_model.h"
#include "lmx/server/http_server.h"
#include "lmx/text/tokenizer.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

namespace lmx::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int signal) {
  g_signal = signal;
}

// The directory's last path component: what clients see as the model id.
std::string directory_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

Verb add_serve(CLI::App& app) {
  struct Options {
    std::string model;
    HttpServerOptions server;
    ModelFlags flags;
    EngineFlags engine;
    int max_tokens = 0, threads = 0;
    double drain_seconds = 30;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API (chat and text completions)");
  cmd->add_option("--model", opt->model, "Model directory (default: the bundled demo model)")
      ->check(non_empty());
  cmd->add_option("--host", opt->server.host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", opt->server.port, "Port (default 8080; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", opt->server.api_key,
                  "Require this key on /v1 requests (Authorization: Bearer KEY or x-api-key: KEY)");
  cmd->add_option("--max-body-bytes", opt->server.max_body_bytes, "Largest request body (default 8 MiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--max-prompt-tokens", opt->server.max_prompt_tokens,
                  "Longest prompt a request may send (default: the model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--max-tokens-limit", opt->server.max_tokens_limit,
                  "Largest max_tokens a request may ask for")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-concurrent", opt->server.max_concurrent,
                  "Requests in flight at once; more are answered 429 (default 64)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens", opt->max_tokens,
                  "Tokens per choice when a request gives no max_tokens (default: generation_config.json's "
                  "max_new_tokens, else 256)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--drain-seconds", opt->drain_seconds, "On SIGTERM, how long running requests may finish")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_engine_options(cmd, opt->engine);
  add_model_options(cmd, opt->flags);
  return {cmd, [opt] {
            apply_threads(opt->threads);
            const std::string dir = model_or_default(opt->model);
            require_directory(dir, "model directory");
            std::fprintf(stderr, "lmx serve: loading %s\n", dir.c_str());
            const Tokenizer tokenizer = Tokenizer::load(dir);
            auto model = load_language_model(dir, opt->flags);
            const GenerationConfig generation = load_generation_config(dir);
            HttpServerOptions server = opt->server;
            server.model_id = directory_name(dir);
            server.defaults.sampling = sampling_from_generation_config(generation);
            server.defaults.max_tokens =
                opt->max_tokens > 0 ? opt->max_tokens : generation.max_new_tokens.value_or(256);
            server.defaults.stop_token_ids = end_token_ids(generation, *model, &tokenizer);
            if (server.max_prompt_tokens == 0) server.max_prompt_tokens = context_length(*model);
            Engine engine(*model, &tokenizer, engine_options(opt->engine));
            HttpServer http(engine, tokenizer, server);
            http.start();
            std::printf("lmx serve: %s on http://%s:%d (KV %s)\n", server.model_id.c_str(),
                        server.host.c_str(), http.port(), model->kv_cache().codec_description().c_str());
            std::fflush(stdout);
            std::signal(SIGINT, on_signal);
            std::signal(SIGTERM, on_signal);
            while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
            std::fprintf(stderr, "lmx serve: draining (signal %d)\n", static_cast<int>(g_signal));
            http.stop(opt->drain_seconds);
            return 0;
          }};
}

}  // namespace lmx::cli
