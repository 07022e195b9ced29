// Runs the built lmx binary as a child process for CLI tests.
#pragma once

#include <string>

namespace lmx::test {

struct RunResult {
  int exit_code = -1;  // 128 + signal when the process was killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `lmx <args>` through the shell (args are shell words) and collects its output.
RunResult run_lmx(const std::string& args);
// Runs a shell command line (stderr joined to stdout) and collects its output.
RunResult run_shell(const std::string& command);
// The path of the built lmx binary.
std::string lmx_binary();
// Single-quotes a string for the shell.
std::string shell_quote(const std::string& s);

}  // namespace lmx::test
