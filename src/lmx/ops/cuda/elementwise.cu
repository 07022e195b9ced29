// CUDA elementwise ops: gelu_tanh(_mul), softcap, add, scale, mul, mul_rows and copy_rows (elementwise.h).
//
// Arithmetic uses explicit round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...) so nvcc never
// contracts a multiply-add into an FMA: each op rounds exactly like its CPU twin (which never contracts
// either), leaving only CUDA tanhf's ulp-level difference from the CPU's tanh (f64, rounded to f32).
#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"

namespace lmx::cuda {
namespace {

using detail::aligned16;
using detail::grid_blocks;
using detail::kThreads;

struct GeluOp {
  __device__ float operator()(float x) const { return detail::gelu_tanh(x); }
};
struct SoftcapOp {
  float cap;
  __device__ float operator()(float x) const { return __fmul_rn(cap, tanhf(__fdiv_rn(x, cap))); }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float x) const { return __fmul_rn(x, s); }
};
struct AddOp {
  __device__ float operator()(float o, float a) const { return __fadd_rn(o, a); }
};
struct MulOp {
  __device__ float operator()(float o, float a) const { return __fmul_rn(o, a); }
};

template <typename Op>
__device__ __forceinline__ float4 map4(float4 v, Op op) {
  return make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
}
template <typename Op>
__device__ __forceinline__ float4 zip4(float4 a, float4 b, Op op) {
  return make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// x[i] = op(x[i]) for i < n. kVec4: x is 16-byte aligned; n/4 float4s, then the n%4 tail.
template <bool kVec4, typename Op>
__global__ void map_kernel(float* x, int64_t n, Op op) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int64_t stride = grid_threads();
  int64_t start = 0;
  if constexpr (kVec4) {
    float4* x4 = reinterpret_cast<float4*>(x);
    const int64_t n4 = n / 4;
    for (int64_t i = global_thread(); i < n4; i += stride) x4[i] = map4(x4[i], op);
    start = n4 * 4;
  }
  for (int64_t i = start + global_thread(); i < n; i += stride) x[i] = op(x[i]);
}

// out[i] = op(out[i], a[i]) for i < n (a may alias out). kVec4: both 16-byte aligned.
template <bool kVec4, typename Op>
__global__ void zip_kernel(float* out, const float* a, int64_t n, Op op) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int64_t stride = grid_threads();
  int64_t start = 0;
  if constexpr (kVec4) {
    float4* o4 = reinterpret_cast<float4*>(out);
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const int64_t n4 = n / 4;
    for (int64_t i = global_thread(); i < n4; i += stride) o4[i] = zip4(o4[i], a4[i], op);
    start = n4 * 4;
  }
  for (int64_t i = start + global_thread(); i < n; i += stride) out[i] = op(out[i], a[i]);
}

// x[i] *= y[i % cols] over n = rows * cols elements; V is float (cols any) or float4 (cols counted in
// float4s, both pointers aligned).
template <typename V>
__global__ void mul_rows_kernel(V* x, const V* y, int64_t n, int64_t cols) {
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    if constexpr (sizeof(V) == sizeof(float))
      x[i] = __fmul_rn(x[i], y[i % cols]);
    else
      x[i] = zip4(x[i], y[i % cols], MulOp{});
  }
}

// out[r, c] = gelu(gate[r, c]) * up[r, c]; V = float or float4 (cols and strides in units of V).
template <typename V>
__global__ void gelu_tanh_mul_kernel(const V* gate, int64_t gate_stride, const V* up, int64_t up_stride, V* out,
                                     int64_t out_stride, int64_t rows, int64_t cols) {
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const V g = gate[r * gate_stride + c];
      const V u = up[r * up_stride + c];
      if constexpr (sizeof(V) == sizeof(float))
        out[r * out_stride + c] = detail::gelu_tanh_mul(g, u);
      else
        out[r * out_stride + c] = zip4(map4(g, GeluOp{}), u, MulOp{});
    }
  }
}

// dst[r, c] = src[r, c]; V = float or float4 (cols and strides in units of V).
template <typename V>
__global__ void copy_rows_kernel(const V* src, int64_t src_stride, V* dst, int64_t dst_stride, int64_t rows,
                                 int64_t cols) {
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

template <typename Op>
void launch_map(float* x, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  if (aligned16(x) && n >= 4) {
    launch(map_kernel<true, Op>, grid_blocks(n / 4, kThreads), kThreads, 0, stream, x, n, op);
  } else {
    launch(map_kernel<false, Op>, grid_blocks(n, kThreads), kThreads, 0, stream, x, n, op);
  }
}

template <typename Op>
void launch_zip(float* out, const float* a, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  if (aligned16(out) && aligned16(a) && n >= 4) {
    launch(zip_kernel<true, Op>, grid_blocks(n / 4, kThreads), kThreads, 0, stream, out, a, n, op);
  } else {
    launch(zip_kernel<false, Op>, grid_blocks(n, kThreads), kThreads, 0, stream, out, a, n, op);
  }
}

}  // namespace

void gelu_tanh_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec4 = cols % 4 == 0 && gate_stride % 4 == 0 && up_stride % 4 == 0 && out_stride % 4 == 0 &&
                    aligned16(gate) && aligned16(up) && aligned16(out);
  if (vec4) {
    const detail::RowLaunch l = detail::row_launch(rows, cols / 4);
    launch(gelu_tanh_mul_kernel<float4>, l.grid, l.block, 0, stream, reinterpret_cast<const float4*>(gate),
        gate_stride / 4, reinterpret_cast<const float4*>(up), up_stride / 4, reinterpret_cast<float4*>(out),
        out_stride / 4, rows, cols / 4);
  } else {
    const detail::RowLaunch l = detail::row_launch(rows, cols);
    launch(gelu_tanh_mul_kernel<float>, l.grid, l.block, 0, stream, gate, gate_stride, up, up_stride, out,
        out_stride, rows, cols);
  }
}

void gelu_tanh(float* x, int64_t n, cudaStream_t stream) { launch_map(x, n, GeluOp{}, stream); }

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) { launch_map(x, n, SoftcapOp{cap}, stream); }

void add(float* out, const float* a, int64_t n, cudaStream_t stream) { launch_zip(out, a, n, AddOp{}, stream); }

void scale(float* x, int64_t n, float s, cudaStream_t stream) { launch_map(x, n, ScaleOp{s}, stream); }

void mul(float* x, const float* y, int64_t n, cudaStream_t stream) { launch_zip(x, y, n, MulOp{}, stream); }

void mul_rows(float* x, const float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t n = rows * cols;
  if (cols % 4 == 0 && aligned16(x) && aligned16(y)) {
    launch(mul_rows_kernel<float4>, grid_blocks(n / 4, kThreads), kThreads, 0, stream, reinterpret_cast<float4*>(x),
        reinterpret_cast<const float4*>(y), n / 4, cols / 4);
  } else {
    launch(mul_rows_kernel<float>, grid_blocks(n, kThreads), kThreads, 0, stream, x, y, n, cols);
  }
}

void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols,
               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec4 = cols % 4 == 0 && src_stride % 4 == 0 && dst_stride % 4 == 0 && aligned16(src) && aligned16(dst);
  if (vec4) {
    const detail::RowLaunch l = detail::row_launch(rows, cols / 4);
    launch(copy_rows_kernel<float4>, l.grid, l.block, 0, stream, reinterpret_cast<const float4*>(src),
        src_stride / 4, reinterpret_cast<float4*>(dst), dst_stride / 4, rows, cols / 4);
  } else {
    const detail::RowLaunch l = detail::row_launch(rows, cols);
    launch(copy_rows_kernel<float>, l.grid, l.block, 0, stream, src, src_stride, dst, dst_stride, rows, cols);
  }
}

}  // namespace lmx::cuda
