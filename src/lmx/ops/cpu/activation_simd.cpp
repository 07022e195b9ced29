// tanh-based activations for the CPU ops, Highway SIMD compiled per x86 target and dispatched at run time:
// GELU rows (tanh approximation) and the logit softcap. Every CPU path that applies GELU (ops::gelu_tanh,
// ops::gelu_tanh_mul, the dense and quantized MoE dispatch) calls gelu_tanh_mul_row, so they all round
// alike; ops::softcap calls softcap_row (cap · tanh(x / cap), the division and product rounded to f32).
//
// Numerics: cpu::gelu_tanh's operation order in f32 — 0.5·x·(1 + tanh(β·(x + κ·x³))), each product and
// sum rounded to f32 — except tanh itself, which is evaluated in f64 (Highway's Tanh: ≤ 4 f64 ulp) and
// rounded to f32: within one f32 ulp of the exact tanh, as glibc's tanhf is, and ~10x faster than calling
// it per element. An element's result depends only on its inputs: a row's tail runs the same vector code
// on a zero-padded copy.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lmx/ops/cpu/activation_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "lmx/ops/cpu/kernels.h"

#include <algorithm>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lmx::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f64 lanes, and as many f32 lanes (half a vector).
using D64 = hn::ScalableTag<double>;
using DF = hn::Rebind<float, D64>;

// Largest f64 lane count of any target (2048-bit vectors): the zero-padded tail buffers.
constexpr int kMaxLanes = 32;

// tanh in f64, rounded to f32 (see the numerics above).
HWY_INLINE hn::Vec<DF> tanh_rounded(hn::Vec<DF> x) {
  const D64 dd;
  return hn::DemoteTo(DF(), hn::Tanh(dd, hn::PromoteTo(dd, x)));
}

HWY_INLINE hn::Vec<DF> gelu(hn::Vec<DF> x) {
  const DF df;
  const auto cube = hn::Mul(hn::Mul(x, x), x);
  const auto inner = hn::Mul(hn::Set(df, 0.7978845608028654f), hn::Add(x, hn::Mul(hn::Set(df, 0.044715f), cube)));
  const auto t = tanh_rounded(inner);
  return hn::Mul(hn::Mul(hn::Set(df, 0.5f), x), hn::Add(hn::Set(df, 1.0f), t));
}

// out[i] = gelu(gate[i]) * up[i] (up == nullptr: gelu(gate[i])) for i < n; out may alias gate or up.
HWY_INLINE void gelu_block(const float* gate, const float* up, float* out) {
  const DF df;
  auto y = gelu(hn::LoadU(df, gate));
  if (up != nullptr) y = hn::Mul(y, hn::LoadU(df, up));
  hn::StoreU(y, df, out);
}

void gelu_tanh_mul_row_impl(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) gelu_block(gate + i, up == nullptr ? nullptr : up + i, out + i);
  if (i == n) return;
  alignas(64) float g[kMaxLanes] = {}, u[kMaxLanes] = {}, o[kMaxLanes];
  const int64_t rest = n - i;
  std::copy_n(gate + i, rest, g);
  if (up != nullptr) std::copy_n(up + i, rest, u);
  gelu_block(g, up == nullptr ? nullptr : u, o);
  std::copy_n(o, rest, out + i);
}

HWY_INLINE void softcap_block(float* x, float cap) {
  const DF df;
  const auto c = hn::Set(df, cap);
  hn::StoreU(hn::Mul(c, tanh_rounded(hn::Div(hn::LoadU(df, x), c))), df, x);
}

void softcap_row_impl(float* x, int64_t n, float cap) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) softcap_block(x + i, cap);
  if (i == n) return;
  alignas(64) float rest[kMaxLanes] = {};
  std::copy_n(x + i, n - i, rest);
  softcap_block(rest, cap);
  std::copy_n(rest, n - i, x + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace lmx::ops::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmx::ops::cpu {

HWY_EXPORT(gelu_tanh_mul_row_impl);
HWY_EXPORT(softcap_row_impl);

void gelu_tanh_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(gelu_tanh_mul_row_impl)(gate, up, out, n);
}

void softcap_row(float* x, int64_t n, float cap) { HWY_DYNAMIC_DISPATCH(softcap_row_impl)(x, n, cap); }

}  // namespace lmx::ops::cpu
#endif
