// libFuzzer target: a whole safetensors file (8-byte header length, JSON
// header, data) through SafetensorsFile::FromBytes, the validation Open runs
// on a mapped file. Accepted files must hand out only views inside the data
// section that match their dtype and shape and do not overlap.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

namespace dserve {
namespace {

constexpr char kName[] = "fuzz.safetensors";

void Check(const uint8_t* data, size_t size) {
  SafetensorsFile::Options options;
  options.max_header_bytes = 1 << 20;
  auto file = SafetensorsFile::FromBytes(kName, std::string(reinterpret_cast<const char*>(data), size), options);
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == absl::StatusCode::kDataLoss, "unexpected code: %s",
               file.status().ToString().c_str());
    FUZZ_CHECK(file.status().message().rfind(std::string(kName) + ": ", 0) == 0,
               "error does not name the file: %s", file.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(size >= 8, "accepted a %zu-byte file", size);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  const uint64_t data_bytes = size - 8 - header_bytes;
  const TensorView* previous = nullptr;
  uint64_t checksum = 0;
  for (const TensorView& t : (*file)->tensors()) {
    FUZZ_CHECK((*file)->Find(t.name) == &t, "Find(\"%s\") is not the tensor", t.name.c_str());
    uint64_t expected = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, "negative dimension in \"%s\"", t.name.c_str());
      FUZZ_CHECK(!__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected), "overflow");
    }
    FUZZ_CHECK(expected == t.num_bytes, "\"%s\": %zu bytes for a shape needing %llu", t.name.c_str(),
               t.num_bytes, static_cast<unsigned long long>(expected));
    FUZZ_CHECK(t.num_bytes <= data_bytes, "\"%s\" is larger than the data section", t.name.c_str());
    // Reading every byte lets ASan catch a view outside the copy.
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (size_t i = 0; i < t.num_bytes; ++i) checksum += p[i];
    if (t.num_bytes == 0) continue;
    if (previous != nullptr) {
      FUZZ_CHECK(static_cast<const char*>(previous->data) + previous->num_bytes <= static_cast<const char*>(t.data),
                 "\"%s\" overlaps \"%s\" or is out of order", t.name.c_str(), previous->name.c_str());
    }
    previous = &t;
  }
  static volatile uint64_t sink;
  sink = checksum;
}

}  // namespace
}  // namespace dserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dserve::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dserve::Check(data, size);
  return 0;
}
