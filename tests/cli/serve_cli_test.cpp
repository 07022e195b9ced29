// `lmx serve` as a process: it prints where it listens, answers over loopback HTTP, and on SIGTERM drains and
// exits 0; a port in use is an error naming it.
#include "cli/run_lmx.h"
#include "cli/serve_process.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <string>

namespace lmx {
namespace {

TEST(ServeCli, AnswersAndDrainsOnSigterm) {
  ServeProcess p = start_serve("--max-tokens 4");
  ASSERT_GT(p.port, 0) << "lmx serve printed no port";
  httplib::Client c("127.0.0.1", p.port);
  c.set_read_timeout(60, 0);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(nlohmann::json::parse(models->body)["data"][0]["id"], "demo")
      << "the model id is the directory's name";
  auto r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hello"}]})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_LE(nlohmann::json::parse(r->body)["usage"]["completion_tokens"].get<int>(), 4) << "--max-tokens";
  EXPECT_EQ(finish(p), 0);
}

TEST(ServeCli, APortInUseIsAnError) {
  ServeProcess first = start_serve("");
  ASSERT_GT(first.port, 0);
  const test::RunResult second = test::run_lmx("serve --port " + std::to_string(first.port));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.output.find("cannot listen on 127.0.0.1:" + std::to_string(first.port)), std::string::npos)
      << second.output;
  EXPECT_EQ(finish(first), 0);
}

}  // namespace
}  // namespace lmx
