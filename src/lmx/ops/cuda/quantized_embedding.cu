// quantized_embedding (linear.h): one block row per token, one thread per output element; the values are
// the CPU op's bit for bit: fmaf(scale, code, bias) * mul in f32.
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/quant_codes.cuh"

namespace lmx::cuda {
namespace {

__global__ void quantized_embedding_kernel(const DeviceQuantized table, const int32_t* ids, float mul, float* out,
                                           int64_t out_stride) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int64_t t = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= table.cols) return;
  const int32_t id = ids[t];
  float v = 0.0f;  // ids are validated on the host; one outside [0, rows) reads as a row of zeros
  if (id >= 0 && id < table.rows)
    v = dequantize_element(table.codes, table.scales, table.biases, table.scale_dtype, table.bits,
                           table.group_size, table.cols, id, j) *
        mul;
  out[t * out_stride + j] = v;
}

}  // namespace

void quantized_embedding(const DeviceQuantized& table, const int32_t* ids, int64_t count, float scale, float* out,
                         int64_t out_stride, cudaStream_t stream) {
  const bool bits_ok = table.bits >= 2 && table.bits <= 8 && table.bits != 7;
  LMX_REQUIRE(InvalidArgument, bits_ok && table.batch == 1 && table.cols > 0 && table.cols % table.group_size == 0,
              "quantized_embedding: unsupported table (bits {}, group {}, batch {}, [{}, {}])", table.bits,
              table.group_size, table.batch, table.rows, table.cols);
  LMX_REQUIRE(InvalidArgument, count >= 0 && out_stride >= table.cols,
              "quantized_embedding: count {} with out stride {} (dim {})", count, out_stride, table.cols);
  if (count == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(count), static_cast<unsigned>((table.cols + kThreads - 1) / kThreads));
  launch(quantized_embedding_kernel, grid, kThreads, 0, stream, table, ids, scale, out, out_stride);
}

}  // namespace lmx::cuda
