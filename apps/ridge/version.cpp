// ridge version: the build's version and what it was built with.
#include <fmt/format.h>

#include "subcommand.h"

namespace {
void setup(CLI::App& sub) {
  sub.callback([] {
    fmt::print("ridge {}\n", RIDGE_VERSION_STRING);
#ifdef RIDGE_HAVE_CUDA
    fmt::print("CUDA backend: built\n");
#else
    fmt::print("CUDA backend: not built\n");
#endif
  });
}
const ridge::app::Registrar reg("version", "Print the version and build configuration", &setup);
}  // namespace
