// `lmx serve` as a process: it prints where it listens, answers over loopback HTTP, and on SIGTERM drains and
// exits 0; a port in use is an error naming it.
#include "cli/run_lmx.h"
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

// A running `lmx serve --port 0 ARGS`: its pid and the port it printed.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  FILE* out = nullptr;
};

ServeProcess start_serve(const std::string& args) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  ServeProcess p;
  p.pid = fork();
  if (p.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    const std::string command = test::lmx_binary() + " serve --port 0 " + args + " 2>/dev/null";
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  p.out = fdopen(fds[0], "r");
  char line[512];
  if (std::fgets(line, sizeof line, p.out) != nullptr) {
    const std::string text = line;
    const size_t colon = text.rfind(':', text.find(" (KV"));
    if (colon != std::string::npos) p.port = std::atoi(text.c_str() + colon + 1);
  }
  return p;
}

int finish(ServeProcess& p) {
  kill(p.pid, SIGTERM);
  int status = 0;
  waitpid(p.pid, &status, 0);
  std::fclose(p.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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
