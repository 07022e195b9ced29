// Weights uploaded to the GPU once: projections as stored (bf16/f32 dense, or MLX packed codes with their
// scales and biases), optionally stacked into one matrix (q | k | v, gate | up) when stored alike.
#pragma once

#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/weight.h"

#include <span>

namespace lmx {

// One projection or embedding table on the device (dense or quantized; `defined` false when absent).
struct DeviceWeight {
  bool defined = false;
  bool quantized = false;
  cuda::DeviceDense dense;
  cuda::DeviceQuantized packed;
  cuda::DeviceBuffer data, scales, biases;  // own the memory the views above point into

  int64_t rows() const { return quantized ? packed.rows : dense.rows; }
};

// Copies a projection or embedding table to the current device as stored (f16 dense matrices are widened
// to f32); undefined when `w` is.
DeviceWeight upload_weight(const Weight& w);
// 2-D projections with the same input width and storage (same dtype, or same bits, group size and scale
// dtype) as one [Σ rows, cols] weight, in the given order; undefined when any is absent or they differ.
// Each output row is computed from its own weight row, so the stacked projection gives the same values as
// the separate ones (up to the reduction split, which is chosen per shape).
DeviceWeight upload_stacked(std::span<const Weight* const> parts);
// Quantized expert gate and up stacks [E, I, H] as one [E, 2I, H] stack, expert by expert (the layout
// cuda::quantized_moe_experts reads). Unsupported when the two are not quantized alike.
DeviceWeight upload_expert_gate_up(const Weight& gate, const Weight& up);
// Device bytes a weight holds.
size_t device_bytes(const DeviceWeight& w);

}  // namespace lmx
