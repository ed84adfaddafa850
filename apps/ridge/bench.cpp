// ridge bench: measure ridge against the hardware limit. Children (model, kernels, serve,
// ceilings) register themselves with BenchRegistrar.
#include <algorithm>

#include "subcommand.h"

namespace ridge::app {
std::vector<SubcommandSpec>& bench_registry() {
  static std::vector<SubcommandSpec> specs;
  return specs;
}
}  // namespace ridge::app

namespace {
void setup(CLI::App& sub) {
  sub.require_subcommand(1);
  auto& specs = ridge::app::bench_registry();
  std::sort(specs.begin(), specs.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& spec : specs) spec.setup(*sub.add_subcommand(spec.name, spec.help));
}
const ridge::app::Registrar reg("bench", "Benchmarks: model, kernels, serve, ceilings", &setup);
}  // namespace
