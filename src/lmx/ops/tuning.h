// Tuning as data: the one optional override file of the backends' tuning tables (cpu/tuning.h,
// cuda/tuning.h), and the schema visitors that read a table from it strictly and write a table as JSON.
//
// A backend describes its table once, as a function template over a visitor (`schema(v, table)`), by
// calling v.group / v.field / v.one_of / v.choice / v.list in the order the fields print. TuningReader
// applies a section of the override file to a table (strict: an unknown key, a value of the wrong type or
// out of range is an InvalidArgument naming the file and the key path); TuningWriter writes a table as the
// same JSON, so `lmx info --json`'s tables are override files.
//
// The override file is JSON: {"cpu": {...}, "cuda": {...}}, each section a subset of its backend's table
// (fields left out keep the built-in values; a list given replaces the built-in list). It is named by the
// lmx CLI's --tuning FILE (set_tuning_file) or else by the environment variable LMX_TUNING, and read once.
#pragma once

#include "lmx/core/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace lmx::ops {

using TuningJson = nlohmann::ordered_json;

// The environment variable that names the override file when set_tuning_file was not called.
inline constexpr const char* kTuningEnvironment = "LMX_TUNING";

// An override file, parsed: its path ("" when there is none: the built-in tables) and its top-level object.
struct TuningFile {
  std::string path;
  TuningJson root = TuningJson::object();

  // The section of a backend ("cpu", "cuda"), or null when the file has none.
  const TuningJson* section(const char* backend) const;
  // "built-in", or the file's path.
  std::string source() const { return path.empty() ? "built-in" : path; }
};

// Parses the text of an override file named `path` (for messages): InvalidArgument naming it when the text
// is not a JSON object, or has a top-level key other than "cpu" and "cuda". The sections are checked by
// the backends (cpu::apply_tuning, cuda::apply_tuning).
TuningFile parse_tuning_file(const std::string& text, const std::string& path);

// Names the override file (the CLI's --tuning; "" for none, which also ignores LMX_TUNING): read and parsed
// now (IoError when it cannot be read) and fixed for the process. InvalidArgument when another file (or
// none) is already fixed, by an earlier call or by tuning_file(): the tables built from it stay in use.
void set_tuning_file(const std::string& path);

// The override file in use, fixed on the first call: set_tuning_file's, else the one LMX_TUNING names (unset
// or empty: none). Thread-safe.
const TuningFile& tuning_file();

// Applies a section of an override file to a table through its schema.
class TuningReader {
 public:
  // `section`: the backend's object in the file (null: nothing to apply); `path`: its key ("cuda").
  TuningReader(const TuningJson* section, std::string file, std::string path);

  // The fields that fields() visits, inside object `name`, where the section has it.
  template <class Fields>
  void group(const char* name, Fields fields) {
    const TuningJson* object = enter(name);
    if (object == nullptr) return;
    fields();
    leave();
  }
  void field(const char* name, bool& value);
  // An integer in [min, max].
  void field(const char* name, int& value, int64_t min, int64_t max);
  void field(const char* name, int64_t& value, int64_t min, int64_t max);
  // A number in [min, max].
  void field(const char* name, double& value, double min, double max);
  // An integer among `allowed`.
  void one_of(const char* name, int& value, std::initializer_list<int> allowed);
  // An enumeration, written as one of the names of `names`.
  template <class Enum>
  void choice(const char* name, Enum& value, std::initializer_list<std::pair<Enum, const char*>> names) {
    const TuningJson* v = find(name);
    if (v == nullptr) return;
    std::string known;
    for (const auto& [e, text] : names) {
      if (v->is_string() && v->get<std::string>() == text) {
        value = e;
        return;
      }
      known += known.empty() ? "" : ", ";
      known += text;
    }
    fail(name, fmt::format("{} is not one of {}", v->dump(), known));
  }
  // A list of entries, each an object whose fields entry_fields(entry) visits; the file's list replaces the
  // table's. Fields visited with `required` set must be present in every entry.
  template <class Entry, class Fields>
  void list(const char* name, std::vector<Entry>& entries, Fields entry_fields) {
    const TuningJson* array = find(name);
    if (array == nullptr) return;
    if (!array->is_array()) fail(name, fmt::format("expected a list, got {}", array->dump()));
    std::vector<Entry> read;
    for (size_t i = 0; i < array->size(); ++i) {
      enter_entry(name, i);
      read.emplace_back();
      entry_fields(read.back());
      leave();
    }
    entries = std::move(read);
  }
  // Marks the next fields visited as required (in list entries: the shape keys).
  void required(bool on) { required_ = on; }
  // After the schema: InvalidArgument for a key of the section that no visit named.
  void finish() {
    if (!frames_.empty()) leave();
  }

 private:
  struct Frame {
    const TuningJson* object;
    std::string path;
    std::vector<std::string> known;
  };
  // The value of key `name` in the current object (recorded as known), or null when absent.
  const TuningJson* find(const char* name);
  const TuningJson* enter(const char* name);
  void enter_entry(const char* name, size_t index);
  void leave();  // InvalidArgument for a key of the object that no visit named
  [[noreturn]] void fail(const char* name, const std::string& what) const;
  int64_t integer(const char* name, const TuningJson& v, int64_t min, int64_t max) const;

  std::string file_;
  std::vector<Frame> frames_;
  bool required_ = false;
};

// Writes a table through its schema as JSON (the override file's form).
class TuningWriter {
 public:
  TuningJson& json() { return root_; }

  template <class Fields>
  void group(const char* name, Fields fields) {
    TuningJson* outer = current_;
    current_ = &((*current_)[name] = TuningJson::object());
    fields();
    current_ = outer;
  }
  void field(const char* name, bool& value) { (*current_)[name] = value; }
  void field(const char* name, int& value, int64_t, int64_t) { (*current_)[name] = value; }
  void field(const char* name, int64_t& value, int64_t, int64_t) { (*current_)[name] = value; }
  void field(const char* name, double& value, double, double) { (*current_)[name] = value; }
  void one_of(const char* name, int& value, std::initializer_list<int>) { (*current_)[name] = value; }
  template <class Enum>
  void choice(const char* name, Enum& value, std::initializer_list<std::pair<Enum, const char*>> names) {
    for (const auto& [e, text] : names)
      if (e == value) (*current_)[name] = text;
  }
  template <class Entry, class Fields>
  void list(const char* name, std::vector<Entry>& entries, Fields entry_fields) {
    TuningJson* outer = current_;
    TuningJson& array = (*outer)[name] = TuningJson::array();
    for (Entry& entry : entries) {
      array.push_back(TuningJson::object());
      current_ = &array.back();
      entry_fields(entry);
    }
    current_ = outer;
  }
  void required(bool) {}

 private:
  TuningJson root_ = TuningJson::object();
  TuningJson* current_ = &root_;
};

// The keys whose values differ between two tables written by TuningWriter, as "a.b.c" paths (a list that
// differs is one key), in the order of `table`.
std::vector<std::string> tuning_differences(const TuningJson& table, const TuningJson& builtin);

}  // namespace lmx::ops
