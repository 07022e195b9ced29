// The CPU backend's tuning table: its kernel choices as typed data, built in per SIMD target, overridable by
// the "cpu" section of the tuning override file (lmx/ops/tuning.h) and printed by `lmx info`.
#pragma once

#include "lmx/ops/tuning.h"

#include <string>

namespace lmx::ops::cpu {

struct CpuTuning {
  // The quantized projections and MoE experts (quantized_linear.cpp, quantized_moe.cpp).
  struct Quantized {
    // Run 4- and 8-bit weights on the integer (AVX-512 VNNI) kernels where the CPU has them
    // (quantized_integer_kernels, kernels.h); false: the f32 kernels everywhere (for comparisons).
    bool integer_kernels = true;
  } quantized;
};

// The built-in table for a SIMD target (a Highway target name such as "AVX3_SPR"): today one table for every
// target (the integer kernels decide by themselves where they run).
CpuTuning builtin_tuning(const std::string& simd_target);

// The table in use: the dispatched target's built-in table with the override file's "cpu" section applied;
// built on first use and fixed for the process (InvalidArgument naming the file and key for a bad section).
const CpuTuning& tuning();

// `table` with `file`'s "cpu" section applied (InvalidArgument naming the file and the key path).
CpuTuning apply_tuning(CpuTuning table, const TuningFile& file);

// The table as JSON in the override section's form.
TuningJson tuning_json(const CpuTuning& table);

}  // namespace lmx::ops::cpu
