// A server on a loopback port over the demo model, and the client helpers the server tests share.
#pragma once

#include "lmx/model/language_model.h"
#include "lmx/server/http_server.h"
#include "lmx/text/tokenizer.h"
#include "support/goldens.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace lmx {

// The demo model's files with another chat template (tests/data/templates/NAME), in a temporary directory.
class DemoWithTemplate {
 public:
  explicit DemoWithTemplate(const std::string& template_name) {
    const std::string demo = test::reference_model_dir("models/demo");
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json"})
      test::copy_path(demo + "/" + f, dir_.file(f));
    EXPECT_EQ(::symlink((demo + "/model.safetensors").c_str(), dir_.file("model.safetensors").c_str()), 0);
    test::copy_path(test::source_path("tests/data/templates/" + template_name),
                    dir_.file("chat_template.jinja"));
  }
  const std::string& path() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

class Served {
 public:
  // stop_tokens: the demo model's end tokens end a choice (else only max_tokens does). `dir`: the model
  // directory (the demo model by default).
  explicit Served(HttpServerOptions options = {}, bool stop_tokens = true, std::string dir = {}) {
    if (dir.empty()) dir = test::reference_model_dir("models/demo");
    model_ = test::load_model(dir);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    engine_ = std::make_unique<Engine>(*model_, tokenizer_.get());
    options.port = 0;
    options.model_id = "demo";
    options.defaults.max_tokens = 16;
    if (stop_tokens) options.defaults.stop_token_ids = {1, 106};
    server_ = std::make_unique<HttpServer>(*engine_, *tokenizer_, options);
    server_->start();
  }
  ~Served() { server_->stop(5.0); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
  Engine& engine() { return *engine_; }
  HttpServer& server() { return *server_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> server_;
};

inline nlohmann::json post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                                int* status = nullptr, const httplib::Headers& headers = {}) {
  auto r = c.Post(path.c_str(), headers, body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  if (status != nullptr) *status = r->status;
  return nlohmann::json::parse(r->body, nullptr, false);
}

// The JSON payloads of a server-sent event stream, and whether it ended with [DONE].
inline std::vector<nlohmann::json> sse_events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> out;
  *done = false;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(nlohmann::json::parse(data));
  }
  return out;
}

// An Anthropic event stream: (event name, payload) pairs.
inline std::vector<std::pair<std::string, nlohmann::json>> named_events(const std::string& body) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  std::istringstream in(body);
  std::string name;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("event: ", 0) == 0) name = line.substr(7);
    if (line.rfind("data: ", 0) == 0) out.emplace_back(name, nlohmann::json::parse(line.substr(6)));
  }
  return out;
}

}  // namespace lmx
