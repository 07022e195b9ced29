// Helpers shared by the CLI verbs: token-id lists and thread settings.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <unistd.h>

namespace lmx::cli {

std::vector<int32_t> parse_ids(const std::string& csv) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= csv.size()) {
    size_t comma = csv.find(',', pos);
    if (comma == std::string::npos) comma = csv.size();
    std::string item = csv.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int32_t value = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    LMX_REQUIRE(InvalidArgument, !item.empty() && ec == std::errc() && end == item.data() + item.size() && value >= 0,
                             "'{}' in the id list is not a non-negative integer token id", item);
    ids.push_back(value);
    pos = comma + 1;
  }
  return ids;
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates = {"models/demo"};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "models/demo");
    candidates.push_back(exe.parent_path().parent_path().parent_path() / "models/demo");  // build/<preset>/lmx
  }
  candidates.push_back(fs::path(LMX_SOURCE_DIR) / "models/demo");
  for (const auto& c : candidates)
    if (fs::exists(c / "config.json", ec)) return c.lexically_normal().string();
  throw InvalidArgument("no --model given and the bundled demo model (models/demo) was not found; pass --model DIR");
}

std::string model_or_default(const std::string& model) { return model.empty() ? default_model_dir() : model; }

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

size_t parse_bytes(const std::string& text, const char* flag) {
  double number = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [rest, ec] = std::from_chars(begin, end, number);
  std::string suffix(rest, end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() > 1 && suffix.back() == 'B') suffix.pop_back();
  if (suffix.size() > 1 && suffix.back() == 'I') suffix.pop_back();
  double scale = 0;
  if (suffix.empty()) scale = 1;
  else if (suffix == "K") scale = 1024.0;
  else if (suffix == "M") scale = 1024.0 * 1024;
  else if (suffix == "G") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = number * scale;
  LMX_REQUIRE(InvalidArgument, ec == std::errc() && rest != begin && scale > 0 && bytes >= 1 && bytes < 1e18,
              "{} '{}': expected a positive byte count such as 1073741824, 512M or 4G", flag, text);
  return static_cast<size_t>(bytes);
}

void apply_threads(int threads) {
  LMX_REQUIRE(InvalidArgument, threads >= 0 && threads <= 1024, "--threads {} out of range", threads);
  set_default_threads(threads);
}

}  // namespace lmx::cli
