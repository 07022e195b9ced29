// The tuning override file and the strict schema reader (tuning.h).
#include "lmx/ops/tuning.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>

namespace lmx::ops {

namespace {

constexpr const char* kBackends[] = {"cpu", "cuda"};

std::mutex g_file_mutex;
std::optional<TuningFile> g_file;  // fixed by set_tuning_file or the first tuning_file()

TuningFile read_tuning_file(const std::string& path) {
  if (path.empty()) return TuningFile{};
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("tuning file {}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(fmt::format("tuning file {}: cannot be read", path));
  return parse_tuning_file(text.str(), path);
}

}  // namespace

const TuningJson* TuningFile::section(const char* backend) const {
  const auto it = root.find(backend);
  return it == root.end() ? nullptr : &*it;
}

TuningFile parse_tuning_file(const std::string& text, const std::string& path) {
  TuningFile file;
  file.path = path;
  try {
    file.root = TuningJson::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(fmt::format("tuning file {}: not JSON ({})", path, e.what()));
  }
  LMX_REQUIRE(InvalidArgument, file.root.is_object(),
              "tuning file {}: expected an object {{\"cpu\": ..., \"cuda\": ...}}", path);
  for (const auto& [key, value] : file.root.items()) {
    LMX_REQUIRE(InvalidArgument,
                std::find(std::begin(kBackends), std::end(kBackends), key) != std::end(kBackends),
                "tuning file {}: {}: unknown key (the sections are \"cpu\" and \"cuda\")", path, key);
    LMX_REQUIRE(InvalidArgument, value.is_object(), "tuning file {}: {}: expected an object, got {}", path,
                key, value.dump());
  }
  return file;
}

void set_tuning_file(const std::string& path) {
  TuningFile file = read_tuning_file(path);
  std::lock_guard lock(g_file_mutex);
  if (g_file.has_value()) {
    LMX_REQUIRE(InvalidArgument, g_file->path == path, "--tuning {}: the tuning tables already use {}", path,
                g_file->source());
    return;
  }
  g_file = std::move(file);
}

const TuningFile& tuning_file() {
  std::lock_guard lock(g_file_mutex);
  if (!g_file) {
    const char* env = std::getenv(kTuningEnvironment);
    g_file = read_tuning_file(env != nullptr ? env : "");
  }
  return *g_file;
}

// ---- TuningReader -----------------------------------------------------------------------------------------

TuningReader::TuningReader(const TuningJson* section, std::string file, std::string path)
    : file_(std::move(file)) {
  if (section != nullptr) frames_.push_back(Frame{section, std::move(path), {}});
}

const TuningJson* TuningReader::find(const char* name) {
  if (frames_.empty()) return nullptr;
  Frame& frame = frames_.back();
  frame.known.emplace_back(name);
  const auto it = frame.object->find(name);
  if (it == frame.object->end()) {
    if (required_) fail(name, "missing (every entry names its shape)");
    return nullptr;
  }
  return &*it;
}

const TuningJson* TuningReader::enter(const char* name) {
  const TuningJson* object = find(name);
  if (object == nullptr) return nullptr;
  if (!object->is_object()) fail(name, fmt::format("expected an object, got {}", object->dump()));
  frames_.push_back(Frame{object, frames_.back().path + "." + name, {}});
  return object;
}

void TuningReader::enter_entry(const char* name, size_t index) {
  const TuningJson& entry = (*frames_.back().object)[name][index];
  const std::string path = fmt::format("{}.{}[{}]", frames_.back().path, name, index);
  LMX_REQUIRE(InvalidArgument, entry.is_object(), "tuning file {}: {}: expected an object, got {}", file_,
              path, entry.dump());
  frames_.push_back(Frame{&entry, path, {}});
}

void TuningReader::leave() {
  const Frame& frame = frames_.back();
  for (const auto& [key, value] : frame.object->items())
    LMX_REQUIRE(InvalidArgument, std::find(frame.known.begin(), frame.known.end(), key) != frame.known.end(),
                "tuning file {}: {}.{}: unknown key", file_, frame.path, key);
  frames_.pop_back();
}

void TuningReader::fail(const char* name, const std::string& what) const {
  throw InvalidArgument(fmt::format("tuning file {}: {}.{}: {}", file_, frames_.back().path, name, what));
}

int64_t TuningReader::integer(const char* name, const TuningJson& v, int64_t min, int64_t max) const {
  if (!v.is_number_integer()) fail(name, fmt::format("expected an integer, got {}", v.dump()));
  const bool fits = !v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(max);
  const int64_t n = fits ? v.get<int64_t>() : max;
  if (!fits || n < min || n > max) fail(name, fmt::format("{} is outside [{}, {}]", v.dump(), min, max));
  return n;
}

void TuningReader::field(const char* name, bool& value) {
  const TuningJson* v = find(name);
  if (v == nullptr) return;
  if (!v->is_boolean()) fail(name, fmt::format("expected true or false, got {}", v->dump()));
  value = v->get<bool>();
}

void TuningReader::field(const char* name, int& value, int64_t min, int64_t max) {
  if (const TuningJson* v = find(name)) value = static_cast<int>(integer(name, *v, min, max));
}

void TuningReader::field(const char* name, int64_t& value, int64_t min, int64_t max) {
  if (const TuningJson* v = find(name)) value = integer(name, *v, min, max);
}

void TuningReader::field(const char* name, double& value, double min, double max) {
  const TuningJson* v = find(name);
  if (v == nullptr) return;
  if (!v->is_number()) fail(name, fmt::format("expected a number, got {}", v->dump()));
  const double d = v->get<double>();
  if (!(d >= min && d <= max)) fail(name, fmt::format("{} is outside [{}, {}]", v->dump(), min, max));
  value = d;
}

void TuningReader::one_of(const char* name, int& value, std::initializer_list<int> allowed) {
  const TuningJson* v = find(name);
  if (v == nullptr) return;
  const int64_t n = integer(name, *v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
  if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) {
    std::string list;
    for (int a : allowed) list += (list.empty() ? "" : ", ") + std::to_string(a);
    fail(name, fmt::format("{} is not one of {}", n, list));
  }
  value = static_cast<int>(n);
}

// ---- Differences ------------------------------------------------------------------------------------------

namespace {
void differences(const TuningJson& a, const TuningJson& b, const std::string& path,
                 std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string sub = path.empty() ? key : path + "." + key;
      const auto it = b.find(key);
      if (it == b.end())
        out.push_back(sub);
      else
        differences(value, *it, sub, out);
    }
    return;
  }
  if (a != b) out.push_back(path);
}
}  // namespace

std::vector<std::string> tuning_differences(const TuningJson& table, const TuningJson& builtin) {
  std::vector<std::string> out;
  differences(table, builtin, "", out);
  return out;
}

}  // namespace lmx::ops
