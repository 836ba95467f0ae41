#include "model/util/cpu_info.h"

#include <fstream>
#include <sstream>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dserve {
namespace {

struct CpuInfo {
  std::string model = "unknown";
  std::unordered_set<std::string> flags;
};

CpuInfo ReadCpuInfo() {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool have_model = false, have_flags = false;
  while (std::getline(in, line) && !(have_model && have_flags)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (!have_model && line.rfind("model name", 0) == 0) {
      info.model = line.substr(line.find_first_not_of(" \t", colon + 1));
      have_model = true;
    } else if (!have_flags && line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(colon + 1));
      std::string flag;
      while (words >> flag) info.flags.insert(flag);
      have_flags = true;
    }
  }
  return info;
}

const CpuInfo& Host() {
  static const CpuInfo* info = new CpuInfo(ReadCpuInfo());
  return *info;
}

}  // namespace

const std::string& CpuModelName() { return Host().model; }

bool CpuHasFlag(const std::string& flag) { return Host().flags.count(flag) > 0; }

std::string CpuIsaFlags() {
  std::vector<std::string> present;
  for (const char* f : {"fma", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}) {
    if (CpuHasFlag(f)) present.push_back(f);
  }
  return present.empty() ? "none" : absl::StrJoin(present, ",");
}

std::string Bf16MatmulPath() {
  if (CpuHasFlag("amx_bf16") && CpuHasFlag("amx_tile")) return "amx";
  if (CpuHasFlag("avx512_bf16")) return "avx512_bf16";
  if (CpuHasFlag("avx512f")) return "avx512f";
  if (CpuHasFlag("avx2")) return "avx2";
  return "scalar";
}

std::string CpuPathNote() {
  return absl::StrCat("cpu ", CpuModelName(), ", flags ", CpuIsaFlags(), ", bf16 matmul path ", Bf16MatmulPath());
}

}  // namespace dserve
