// Runs test code as an unprivileged user, so permission checks apply even when the tests run as root.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace lmx::test {

// Runs `body` in a forked child with root's privileges dropped (uid/gid 65534, "nobody", no
// supplementary groups) when the tests run as root, or as the current user otherwise, and returns
// what `body` returned. nullopt when privileges could not be dropped or the child did not finish
// normally; callers skip with unprivileged_skip_reason() then. Paths `body` touches must be
// reachable by that user (make test directories 0755).
std::optional<std::string> run_unprivileged(const std::function<std::string()>& body);

// Why a permission test cannot run here (for GTEST_SKIP).
std::string unprivileged_skip_reason();

// A shell prefix that runs a command as that unprivileged user ("" when not root), e.g. for
// run_lmx; nullopt when no such prefix works here (no setpriv, or the lmx binary is not reachable
// by that user).
std::optional<std::string> unprivileged_shell_prefix(const std::string& binary);

}  // namespace lmx::test
