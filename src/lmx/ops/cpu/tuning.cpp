// The CPU tuning table: its schema, built-in values and the table in use (tuning.h).
#include "lmx/ops/cpu/tuning.h"

#include "lmx/ops/ops.h"

namespace lmx::ops::cpu {

namespace {

// Every field of the table, in print order (tuning.h describes the visitors).
template <class Visitor>
void schema(Visitor& v, CpuTuning& t) {
  v.group("quantized", [&] { v.field("integer_kernels", t.quantized.integer_kernels); });
}

}  // namespace

CpuTuning builtin_tuning(const std::string& /*simd_target*/) {
  return CpuTuning{};
}

CpuTuning apply_tuning(CpuTuning table, const TuningFile& file) {
  TuningReader reader(file.section("cpu"), file.path, "cpu");
  schema(reader, table);
  reader.finish();
  return table;
}

const CpuTuning& tuning() {
  static const CpuTuning table = apply_tuning(builtin_tuning(simd_target_name()), tuning_file());
  return table;
}

TuningJson tuning_json(const CpuTuning& table) {
  TuningWriter writer;
  CpuTuning copy = table;
  schema(writer, copy);
  return writer.json();
}

}  // namespace lmx::ops::cpu
