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
    LMX_REQUIRE(InvalidArgument, !item.empty() && ec == std::errc() && end == item.data() + item.size() && value >= 0,
                             "'{}' in the id list is not a non-negative integer token id", item);
    ids.push_back(value);
    pos = comma + 1;
  }
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
  throw InvalidArgument("no --model given and the bundled demo model (models/demo) was not found; pass --model DIR");
}

std::string model_or_default(const std::string& model) { return model.empty() ? default_model_dir() : model; }

void apply_threads(int threads) {
  LMX_REQUIRE(InvalidArgument, threads >= 0 && threads <= 1024, "--threads {} out of range", threads);
  set_default_threads(threads);
}

int64_t context_length(const LanguageModel& model) { return model.config().max_position_embeddings; }

void require_within_context(const LanguageModel& model, int64_t tokens, std::string_view what) {
  const int64_t limit = context_length(model);
  LMX_REQUIRE(InvalidArgument, tokens <= limit, "{} need {} positions, more than the model's context length of {} tokens",
              what, tokens, limit);
}

const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](const std::string& value) { return value.empty() ? std::string("the value is empty") : std::string(); },
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
