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

}  // namespace lmx

// Throws ErrorType (an lmx::Error) with a fmt-formatted message when `cond` is false. The message
// arguments are evaluated only on failure, so checks on hot paths cost one branch. For user-facing
// checks only; internal impossibilities use assert.
#define LMX_REQUIRE(ErrorType, cond, ...)                                  \
  do {                                                                      \
    if (!(cond)) [[unlikely]] throw ErrorType(::fmt::format(__VA_ARGS__)); \
  } while (0)

