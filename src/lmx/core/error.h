// Error types thrown at lmx's boundaries; each message names what was wrong and where.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace lmx {

// Base of every error lmx reports to a caller. Messages carry their context (file, tensor,
// field, request) so a user can act on them without a debugger.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file could not be opened, read, mapped or written.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file's contents are malformed (bad header, wrong sizes, missing tensor, ...).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A configuration value is missing, of the wrong type, or out of range.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A caller passed an argument that violates a documented contract (bad token id, shape, flag).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The input is well-formed but asks for something lmx does not implement.
class Unsupported : public Error {
 public:
  using Error::Error;
};

// Throws E with a formatted message when `cond` is false. For user-facing checks only;
// internal impossibilities use assert.
template <typename E, typename... Args>
inline void require(bool cond, fmt::format_string<Args...> format, Args&&... args) {
  if (!cond) throw E(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace lmx
