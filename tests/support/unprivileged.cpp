// Runs test code as an unprivileged user, so permission checks apply even when the tests run as root.
#include "support/unprivileged.h"

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace lmx::test {
namespace {
constexpr uid_t kNobody = 65534;

bool drop_privileges() {
  if (::geteuid() != 0) return true;
  return ::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0 &&
         ::geteuid() == kNobody;
}
}  // namespace

std::optional<std::string> run_unprivileged(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::close(fds[0]);
    if (!drop_privileges()) ::_exit(3);
    std::string result;
    try {
      result = body();
    } catch (const std::exception& e) {
      result = std::string("unexpected exception: ") + e.what();
    }
    const char* p = result.data();
    size_t left = result.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) ::_exit(4);
      p += n;
      left -= static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
    out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

std::string unprivileged_skip_reason() {
  return "cannot run as an unprivileged user here (dropping root to uid 65534 failed, e.g. in a container "
         "without CAP_SETUID), so permission errors cannot be provoked";
}

std::optional<std::string> unprivileged_shell_prefix(const std::string& binary) {
  const std::string prefix = ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  const std::string probe = prefix + binary + " info >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) return std::nullopt;
  return prefix;
}

}  // namespace lmx::test
