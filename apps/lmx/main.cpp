// lmx command-line entry point: dispatches to one verb per subcommand; every failure ends as one
// line "lmx: error: ..." on stderr and a non-zero exit status.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/printable.h"
#include "lmx/io/json_input.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

// Exit statuses: 0 the requested work was done; 1 it failed (bad input, I/O, an error while
// running); 2 the command line itself was wrong (unknown flag, bad value, missing argument).
constexpr int kFailed = 1;
constexpr int kUsage = 2;

int report(const std::string& message, int status) {
  std::fprintf(stderr, "lmx: error: %s\n", lmx::printable(message).c_str());
  return status;
}

// Output that could not be written (a full disk, a closed pipe) means the work did not happen.
int finish_output(int status) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return report(std::string("cannot write the output: ") + std::strerror(errno), kFailed);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lmx — a native LLM engine (Gemma 4 on CPU and CUDA)"};
  app.require_subcommand(0, 1);
  app.fallthrough();  // (--tuning after the verb too)
  std::string tuning;
  app.add_option("--tuning", tuning,
                 "Kernel tuning override file (JSON; docs/cuda.md, \"Tuning\"); wins over the environment "
                 "variable LMX_TUNING");
  std::vector<lmx::cli::Verb> verbs;
  try {
    verbs = {lmx::cli::add_generate(app),   lmx::cli::add_logits(app),   lmx::cli::add_synth(app),
             lmx::cli::add_bench(app),      lmx::cli::add_convert(app),  lmx::cli::add_tokenize(app),
             lmx::cli::add_detokenize(app), lmx::cli::add_template(app), lmx::cli::add_chat(app),
             lmx::cli::add_kv_fit(app),     lmx::cli::add_serve(app),    lmx::cli::add_info(app),
             lmx::cli::add_batch(app)};
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report(std::string(e.what()) + " (see lmx --help)", kUsage);
  }
  try {
    lmx::cli::load_tuning(tuning);
    for (auto& verb : verbs)
      if (verb.command->parsed()) return finish_output(verb.run());
    std::fputs(app.help().c_str(), stderr);
    return kUsage;
  } catch (const CLI::ParseError& e) {  // a verb's own option check
    return report(e.what(), kUsage);
  } catch (const lmx::Error& e) {
    return report(e.what(), kFailed);
  } catch (const nlohmann::json::exception& e) {
    return report(lmx::json_error_text(e), kFailed);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kFailed);
  } catch (const std::exception& e) {  // a library's error that no layer translated: still one line
    return report(e.what(), kFailed);
  } catch (...) {
    return report("unknown internal error", kFailed);
  }
}
