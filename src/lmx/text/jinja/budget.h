// Work accounting that bounds the time and memory one render may spend, so hostile templates end.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmx::jinja {

// Bounds for one render. Defaults allow chats far larger than any context window.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // rendered text, and any one macro/block result
  int64_t max_work_bytes = int64_t{2} << 30;   // bytes built by string/list operations, in total
  int64_t max_loop_iterations = 50'000'000;    // for-loop iterations, in total
  int max_macro_depth = 100;                   // nested macro calls
  int max_eval_depth = 3000;                   // nested statements + expressions + calls
};

// Charges work to the render running on this thread; throws TemplateError when its budget is
// spent. Without an active render (e.g. a filter called from a unit test) nothing is charged.
void charge_bytes(size_t bytes);
void charge_iterations(int64_t iterations);

// Installs a fresh budget for the current thread for its lifetime (renders may nest).
class BudgetScope {
 public:
  explicit BudgetScope(const RenderLimits& limits);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  int64_t bytes_left_;
  int64_t iterations_left_;
  BudgetScope* previous_;
  friend void charge_bytes(size_t);
  friend void charge_iterations(int64_t);
};

}  // namespace lmx::jinja
