// The CPU backend: the Backend op set over the CPU ops (ops.h, quantized.h) on host memory, weights used
// in place (memory-mapped), no fused ops, no graphs.
#pragma once

#include "lmx/ops/backend.h"

#include <memory>

namespace lmx {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace lmx
