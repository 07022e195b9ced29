// lmx command-line entry point: dispatches to one verb per subcommand.
#include "commands.h"

#include "lmx/core/error.h"

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"lmx — a native LLM engine (Gemma 4 on CPU and CUDA)"};
  app.require_subcommand(0, 1);
  app.fallthrough();  // (--tuning after the verb too)
  std::string tuning;
  app.add_option("--tuning", tuning,
                 "Kernel tuning override file (JSON; docs/cuda.md, \"Tuning\"); wins over the environment "
                 "variable LMX_TUNING");
  std::vector<lmx::cli::Verb> verbs = {lmx::cli::add_generate(app), lmx::cli::add_logits(app),
                                       lmx::cli::add_synth(app), lmx::cli::add_bench(app),
                                       lmx::cli::add_convert(app),  lmx::cli::add_tokenize(app),
                                       lmx::cli::add_detokenize(app), lmx::cli::add_template(app), lmx::cli::add_chat(app),
                                       lmx::cli::add_info(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    lmx::cli::load_tuning(tuning);
    for (auto& verb : verbs)
      if (verb.command->parsed()) return verb.run();
    std::fputs(app.help().c_str(), stderr);
    return 2;
  } catch (const lmx::Error& e) {
    std::fprintf(stderr, "lmx: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lmx: error: out of memory\n");
    return 1;
  }
  return 0;
}
