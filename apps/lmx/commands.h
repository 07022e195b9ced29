// The lmx CLI's verbs: each registers a CLI11 subcommand and runs it.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lmx::cli {

// A registered verb: its run function is called when its subcommand was given.
struct Verb {
  CLI::App* command;
  std::function<int()> run;
};

Verb add_generate(CLI::App& app);
Verb add_logits(CLI::App& app);
Verb add_synth(CLI::App& app);
Verb add_bench(CLI::App& app);
Verb add_convert(CLI::App& app);

// Parses "2,105,7" into token ids; throws InvalidArgument naming the bad item.
std::vector<int32_t> parse_ids(const std::string& csv);
// Applies --threads (0 = all cores).
void apply_threads(int threads);

}  // namespace lmx::cli
