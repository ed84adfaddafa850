// libridge-cupti-trace.so: a CUDA injection library that records every kernel and memory copy
// of a process with CUPTI's activity API and writes them to a CSV at exit, so that any ridge
// command can be traced without a change to it (Nsight Systems is not usable on the GPU machine:
// the device tool's KINDS.md). Use:
//
//   CUDA_INJECTION64_PATH=build/lib/libridge-cupti-trace.so RIDGE_TRACE_FILE=trace.csv ridge ...
//   scripts/device/kernel_trace.py trace.csv   (graph replays, gaps between kernels, kernel times)
//
// The CUDA driver loads the library at its initialization and calls InitializeInjection(). Each
// record: kind (kernel | memcpy), start and end (ns, the GPU's clock), stream, graph id and graph
// node id (0 outside graphs), grid and block, registers, dynamic and executed shared memory,
// bytes (copies), name. Records are kept in memory (tens of bytes each) until exit.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  bool kernel = true;
  uint64_t start = 0, end = 0;
  uint32_t stream = 0, graph = 0;
  uint64_t node = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t regs = 0, dyn_smem = 0, smem_executed = 0;
  uint64_t bytes = 0;
  std::string name;
};

std::mutex g_mu;
std::vector<Record>* g_records = nullptr;  // leaked on purpose: written from an atexit handler
bool g_written = false;

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

const char* memcpy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    default: return "memcpy other";
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Record> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      Record r;
      r.start = k->start;
      r.end = k->end;
      r.stream = k->streamId;
      r.graph = k->graphId;
      r.node = k->graphNodeId;
      r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
      r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
      r.regs = k->registersPerThread;
      r.dyn_smem = uint32_t(k->dynamicSharedMemory);
      r.smem_executed = k->sharedMemoryExecuted;
      r.name = k->name ? k->name : "?";
      got.push_back(std::move(r));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      Record r;
      r.kernel = false;
      r.start = m->start;
      r.end = m->end;
      r.stream = m->streamId;
      r.graph = m->graphId;
      r.node = m->graphNodeId;
      r.bytes = m->bytes;
      r.name = memcpy_kind(m->copyKind);
      got.push_back(std::move(r));
    }
  }
  std::free(buffer);
  std::lock_guard lock(g_mu);
  for (Record& r : got) g_records->push_back(std::move(r));
}

// Names may hold commas (template arguments): quoted, with quotes doubled.
std::string csv_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

void write_trace() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(g_mu);
  if (g_written) return;
  g_written = true;
  const char* path = std::getenv("RIDGE_TRACE_FILE");
  if (!path || !*path) path = "ridge-trace.csv";
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "ridge-cupti-trace: cannot write %s\n", path);
    return;
  }
  std::fprintf(f,
               "kind,start_ns,end_ns,stream,graph,node,grid_x,grid_y,grid_z,block_x,block_y,"
               "block_z,regs,dyn_smem,smem_executed,bytes,name\n");
  for (const Record& r : *g_records)
    std::fprintf(f, "%s,%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%d,%d,%u,%u,%u,%llu,%s\n",
                 r.kernel ? "kernel" : "memcpy", (unsigned long long)r.start,
                 (unsigned long long)r.end, r.stream, r.graph, (unsigned long long)r.node,
                 r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.regs,
                 r.dyn_smem, r.smem_executed, (unsigned long long)r.bytes,
                 csv_quote(r.name).c_str());
  std::fclose(f);
  std::fprintf(stderr, "ridge-cupti-trace: %zu records to %s\n", g_records->size(), path);
}

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "ridge-cupti-trace: %s failed: %s (no trace)\n", what, msg ? msg : "?");
  return false;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  g_records = new std::vector<Record>();
  g_records->reserve(1 << 20);
  if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
             "cuptiActivityRegisterCallbacks") ||
      !check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
             "cuptiActivityEnable(CONCURRENT_KERNEL)"))
    return 1;  // the process runs on, untraced
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
  std::atexit(write_trace);
  return 1;
}
