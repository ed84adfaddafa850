// libFuzzer target: SafetensorsFile::parse over arbitrary bytes. Any input must either parse or
// throw ridge::Error; every tensor byte and view of a parsed file is then touched and the
// reader's invariants are checked.
#include <cstddef>
#include <cstdint>

#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"

namespace {

#define FUZZ_INVARIANT(cond) \
  do {                       \
    if (!(cond)) __builtin_trap(); \
  } while (0)

volatile uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ridge::io;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    SafetensorsFile f = SafetensorsFile::parse(bytes, size, "fuzz.safetensors");
    FUZZ_INVARIANT(f.data_offset() >= 8 && f.data_offset() <= size);
    for (const auto& [k, v] : f.metadata()) g_sink = g_sink + k.size() + v.size();
    for (const auto& t : f.tensors()) {
      FUZZ_INVARIANT(t.data >= bytes && t.nbytes <= size && t.data - bytes <= ptrdiff_t(size - t.nbytes));
      uint64_t sum = 0;
      for (size_t i = 0; i < t.nbytes; ++i) sum += uint8_t(t.data[i]);
      g_sink = g_sink + sum;
      try {
        ridge::Tensor view = t.view();
        FUZZ_INVARIANT(view.nbytes() == t.nbytes);
      } catch (const ridge::Error&) {
        FUZZ_INVARIANT(t.shape.size() > 4);  // the only reason a view is refused
      }
      FUZZ_INVARIANT(&f.tensor(t.name) == &t);
    }
    for (const auto& info : f.tensor_infos()) {
      FUZZ_INVARIANT(info.begin <= info.end && info.end <= size - f.data_offset());
      FUZZ_INVARIANT(f.find_tensor_info(info.name) == &info);
      try {
        g_sink = g_sink + f.tensor(info.name).nbytes;
      } catch (const ridge::Error&) {
        FUZZ_INVARIANT(!info.supported);
      }
    }
  } catch (const ridge::Error&) {
  }
  return 0;
}
