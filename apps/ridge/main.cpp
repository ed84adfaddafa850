// ridge: the command-line entry point. Subcommands register themselves (subcommand.h).
#include <algorithm>
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "subcommand.h"

namespace ridge::app {
std::vector<SubcommandSpec>& registry() {
  static std::vector<SubcommandSpec> specs;
  return specs;
}
}  // namespace ridge::app

int main(int argc, char** argv) {
  CLI::App app{"ridge: an LLM inference engine for NVIDIA Hopper GPUs, with a CPU reference backend"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may follow the subcommand too
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->each([](const std::string& v) { ridge::log::set_level(ridge::log::level_from_name(v)); });
  auto& specs = ridge::app::registry();
  std::sort(specs.begin(), specs.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& spec : specs) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.help);
    spec.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ridge::app::Exit& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
