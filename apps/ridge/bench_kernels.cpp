// ridge bench kernels: the kernel benchmarks (built with -DRIDGE_BENCH=ON, which keeps CI fast):
// runs bin/ridge-bench-gemm beside this binary with the arguments given, e.g.
//   ridge bench kernels --op gemm --models llama2-7b,llama3-8b --m 1,8,32,128,512,2048,8192
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "ridge/core/error.h"
#include "subcommand.h"

namespace {

void run(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path tool = self.parent_path() / "ridge-bench-gemm";
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
    "kernels", "Kernel benchmarks vs cuBLAS with ceilings (--op gemm; needs -DRIDGE_BENCH=ON)", &setup);

}  // namespace
