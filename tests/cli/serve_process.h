// `lmx serve` run as a child process for the CLI tests: started on a free port, stopped with SIGTERM.
#pragma once

#include "cli/run_lmx.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lmx {

// A running `lmx serve --port 0 ARGS`: its pid and the port it printed.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  FILE* out = nullptr;
};

inline ServeProcess start_serve(const std::string& args) {
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

inline int finish(ServeProcess& p) {
  kill(p.pid, SIGTERM);
  int status = 0;
  waitpid(p.pid, &status, 0);
  std::fclose(p.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace lmx
