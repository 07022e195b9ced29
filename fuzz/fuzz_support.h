// Helpers of the libFuzzer targets: what counts as a handled input, files of the source tree.
#pragma once

#include "lmx/core/error.h"

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace lmx::fuzz {

// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; an lmx::Error is the documented answer to bad input. Any other exception escapes
// to libFuzzer, which reports it (with the input) as a crash: it would reach std::terminate or a
// caller that expects lmx errors only.
template <typename Body>
void expect_only_lmx_errors(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

// A file of the lmx source tree (LMX_SOURCE_DIR, set by the build), read whole; aborts when missing,
// since a target without its fixture would fuzz nothing.
inline std::string source_file(const std::string& relative) {
  std::ifstream in(std::string(LMX_SOURCE_DIR) + "/" + relative, std::ios::binary);
  if (!in) __builtin_trap();
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace lmx::fuzz
