// Runs the built lmx binary as a child process for CLI tests.
#include "cli/run_lmx.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace lmx::test {

std::string lmx_binary() {
  return std::string(LMX_BINARY_DIR) + "/lmx";
}

RunResult run_lmx(const std::string& args) {
  return run_shell(lmx_binary() + " " + args);
}

RunResult run_shell(const std::string& command_line) {
  const std::string command = "{ " + command_line + "; } 2>&1";
  RunResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace lmx::test
