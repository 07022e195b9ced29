// Work accounting that bounds the time and memory one render may spend, so hostile templates end.
#include "lmx/text/jinja/budget.h"

#include "lmx/text/jinja/template_error.h"

namespace lmx::jinja {
namespace {
thread_local BudgetScope* active_budget = nullptr;
}  // namespace

BudgetScope::BudgetScope(const RenderLimits& limits)
    : bytes_left_(limits.max_work_bytes),
      iterations_left_(limits.max_loop_iterations),
      previous_(active_budget) {
  active_budget = this;
}

BudgetScope::~BudgetScope() {
  active_budget = previous_;
}

void charge_bytes(size_t bytes) {
  BudgetScope* budget = active_budget;
  if (!budget) return;
  budget->bytes_left_ -= static_cast<int64_t>(bytes);
  if (budget->bytes_left_ < 0)
    throw TemplateError("template exceeded its work budget (bytes built by string operations)");
}

void charge_iterations(int64_t iterations) {
  BudgetScope* budget = active_budget;
  if (!budget) return;
  budget->iterations_left_ -= iterations;
  if (budget->iterations_left_ < 0) throw TemplateError("template exceeded its loop iteration budget");
}

}  // namespace lmx::jinja
