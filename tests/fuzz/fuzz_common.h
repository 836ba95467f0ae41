// Shared by the libFuzzer targets of tests/fuzz: invariant checks that abort
// (so libFuzzer records the input as a crash), file reading, and the fixed
// tokenizer the tokenizer and request fuzzers use.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "model/tokenizer/tokenizer.h"
#include "model/util/logging.h"

// Aborts with the failed condition and a message when `cond` is false.
#define FUZZ_CHECK(cond, ...)                                                    \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, \
                   #cond);                                                       \
      std::fprintf(stderr, __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

namespace dserve {
namespace fuzz {

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Errors only: the fuzzers feed bad input on purpose.
inline void QuietLogs() { SetLogLevel("off"); }

// The tokenizer of DSERVE_FUZZ_SPM_MODEL (environment), else the real
// 300-piece nmt_nfkc model committed beside the corpora (compiled-in path).
inline const Tokenizer& LoadFixedTokenizer(const TextRules& rules) {
  const char* env = std::getenv("DSERVE_FUZZ_SPM_MODEL");
  const std::string path = env != nullptr && *env != '\0' ? env : DSERVE_FUZZ_SPM_MODEL;
  auto t = Tokenizer::FromSpmFile(path, rules);
  if (!t.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", t.status().ToString().c_str());
    std::exit(2);
  }
  return *t->release();
}

// The same model with ALBERT's text rules (lower case, NFKD, quotes,
// whitespace, the digit-comma split) around SentencePiece.
inline const Tokenizer& FixedAlbertTokenizer() {
  static const Tokenizer& tokenizer = LoadFixedTokenizer(AlbertTextRules());
  return tokenizer;
}

inline const Tokenizer& FixedTokenizer() {
  static const Tokenizer* tokenizer = [] {
    const char* env = std::getenv("DSERVE_FUZZ_SPM_MODEL");
    const std::string path = env != nullptr && *env != '\0' ? env : DSERVE_FUZZ_SPM_MODEL;
    auto t = Tokenizer::FromSpmFile(path);
    if (!t.ok()) {
      std::fprintf(stderr, "fuzz: %s\n", t.status().ToString().c_str());
      std::exit(2);
    }
    return t->release();
  }();
  return *tokenizer;
}

}  // namespace fuzz
}  // namespace dserve
