// ridge bench kernels: the kernel benchmarks (built with -DRIDGE_BENCH=ON, which keeps CI fast):
// runs bin/ridge-bench-gemm beside this binary with the arguments given, e.g.
//   ridge bench kernels --op gemm --models llama2-7b,llama3-8b --m 1,8,32,128,512,2048,8192
// or, for `--op attention`, bin/ridge-bench-attention (paged decode attention, KV bandwidth
// against the copy ceiling of the same run), e.g.
//   ridge bench kernels --op attention --json attention.json
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "ridge/core/error.h"
#include "subcommand.h"

namespace {

// The benchmark binary for the arguments: ridge-bench-attention for `--op attention`, else
// ridge-bench-gemm.
std::string tool_for(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--op=attention" || (args[i] == "--op" && i + 1 < args.size() &&
                                        args[i + 1] == "attention"))
      return "ridge-bench-attention";
  return "ridge-bench-gemm";
}

void run(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path tool = self.parent_path() / tool_for(args);
  RIDGE_CHECK(!ec && fs::exists(tool, ec),
              "{} is not built: configure with -DRIDGE_BENCH=ON (and CUDA) to build the kernel "
              "benchmarks",
              tool.string());
  std::vector<char*> argv;
  std::string name = tool.string();
  argv.push_back(name.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(name.c_str(), argv.data());
  ridge::fail("cannot run {}", name);
}

void setup(CLI::App& sub) {
  sub.allow_extras();
  sub.prefix_command();  // everything after `kernels` goes to the benchmark binary
  sub.callback([&sub] { run(sub.remaining()); });
}

const ridge::app::BenchRegistrar reg(
    "kernels", "Kernel benchmarks with ceilings (--op gemm | attention; needs -DRIDGE_BENCH=ON)", &setup);

}  // namespace
