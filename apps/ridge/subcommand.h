// Subcommand registry: each subcommand lives in its own file and registers itself with
//   static const ridge::app::Registrar reg("name", "one-line help", &setup);
// where setup(CLI::App& sub) adds the flags and sets sub.callback(...). main.cpp builds the app
// from the registry, so adding a subcommand touches no other file.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ridge::app {

struct SubcommandSpec {
  std::string name;
  std::string help;
  std::function<void(CLI::App&)> setup;
};

std::vector<SubcommandSpec>& registry();

// Thrown by a subcommand to end with a given exit code (ridge::Error ends with 1 and its message).
struct Exit {
  int code;
};

struct Registrar {
  Registrar(std::string name, std::string help, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

// `ridge bench <name>` children register the same way with BenchRegistrar; bench.cpp adds them
// under the `bench` subcommand.
std::vector<SubcommandSpec>& bench_registry();

struct BenchRegistrar {
  BenchRegistrar(std::string name, std::string help, std::function<void(CLI::App&)> setup) {
    bench_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace ridge::app
