// Tests for the tuning override file (ops/tuning.h) and the CPU tuning table (cpu/tuning.h): the file's
// top-level checks, the strict reader (unknown keys, wrong types, ranges; every error names the file and the
// key path), the writer's JSON as an override file, and differences against the built-in table.
#include "lmx/ops/cpu/tuning.h"
#include "lmx/ops/tuning.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace lmx {
namespace {

// The override file of `text`, named "t.json".
ops::TuningFile file_of(const std::string& text) {
  return ops::parse_tuning_file(text, "t.json");
}

// Whether `fn` throws InvalidArgument whose message holds every one of `parts`.
template <class Fn>
void expect_invalid(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "accepted; expected an error naming " << *parts.begin();
  } catch (const InvalidArgument& e) {
    for (const char* part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TuningFile, TopLevelIsCheckedAndSectionsFound) {
  const ops::TuningFile empty = file_of("{}");
  EXPECT_EQ(empty.section("cpu"), nullptr);
  EXPECT_EQ(empty.source(), "t.json");
  const ops::TuningFile both = file_of(R"({"cpu": {}, "cuda": {"launch": {"pdl": false}}})");
  ASSERT_NE(both.section("cuda"), nullptr);
  EXPECT_EQ((*both.section("cuda"))["launch"]["pdl"], false);
  EXPECT_EQ(ops::TuningFile{}.source(), "built-in");
  expect_invalid([] { file_of("{"); }, {"t.json", "not JSON"});
  expect_invalid([] { file_of("[1]"); }, {"t.json", "expected an object"});
  expect_invalid([] { file_of(R"({"gpu": {}})"); }, {"t.json", "gpu: unknown key"});
  expect_invalid([] { file_of(R"({"cpu": 1})"); }, {"t.json", "cpu: expected an object"});
}

TEST(TuningFile, UnreadableFileIsAnIoError) {
  test::TempDir dir;
  EXPECT_THROW(ops::set_tuning_file(dir.file("missing.json")), IoError);
}

TEST(CpuTuning, BuiltInTableAndItsJson) {
  const ops::cpu::CpuTuning t = ops::cpu::builtin_tuning("AVX2");
  EXPECT_TRUE(t.quantized.integer_kernels);
  EXPECT_EQ(ops::cpu::tuning_json(t).dump(), R"({"quantized":{"integer_kernels":true}})");
  // No file: the built-in table.
  EXPECT_TRUE(ops::cpu::apply_tuning(t, ops::TuningFile{}).quantized.integer_kernels);
}

TEST(CpuTuning, OverrideChangesTheTable) {
  const auto t = ops::cpu::apply_tuning(ops::cpu::builtin_tuning("AVX2"),
                                        file_of(R"({"cpu": {"quantized": {"integer_kernels": false}}})"));
  EXPECT_FALSE(t.quantized.integer_kernels);
  // A table's JSON read back as a file gives the table.
  const ops::TuningJson json = ops::cpu::tuning_json(t);
  const auto back =
      ops::cpu::apply_tuning(ops::cpu::builtin_tuning("AVX2"), file_of("{\"cpu\": " + json.dump() + "}"));
  EXPECT_EQ(ops::cpu::tuning_json(back), json);
  EXPECT_EQ(ops::tuning_differences(json, ops::cpu::tuning_json(ops::cpu::builtin_tuning("AVX2"))),
            std::vector<std::string>{"quantized.integer_kernels"});
}

TEST(CpuTuning, StrictReaderNamesFileAndKeyPath) {
  const auto apply = [](const char* text) {
    (void)ops::cpu::apply_tuning(ops::cpu::builtin_tuning("AVX2"), file_of(text));
  };
  expect_invalid([&] { apply(R"({"cpu": {"quantised": {}}})"); }, {"t.json", "cpu.quantised: unknown key"});
  expect_invalid([&] { apply(R"({"cpu": {"quantized": {"integer": true}}})"); },
                 {"t.json", "cpu.quantized.integer: unknown key"});
  expect_invalid([&] { apply(R"({"cpu": {"quantized": {"integer_kernels": 0}}})"); },
                 {"t.json", "cpu.quantized.integer_kernels: expected true or false"});
  expect_invalid([&] { apply(R"({"cpu": {"quantized": true}})"); },
                 {"t.json", "cpu.quantized: expected an object"});
}

TEST(TuningReader, NumbersChoicesAndListsAreChecked) {
  struct Entry {
    int64_t n = 0;
    int size = 0;
  };
  enum class Mode { kA, kB };
  struct Table {
    int64_t count = 5;
    double cost = 0.5;
    int ring = 2;
    Mode mode = Mode::kA;
    std::vector<Entry> entries{{1, 1}};
  };
  const auto schema = [](auto& v, Table& t) {
    v.field("count", t.count, 0, 10);
    v.field("cost", t.cost, 0.0, 1.0);
    v.one_of("ring", t.ring, {2, 4});
    v.choice("mode", t.mode, {{Mode::kA, "a"}, {Mode::kB, "b"}});
    v.list("entries", t.entries, [&](Entry& e) {
      v.required(true);
      v.field("n", e.n, 1, 100);
      v.required(false);
      v.field("size", e.size, 1, 4);
    });
  };
  const auto read = [&](const char* text) {
    const ops::TuningFile file = file_of(text);
    Table t;
    ops::TuningReader reader(file.section("cuda"), file.path, "cuda");
    schema(reader, t);
    reader.finish();
    return t;
  };
  const Table t = read(
      R"({"cuda": {"count": 10, "cost": 1, "ring": 4, "mode": "b", "entries": [{"n": 7}, {"n": 8, "size": 3}]}})");
  EXPECT_EQ(t.count, 10);
  EXPECT_EQ(t.cost, 1.0);
  EXPECT_EQ(t.ring, 4);
  EXPECT_EQ(t.mode, Mode::kB);
  ASSERT_EQ(t.entries.size(), 2u);  // (the file's list replaces the table's)
  EXPECT_EQ(t.entries[0].n, 7);
  EXPECT_EQ(t.entries[0].size, 0);
  EXPECT_EQ(t.entries[1].size, 3);
  EXPECT_TRUE(read(R"({"cuda": {"entries": []}})").entries.empty());
  EXPECT_EQ(read("{}").count, 5);  // no section: the table unchanged

  expect_invalid([&] { read(R"({"cuda": {"count": 11}})"); },
                 {"t.json", "cuda.count: 11 is outside [0, 10]"});
  expect_invalid([&] { read(R"({"cuda": {"count": -1}})"); }, {"cuda.count: -1 is outside"});
  expect_invalid([&] { read(R"({"cuda": {"count": 18446744073709551615}})"); }, {"cuda.count", "outside"});
  expect_invalid([&] { read(R"({"cuda": {"count": 2.5}})"); }, {"cuda.count: expected an integer"});
  expect_invalid([&] { read(R"({"cuda": {"count": "2"}})"); }, {"cuda.count: expected an integer"});
  expect_invalid([&] { read(R"({"cuda": {"cost": 1.5}})"); }, {"cuda.cost: 1.5 is outside"});
  expect_invalid([&] { read(R"({"cuda": {"cost": true}})"); }, {"cuda.cost: expected a number"});
  expect_invalid([&] { read(R"({"cuda": {"ring": 3}})"); }, {"cuda.ring: 3 is not one of 2, 4"});
  expect_invalid([&] { read(R"({"cuda": {"mode": "c"}})"); }, {"cuda.mode: \"c\" is not one of a, b"});
  expect_invalid([&] { read(R"({"cuda": {"mode": 1}})"); }, {"cuda.mode: 1 is not one of a, b"});
  expect_invalid([&] { read(R"({"cuda": {"entries": {"n": 1}}})"); }, {"cuda.entries: expected a list"});
  expect_invalid([&] { read(R"({"cuda": {"entries": [1]}})"); }, {"cuda.entries[0]: expected an object"});
  expect_invalid([&] { read(R"({"cuda": {"entries": [{"n": 1}, {"size": 2}]}})"); },
                 {"t.json", "cuda.entries[1].n: missing"});
  expect_invalid([&] { read(R"({"cuda": {"entries": [{"n": 1, "sise": 2}]}})"); },
                 {"cuda.entries[0].sise: unknown key"});
  expect_invalid([&] { read(R"({"cuda": {"entries": [{"n": 1, "size": 5}]}})"); },
                 {"cuda.entries[0].size: 5 is outside [1, 4]"});
  expect_invalid([&] { read(R"({"cuda": {"cont": 1}})"); }, {"cuda.cont: unknown key"});
}

TEST(TuningReader, DifferencesListChangedKeys) {
  const ops::TuningJson a = ops::TuningJson::parse(R"({"x": {"y": 1, "z": [1]}, "w": true})");
  const ops::TuningJson b = ops::TuningJson::parse(R"({"x": {"y": 2, "z": [1]}, "w": true})");
  EXPECT_EQ(ops::tuning_differences(a, b), std::vector<std::string>{"x.y"});
  EXPECT_TRUE(ops::tuning_differences(a, a).empty());
  const ops::TuningJson c = ops::TuningJson::parse(R"({"x": {"y": 1, "z": [1, 2]}, "w": false})");
  EXPECT_EQ(ops::tuning_differences(c, a), (std::vector<std::string>{"x.z", "w"}));
}

}  // namespace
}  // namespace lmx
