// Helpers shared by the CLI verbs: token-id lists, thread settings, the context length, path flags.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/io/directory.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/language_model.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>

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
    LMX_REQUIRE(InvalidArgument,
                !item.empty() && ec == std::errc() && end == item.data() + item.size() && value >= 0,
                "'{}' in the id list is not a non-negative integer token id", item);
    ids.push_back(value);
    pos = comma + 1;
  }
  return ids;
}

std::vector<int32_t> end_token_ids(const GenerationConfig& generation, const LanguageModel& model,
                                   const Tokenizer* tokenizer) {
  std::vector<int32_t> ids = generation.eos_token_ids;
  for (int id : model.description().eos_token_ids) ids.push_back(id);
  if (tokenizer && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string default_model_dir() {
  std::vector<std::string> candidates = {"models/demo"};
  // The binary's directory, and the source tree of a build/<preset>/lmx binary.
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir.erase(dir.rfind('/'));
    candidates.push_back(dir + "/models/demo");
    candidates.push_back(dir + "/../../models/demo");
  }
  candidates.push_back(std::string(LMX_SOURCE_DIR) + "/models/demo");
  for (const auto& c : candidates) {
    try {
      if (path_exists(c + "/config.json")) return c;
    } catch (const IoError&) {
      // an unreachable candidate is not the demo model; try the next
    }
  }
  throw InvalidArgument(
      "no --model given and the bundled demo model (models/demo) was not found; pass --model DIR");
}

std::string model_or_default(const std::string& model) {
  return model.empty() ? default_model_dir() : model;
}

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
  if (suffix.empty())
    scale = 1;
  else if (suffix == "K")
    scale = 1024.0;
  else if (suffix == "M")
    scale = 1024.0 * 1024;
  else if (suffix == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = number * scale;
  LMX_REQUIRE(InvalidArgument, ec == std::errc() && rest != begin && scale > 0 && bytes >= 1 && bytes < 1e18,
              "{} '{}': expected a positive byte count such as 1073741824, 512M or 4G", flag, text);
  return static_cast<size_t>(bytes);
}

void apply_threads(int threads) {
  LMX_REQUIRE(InvalidArgument, threads >= 0 && threads <= 1024, "--threads {} out of range", threads);
  set_default_threads(threads);
}

int64_t context_length(const LanguageModel& model) {
  return model.description().context_length;
}

void require_within_context(const LanguageModel& model, int64_t tokens, std::string_view what) {
  const int64_t limit = context_length(model);
  LMX_REQUIRE(InvalidArgument, limit <= 0 || tokens <= limit,
              "{} need {} positions, more than the model's context length of {} tokens", what, tokens, limit);
}

const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](const std::string& value) {
        return value.empty() ? std::string("the value is empty") : std::string();
      },
      "NONEMPTY");
  return check;
}

void check_text_files(const std::string& dir) {
  (void)load_generation_config(dir);
  if (!path_exists(join_path(dir, "tokenizer.json"))) return;
  Tokenizer tokenizer = Tokenizer::load(dir);
  for (const auto& [name, source] : tokenizer.chat_templates()) {
    try {
      ChatTemplate parsed(source);
    } catch (const Error& e) {
      throw FormatError(fmt::format("{}: chat template '{}': {}", dir, name, e.what()));
    }
  }
}

}  // namespace lmx::cli
