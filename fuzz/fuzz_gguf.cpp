// libFuzzer target: GgufFile::parse over arbitrary bytes. Any input must either parse or throw
// ridge::Error; everything a parsed file hands out (every tensor byte, every metadata getter,
// every view) is then exercised, and the readers' invariants are checked.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"

namespace {

using namespace ridge::io;

#define FUZZ_INVARIANT(cond) \
  do {                       \
    if (!(cond)) __builtin_trap(); \
  } while (0)

template <typename Fn>
void may_throw(Fn&& fn) {
  try {
    fn();
  } catch (const ridge::Error&) {
  }
}

volatile uint64_t g_sink;

void walk(const GgufValue& v, const std::string& key, int depth) {
  FUZZ_INVARIANT(depth <= GgufFile::kMaxArrayDepth);
  may_throw([&] { g_sink = g_sink + uint64_t(v.as_int(key)); });
  may_throw([&] { g_sink = g_sink + std::bit_cast<uint64_t>(v.as_float(key)); });
  may_throw([&] { g_sink = g_sink + v.as_bool(key); });
  may_throw([&] { g_sink = g_sink + v.as_string(key).size(); });
  may_throw([&] {
    for (const auto& e : v.as_array(key)) {
      FUZZ_INVARIANT(e.type == v.array_type);
      walk(e, key, depth + 1);
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    GgufFile f = GgufFile::parse(bytes, size, "fuzz.gguf");
    FUZZ_INVARIANT(f.version() == 2 || f.version() == 3);
    FUZZ_INVARIANT(f.alignment() > 0 && (f.alignment() & (f.alignment() - 1)) == 0);
    FUZZ_INVARIANT(f.data_offset() <= size);

    for (const auto& kv : f.metadata()) {
      const std::string& key = kv.first;  // not a structured binding: lambdas capture it
      const GgufValue& v = kv.second;
      walk(v, key, 0);
      may_throw([&] { g_sink = g_sink + uint64_t(f.get_int(key)); });
      may_throw([&] { g_sink = g_sink + std::bit_cast<uint64_t>(f.get_float(key)); });
      may_throw([&] { g_sink = g_sink + f.get_bool(key); });
      may_throw([&] { g_sink = g_sink + f.get_string(key).size(); });
      may_throw([&] { g_sink = g_sink + f.get_string_array(key).size(); });
      may_throw([&] { g_sink = g_sink + f.get_int_array(key).size(); });
      may_throw([&] { g_sink = g_sink + f.get_float_array(key).size(); });
      may_throw([&] { g_sink = g_sink + f.try_int(key).has_value(); });
      may_throw([&] { g_sink = g_sink + f.try_float(key).has_value(); });
      may_throw([&] { g_sink = g_sink + f.try_bool(key).has_value(); });
      may_throw([&] { g_sink = g_sink + f.try_string(key).has_value(); });
      FUZZ_INVARIANT(f.has(key) && f.find(key) == &v);
    }

    for (const auto& t : f.tensors()) {
      FUZZ_INVARIANT(t.data >= bytes && t.nbytes <= size && t.data - bytes <= ptrdiff_t(size - t.nbytes));
      uint64_t sum = 0;
      for (size_t i = 0; i < t.nbytes; ++i) sum += uint8_t(t.data[i]);
      g_sink = g_sink + sum;
      ridge::Tensor view = t.view();
      FUZZ_INVARIANT(view.nbytes() == t.nbytes);
      FUZZ_INVARIANT(view.numel() == t.numel());
      FUZZ_INVARIANT(&f.tensor(t.name) == &t);
    }
    for (const auto& info : f.tensor_infos()) {
      FUZZ_INVARIANT(f.find_tensor_info(info.name) == &info);
      FUZZ_INVARIANT(info.offset % f.alignment() == 0);
      FUZZ_INVARIANT(info.offset + info.nbytes <= size - f.data_offset());
      try {
        g_sink = g_sink + f.tensor(info.name).nbytes;
        FUZZ_INVARIANT(info.supported);
      } catch (const ridge::Error&) {
        FUZZ_INVARIANT(!info.supported);
      }
    }
    if (!f.find_tensor_info("no such tensor")) FUZZ_INVARIANT(f.find_tensor("no such tensor") == nullptr);
  } catch (const ridge::Error&) {
    // Refusing a bad file is the expected outcome for most inputs.
  }
  return 0;
}
