// Fuzzes the request parser: the strings users type for --gpus, --mem,
// --compute, --mig, --priority, --name and --max-runtime, alone and combined
// into a request. Parsers must never crash, hang or accept a value that then
// fails validation; a built request must describe itself.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/job.h"
#include "core/jobs/request.h"
#include "core/units.h"

using namespace gpuslice::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Each parser on the whole input.
  (void)ParseBytes(in);
  (void)ParseShareMilli(in);
  (void)ParseDuration(in);
  (void)ParsePriority(in);
  (void)ParseMigProfile(in);
  (void)ParsePerDeviceBytes(in);
  uint32_t lo = 0, hi = 0;
  (void)ParseGpuCount(in, &lo, &hi);
  if (auto b = ParseBytes(in); b.ok()) (void)FormatBytes(*b);
  if (auto m = ParseShareMilli(in); m.ok() && (*m == 0 || *m > 1000)) __builtin_trap();

  // Fields separated by newlines, in a fixed order; a leading '-' skips one.
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= in.size() && parts.size() < 7) {
    size_t nl = in.find('\n', start);
    if (nl == std::string_view::npos) nl = in.size();
    parts.emplace_back(in.substr(start, nl - start));
    start = nl + 1;
  }
  RequestFields f;
  std::optional<std::string>* slots[] = {&f.gpus, &f.mem,  &f.compute,    &f.mig,
                                         &f.priority, &f.name, &f.max_runtime};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].empty() && parts[i][0] == '-') continue;
    *slots[i] = parts[i];
  }
  auto r = BuildRequest(f);
  if (r.ok()) {
    if (!r->Validate().ok()) __builtin_trap();  // Built means valid.
    if (r->Describe().empty()) __builtin_trap();
  }
  return 0;
}
