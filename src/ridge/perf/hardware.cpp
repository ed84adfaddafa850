#include "ridge/perf/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

constexpr std::string_view kSchema = "ridge-hardware/1";

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

struct UnitTable {
  std::string_view quantity;
  std::vector<std::pair<std::string_view, double>> units;
};

const std::vector<UnitTable>& unit_tables() {
  static const std::vector<UnitTable> t = {
      {"flops",
       {{"FLOP/s", 1}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}, {"GOP/s", 1e9},
        {"TOP/s", 1e12}, {"POP/s", 1e15}}},
      {"bytes",
       {{"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"KiB", 1024.0},
        {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}}},
      {"bandwidth",
       {{"B/s", 1}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}, {"GiB/s", 1073741824.0},
        {"Gbit/s", 1e9 / 8}, {"Tbit/s", 1e12 / 8}}},
      {"power", {{"W", 1}, {"kW", 1e3}}},
      {"price", {{"USD/h", 1}}},
      {"time", {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}}},
      {"count", {{"count", 1}}},
      {"fraction", {{"fraction", 1}, {"%", 0.01}}},
  };
  return t;
}

// A numeric field of an entry: quantity, SI range, required or not.
struct FieldSpec {
  std::string_view quantity;
  double min, max;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open hardware database '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Deep merge: objects merge key by key, anything else is replaced.
void merge_into(nlohmann::json& dst, const nlohmann::json& src) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    if (it.value().is_object() && dst.contains(it.key()) && dst[it.key()].is_object() &&
        !it.value().contains("value")) {
      merge_into(dst[it.key()], it.value());
    } else {
      dst[it.key()] = it.value();
    }
  }
}

class EntryReader {
 public:
  EntryReader(const std::string& origin, const std::string& id, Hardware& hw)
      : origin_(origin), id_(id), hw_(hw) {}

  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail("{}: accelerator '{}', field '{}': {}", origin_, id_, path, what);
  }

  // An optional string or boolean field: `fallback` when absent, an error naming the field when
  // present with another type (json::value() would throw a bare type_error naming nothing).
  std::string text(const nlohmann::json& parent, const std::string& key, const std::string& path,
                   const std::string& fallback = "") const {
    if (!parent.contains(key)) return fallback;
    const auto& f = parent.at(key);
    if (!f.is_string()) bad(path, fmt::format("must be a string, got {}", f.dump()));
    return f.get<std::string>();
  }
  bool flag(const nlohmann::json& parent, const std::string& key, const std::string& path,
            bool fallback = false) const {
    if (!parent.contains(key)) return fallback;
    const auto& f = parent.at(key);
    if (!f.is_boolean()) bad(path, fmt::format("must be true or false, got {}", f.dump()));
    return f.get<bool>();
  }

  // Reads {value, unit, source[, estimate]} as SI; nullopt when absent.
  std::optional<double> number(const nlohmann::json& parent, const std::string& key,
                               const std::string& path, FieldSpec spec) {
    if (!parent.contains(key)) return std::nullopt;
    const auto& f = parent.at(key);
    if (!f.is_object()) bad(path, fmt::format("expected {{\"value\", \"unit\", \"source\"}}, got {}", f.dump()));
    if (!f.contains("value") || !f["value"].is_number())
      bad(path, "'value' is missing or not a number");
    if (!f.contains("unit") || !f["unit"].is_string()) bad(path, "'unit' is missing or not a string");
    if (!f.contains("source") || !f["source"].is_string() || f["source"].get<std::string>().empty())
      bad(path, "'source' is missing or empty: every figure needs its source");
    const double v = f["value"].get<double>();
    if (!std::isfinite(v)) bad(path, "value is not finite");
    double si = 0;
    try {
      si = to_si(spec.quantity, v, f["unit"].get<std::string>());
    } catch (const Error& e) {
      bad(path, e.what());
    }
    if (si < spec.min || si > spec.max)
      bad(path, fmt::format("{} {} is outside the plausible range {:g}..{:g} (SI units of {})", v,
                            f["unit"].get<std::string>(), spec.min, spec.max, spec.quantity));
    hw_.sources[path] = f["source"].get<std::string>();
    if (flag(f, "estimate", path + ".estimate")) hw_.estimates.push_back(path);
    return si;
  }

 private:
  const std::string& origin_;
  const std::string& id_;
  Hardware& hw_;
};

const std::set<std::string> kFormats = {"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4"};
// clang-format off
const std::set<std::string> kEntryKeys = {
    "name", "aliases", "architecture", "dense_flops", "memory", "memory_type", "memory_bandwidth",
    "l2", "sms", "max_warps_per_sm", "links", "tdp", "idle_power", "price", "kernel_overhead",
    "base", "measured", "notes", "launch_overhead", "gemm_launch_overhead", "host_copy_latency",
    "host_copy_bandwidth", "pinned_copy_bandwidth", "efficiency", "layer_sync", "attention_tile",
    "attention_block", "attention_merge", "power_capped_flops", "power_capped_bandwidth"};
// clang-format on
const std::set<std::string> kEfficiencyKeys = {"gemm_math", "gemm_memory", "attention_math",
                                               "attention_memory", "elementwise"};

Hardware convert(const std::string& origin, const std::string& id, const nlohmann::json& e) {
  Hardware hw;
  hw.id = id;
  EntryReader r(origin, id, hw);
  if (!e.is_object()) r.bad("", "an accelerator entry must be an object");
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (!kEntryKeys.count(it.key())) {
      std::string known;
      for (const auto& k : kEntryKeys) known += (known.empty() ? "" : ", ") + k;
      r.bad(it.key(), fmt::format("unknown field (known: {})", known));
    }
  }
  if (!e.contains("name") || !e["name"].is_string()) r.bad("name", "missing or not a string");
  hw.name = e["name"].get<std::string>();
  hw.base = r.text(e, "base", "base");
  hw.measured = r.flag(e, "measured", "measured");
  hw.memory_type = r.text(e, "memory_type", "memory_type");

  if (!e.contains("dense_flops") || !e["dense_flops"].is_object() || e["dense_flops"].empty())
    r.bad("dense_flops", "missing: at least one number format's dense FLOP/s is needed");
  for (auto it = e["dense_flops"].begin(); it != e["dense_flops"].end(); ++it) {
    if (!kFormats.count(it.key()))
      r.bad("dense_flops." + it.key(), "unknown number format (known: fp32 tf32 bf16 fp16 fp8 int8 fp6 fp4)");
    hw.dense_flops[it.key()] =
        *r.number(e["dense_flops"], it.key(), "dense_flops." + it.key(), {"flops", 1e11, 1e17});
  }
  auto mem = r.number(e, "memory", "memory", {"bytes", 1e9, 4e12});
  if (!mem) r.bad("memory", "missing");
  hw.memory_bytes = *mem;
  auto bw = r.number(e, "memory_bandwidth", "memory_bandwidth", {"bandwidth", 1e10, 1e14});
  if (!bw) r.bad("memory_bandwidth", "missing");
  hw.memory_bw = *bw;
  hw.l2_bytes = r.number(e, "l2", "l2", {"bytes", 1e5, 2e9});
  if (auto s = r.number(e, "sms", "sms", {"count", 1, 1024})) {
    if (*s != std::floor(*s)) r.bad("sms", "must be a whole number");
    hw.sms = int(*s);
  }
  if (auto w = r.number(e, "max_warps_per_sm", "max_warps_per_sm", {"count", 1, 256})) {
    if (*w != std::floor(*w)) r.bad("max_warps_per_sm", "must be a whole number");
    hw.max_warps_per_sm = int(*w);
  }
  if (e.contains("links")) {
    if (!e["links"].is_object()) r.bad("links", "must be an object of named links");
    for (auto it = e["links"].begin(); it != e["links"].end(); ++it) {
      const std::string path = "links." + it.key();
      Link l;
      l.name = it.key();
      double v = *r.number(e["links"], it.key(), path, {"bandwidth", 1e9, 2e13});
      const std::string dir = r.text(it.value(), "direction", path + ".direction");
      if (dir == "bidirectional") {
        v /= 2;  // the figure counts both directions
      } else if (dir != "per_direction") {
        r.bad(path, fmt::format("'direction' is '{}': say 'bidirectional' (the figure adds both "
                                "directions) or 'per_direction'",
                                dir));
      }
      l.bytes_per_s = v;
      l.generation = r.text(it.value(), "generation", path + ".generation");
      hw.links[l.name] = l;
    }
  }
  hw.tdp_w = r.number(e, "tdp", "tdp", {"power", 10, 5000});
  hw.idle_w = r.number(e, "idle_power", "idle_power", {"power", 1, 5000});
  if (hw.idle_w && hw.tdp_w && *hw.idle_w > *hw.tdp_w)
    r.bad("idle_power", fmt::format("idle power {} W exceeds the TDP {} W", *hw.idle_w, *hw.tdp_w));
  hw.price_per_hour = r.number(e, "price", "price", {"price", 0.01, 1000});
  if (auto o = r.number(e, "kernel_overhead", "kernel_overhead", {"time", 0, 1e-3}))
    hw.kernel_overhead_s = *o;
  if (auto o = r.number(e, "launch_overhead", "launch_overhead", {"time", 0, 1e-3}))
    hw.launch_overhead_s = *o;
  hw.gemm_launch_overhead_s = r.number(e, "gemm_launch_overhead", "gemm_launch_overhead", {"time", 0, 1e-3});
  if (auto o = r.number(e, "host_copy_latency", "host_copy_latency", {"time", 0, 1e-2}))
    hw.host_copy_latency_s = *o;
  if (auto o = r.number(e, "host_copy_bandwidth", "host_copy_bandwidth", {"bandwidth", 1e8, 1e13}))
    hw.host_copy_bw = *o;
  if (auto o = r.number(e, "pinned_copy_bandwidth", "pinned_copy_bandwidth", {"bandwidth", 1e8, 1e13}))
    hw.pinned_copy_bw = *o;
  if (auto o = r.number(e, "layer_sync", "layer_sync", {"time", 0, 1e-3})) hw.layer_sync_s = *o;
  if (auto o = r.number(e, "attention_tile", "attention_tile", {"time", 0, 1e-4}))
    hw.attention_tile_s = *o;
  if (auto o = r.number(e, "attention_block", "attention_block", {"time", 0, 1e-4}))
    hw.attention_block_s = *o;
  if (auto o = r.number(e, "attention_merge", "attention_merge", {"time", 0, 1e-4}))
    hw.attention_merge_s = *o;
  hw.capped_flops = r.number(e, "power_capped_flops", "power_capped_flops", {"flops", 1e12, 1e17});
  hw.capped_bandwidth =
      r.number(e, "power_capped_bandwidth", "power_capped_bandwidth", {"bandwidth", 1e9, 1e14});
  if ((hw.capped_flops || hw.capped_bandwidth) && !(hw.capped_flops && hw.capped_bandwidth))
    r.bad(hw.capped_flops ? "power_capped_bandwidth" : "power_capped_flops",
          "missing: the power cap needs both power_capped_flops and power_capped_bandwidth");
  if (hw.capped_flops && !hw.tdp_w)
    r.bad("power_capped_flops", "needs the entry's tdp (the cap it was measured at)");
  if (e.contains("efficiency")) {
    const auto& ef = e["efficiency"];
    if (!ef.is_object()) r.bad("efficiency", "must be an object of op classes");
    for (auto it = ef.begin(); it != ef.end(); ++it) {
      const std::string path = "efficiency." + it.key();
      if (!kEfficiencyKeys.count(it.key()))
        r.bad(path, "unknown op class (known: attention_math, attention_memory, elementwise, "
                    "gemm_math, gemm_memory)");
      // Above 1 is allowed a little: a read-mostly kernel can beat a copy-based ceiling.
      const double v = *r.number(ef, it.key(), path, {"fraction", 0.01, 1.5});
      auto& E = hw.efficiency;
      if (it.key() == "gemm_math") E.gemm_math = v;
      if (it.key() == "gemm_memory") E.gemm_memory = v;
      if (it.key() == "attention_math") E.attention_math = v;
      if (it.key() == "attention_memory") E.attention_memory = v;
      if (it.key() == "elementwise") E.elementwise = v;
    }
  }
  return hw;
}

std::optional<std::string> data_dir_from_exe() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  for (auto rel : {"../data", "../../data", "../share/ridge/data"}) {
    auto p = exe.parent_path() / rel / "hardware.json";
    if (std::filesystem::exists(p, ec)) return p.lexically_normal().string();
  }
  return std::nullopt;
}

}  // namespace

double to_si(std::string_view quantity, double value, std::string_view unit) {
  for (const auto& t : unit_tables()) {
    if (t.quantity != quantity) continue;
    std::string accepted;
    for (const auto& [u, f] : t.units) {
      if (u == unit) return value * f;
      accepted += (accepted.empty() ? "" : ", ") + std::string(u);
    }
    fail("unit '{}' is not a unit of {} (accepted: {})", unit, quantity, accepted);
  }
  fail("unknown quantity '{}'", quantity);
}

double Hardware::peak(std::string_view format) const {
  auto it = dense_flops.find(std::string(format));
  if (it != dense_flops.end()) return it->second;
  std::string known;
  for (const auto& [k, v] : dense_flops) known += (known.empty() ? "" : ", ") + k;
  fail("hardware '{}' has no dense {} FLOP/s figure (it has: {}); choose a precision it has "
       "(--precision), or add a sourced figure to data/hardware.json",
       id, format, known);
}

const Link& Hardware::link(std::string_view name) const {
  auto it = links.find(std::string(name));
  if (it != links.end()) return it->second;
  std::string known;
  for (const auto& [k, v] : links) known += (known.empty() ? "" : ", ") + k;
  fail("hardware '{}' has no '{}' link (it has: {})", id, name, known.empty() ? "none" : known);
}

Hardware Hardware::partition(double fraction) const {
  RIDGE_CHECK(fraction > 0 && fraction <= 1, "an SM partition fraction must be in (0, 1], got {}",
              fraction);
  Hardware h = *this;
  h.id = fmt::format("{}[{:.0f}% SMs]", id, fraction * 100);
  for (auto& [k, v] : h.dense_flops) v *= fraction;
  h.memory_bw *= fraction;
  if (h.sms) h.sms = std::max(1, int(std::lround(*sms * fraction)));
  if (h.tdp_w) h.tdp_w = *tdp_w * fraction;
  if (h.idle_w) h.idle_w = *idle_w * fraction;
  // The partitions share the card's power cap as they share its TDP.
  if (h.capped_flops) h.capped_flops = *capped_flops * fraction;
  if (h.capped_bandwidth) h.capped_bandwidth = *capped_bandwidth * fraction;
  if (h.price_per_hour) h.price_per_hour = *price_per_hour * fraction;
  return h;
}

std::string Hardware::describe() const {
  std::string flops;
  for (const auto& [k, v] : dense_flops) flops += fmt::format("{}{} {:.0f} TF", flops.empty() ? "" : ", ", k, v / 1e12);
  return fmt::format("{} ({}{}): {}; {:.0f} GB {} at {:.2f} TB/s{}{}", name, id,
                     measured ? ", measured" : "", flops, memory_bytes / 1e9, memory_type,
                     memory_bw / 1e12, sms ? fmt::format(", {} SMs", *sms) : "",
                     tdp_w ? fmt::format(", {:.0f} W", *tdp_w) : "");
}

HardwareDb HardwareDb::parse(const nlohmann::json& doc, const std::string& origin) {
  HardwareDb db;
  if (!doc.is_object()) fail("{}: the hardware database must be a JSON object", origin);
  if (doc.contains("schema") && !doc["schema"].is_string())
    fail("{}: 'schema' must be the string '{}', got {}", origin, kSchema, doc["schema"].dump());
  const std::string schema = doc.value("schema", std::string());
  if (schema != kSchema)
    fail("{}: 'schema' is '{}', expected '{}'", origin, schema, kSchema);
  if (doc.contains("defaults")) {
    if (!doc["defaults"].is_object())
      fail("{}: 'defaults' must be an object of fields every accelerator inherits", origin);
    db.defaults_ = doc["defaults"];
  }
  if (!doc.contains("accelerators") || !doc["accelerators"].is_object() || doc["accelerators"].empty())
    fail("{}: 'accelerators' is missing or empty", origin);
  db.merge(doc, origin);
  return db;
}

std::vector<std::string> HardwareDb::merge(const nlohmann::json& doc, const std::string& origin) {
  if (!doc.is_object() || !doc.contains("schema") || !doc["schema"].is_string() ||
      doc["schema"].get<std::string>() != kSchema)
    fail("{}: not a ridge hardware file ('schema' must be '{}', got {})", origin, kSchema,
         doc.is_object() && doc.contains("schema") ? doc["schema"].dump() : std::string("none"));
  if (!doc.contains("accelerators") || !doc["accelerators"].is_object())
    fail("{}: 'accelerators' is missing", origin);
  std::vector<std::string> added;
  for (auto it = doc["accelerators"].begin(); it != doc["accelerators"].end(); ++it) {
    add_entry(lower(it.key()), it.value(), origin);
    added.push_back(lower(it.key()));
  }
  return added;
}

void HardwareDb::add_entry(const std::string& id, const nlohmann::json& raw, const std::string& origin) {
  if (!raw.is_object()) fail("{}: accelerator '{}': an entry must be a JSON object", origin, id);
  nlohmann::json merged = defaults_.is_object() ? defaults_ : nlohmann::json::object();
  if (raw.is_object() && raw.contains("base")) {
    if (!raw["base"].is_string()) fail("{}: accelerator '{}', field 'base': not a string", origin, id);
    const Hardware* b = find(raw["base"].get<std::string>());
    if (!b)
      fail("{}: accelerator '{}' has base '{}', which is not in the database (known: {})", origin, id,
           raw["base"].get<std::string>(), fmt::join(ids(), ", "));
    merged = raw_.at(b->id);
    merged.erase("aliases");
    merged["base"] = b->id;
  }
  merge_into(merged, raw);
  if (raw.is_object() && raw.contains("base")) merged["base"] = find(raw["base"].get<std::string>())->id;
  Hardware hw;
  try {
    hw = convert(origin, id, merged);
  } catch (const nlohmann::json::exception& e) {
    // A field of a type convert() did not check: still name the file and the accelerator.
    fail("{}: accelerator '{}': a field has the wrong type: {}", origin, id, e.what());
  }
  if (merged.contains("aliases")) {
    if (!merged["aliases"].is_array()) fail("{}: accelerator '{}', field 'aliases': not an array", origin, id);
    for (const auto& a : merged["aliases"]) {
      if (!a.is_string()) fail("{}: accelerator '{}', field 'aliases': not a string", origin, id);
      aliases_[lower(a.get<std::string>())] = id;
    }
  }
  raw_[id] = merged;
  entries_[id] = std::move(hw);
}

HardwareDb HardwareDb::load_file(const std::string& path) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  return parse(doc, path);
}

std::string HardwareDb::default_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* d = std::getenv("RIDGE_DATA_DIR")) {
    auto p = fs::path(d) / "hardware.json";
    if (fs::exists(p, ec)) return p.string();
  }
#ifdef RIDGE_DATA_DIR
  {
    auto p = fs::path(RIDGE_DATA_DIR) / "hardware.json";
    if (fs::exists(p, ec)) return p.string();
  }
#endif
  if (auto p = data_dir_from_exe()) return *p;
  if (fs::exists("data/hardware.json", ec)) return "data/hardware.json";
  fail("data/hardware.json not found (set RIDGE_DATA_DIR to the folder that holds it)");
}

HardwareDb HardwareDb::load_default() { return load_file(default_path()); }

const Hardware* HardwareDb::find(std::string_view id_or_alias) const {
  const std::string k = lower(id_or_alias);
  if (auto it = entries_.find(k); it != entries_.end()) return &it->second;
  if (auto it = aliases_.find(k); it != aliases_.end()) return &entries_.at(it->second);
  return nullptr;
}

const Hardware& HardwareDb::get(std::string_view id_or_alias) const {
  if (const Hardware* h = find(id_or_alias)) return *h;
  fail("unknown hardware '{}' (known: {}; or the path of a profile file)", id_or_alias,
       fmt::join(ids(), ", "));
}

std::vector<std::string> HardwareDb::ids() const {
  std::vector<std::string> r;
  for (const auto& [k, v] : entries_) r.push_back(k);
  return r;
}

namespace {
nlohmann::json read_profile(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}
// A profile document merged over (a copy of) the database: its first entry.
Hardware first_merged(HardwareDb db, const nlohmann::json& doc, const std::string& origin) {
  auto added = db.merge(doc, origin);
  if (added.empty()) fail("{}: the profile holds no accelerator", origin);
  return db.get(added.front());
}
}  // namespace

Hardware HardwareDb::resolve(const std::string& spec) const {
  if (const Hardware* h = find(spec)) return *h;
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec))
    return first_merged(*this, read_profile(spec), spec);
  return get(spec);  // throws with the known ids
}

Hardware HardwareDb::resolve_over(const std::string& path, const std::string& under,
                                  bool* layered) const {
  if (layered) *layered = false;
  const nlohmann::json below = read_profile(under);
  if (!below.is_object() || !below.contains("accelerators") || !below["accelerators"].is_object() ||
      below["accelerators"].empty())
    fail("{}: the profile holds no accelerator", under);
  const nlohmann::json& u = below["accelerators"].begin().value();
  const Hardware* u_base = u.is_object() && u.contains("base") && u["base"].is_string()
                               ? find(u["base"].get<std::string>())
                               : nullptr;
  nlohmann::json doc = read_profile(path);
  if (u_base && doc.is_object() && doc.contains("accelerators") && doc["accelerators"].is_object())
    for (auto& [id, entry] : doc["accelerators"].items())
      if (entry.is_object() && entry.contains("base") && entry["base"].is_string()) {
        const Hardware* b = find(entry["base"].get<std::string>());
        if (b && b->id == u_base->id) {
          // `under`'s fields beneath the file's, over the same base: the base stays the
          // datasheet entry (a calibrated profile written from it loads over the database alone).
          nlohmann::json merged = u;
          merge_into(merged, entry);
          entry = std::move(merged);
          if (layered) *layered = true;
        }
      }
  return first_merged(*this, doc, path);
}

nlohmann::json make_profile(const std::string& id, const std::string& base, const std::string& name,
                            const std::vector<Measurement>& measurements) {
  nlohmann::json e = {{"name", name}, {"measured", true}};
  if (!base.empty()) e["base"] = base;
  for (const auto& m : measurements) {
    nlohmann::json v = {{"value", m.value}, {"unit", m.unit}, {"source", m.source}};
    const auto dot = m.field.find('.');
    if (dot == std::string::npos) {
      e[m.field] = v;
    } else {
      e[m.field.substr(0, dot)][m.field.substr(dot + 1)] = v;
    }
  }
  return {{"schema", std::string(kSchema)},
          {"about", "A measured profile (ridge bench ceilings): merged over its base entry of data/hardware.json"},
          {"accelerators", {{id, e}}}};
}

std::string match_entry(const HardwareDb& db, std::string_view gpu_name) {
  // "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA B200": the model
  // token (letters + digits after the vendor) names the entry through its id or an alias.
  const std::string n = lower(gpu_name);
  std::string best;
  size_t best_len = 0;
  for (const auto& id : db.ids()) {
    std::string stem = id.substr(0, id.find('-'));  // "h100-sxm" -> "h100"
    auto at = n.find(stem);
    if (at == std::string::npos) continue;
    const size_t end = at + stem.size();
    // a whole token: "h100" must not match inside "gh100x"
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(n[at - 1]));
    const bool right = end == n.size() || !std::isalnum(static_cast<unsigned char>(n[end]));
    if (left && right && stem.size() > best_len) best = id, best_len = stem.size();
  }
  return best;
}

void write_profile(const std::string& path, const nlohmann::json& profile) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write profile '{}'", tmp);
    f << profile.dump(2) << "\n";
    if (!f) fail("writing profile '{}' failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail("cannot move profile into place at '{}'", path);
  }
}

}  // namespace ridge::perf
