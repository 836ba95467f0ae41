// Encode throughput of our SentencePiece implementation (or of the
// byte-level BPE one, for a vocab.json + merges.txt directory).
//
//   tokenizer_bench MODEL_DIR STRINGS.jsonl [REPEATS] [--bpe-cache-capacity=N]
//
// --bpe-cache-capacity: the BPE word cache's size (BpeModelSpec; 0 = no
// cache, every word merged from scratch); default: the model's default.
//
// STRINGS.jsonl holds {"text": s} per line. Encodes all strings REPEATS times
// (default 5) on one thread with SpmProcessor::Encode (ids + byte offsets,
// what the server needs) and prints one JSON object with the median time:
// {"strings": n, "bytes": b, "tokens": t, "median_s": x, "strings_per_s": .., "mb_per_s": ..}
// bench/tokenizer/compare_sentencepiece.py runs this next to libsentencepiece.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR STRINGS.jsonl [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  int bpe_cache = -1;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string flag = "--bpe-cache-capacity=";
    if (arg.rfind(flag, 0) == 0) bpe_cache = std::atoi(arg.c_str() + flag.size());
  }
  auto tok = dserve::Tokenizer::FromDirectory(argv[1]);
  if (bpe_cache >= 0) {
    auto spec = dserve::ReadBpeFiles(argv[1]);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    spec->cache_capacity = bpe_cache;
    auto bpe = dserve::BpeModel::Create(*std::move(spec));
    tok = bpe.ok() ? dserve::Tokenizer::FromBpe(*std::move(bpe)) : bpe.status();
  }
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 2;
  }
  std::vector<std::string> strings;
  std::ifstream in(argv[2]);
  std::string line;
  size_t bytes = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    strings.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    bytes += strings.back().size();
  }
  std::vector<dserve::SpmPiece> out;
  size_t tokens = 0;
  for (const auto& s : strings) {  // warm-up
    if (!(*tok)->EncodeRaw(s, &out).ok()) return 1;
    tokens += out.size();
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& s : strings) (void)(*tok)->EncodeRaw(s, &out);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  nlohmann::json result = {{"tokenizer", (*tok)->is_bpe() ? "bpe" : "unigram"},
                           {"bpe_cache_capacity", (*tok)->is_bpe() ? (*tok)->bpe().spec().cache_capacity : 0},
                           {"strings", strings.size()},
                           {"bytes", bytes},
                           {"tokens", tokens},
                           {"repeats", repeats},
                           {"median_s", median},
                           {"strings_per_s", strings.size() / median},
                           {"mb_per_s", bytes / median / 1e6}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
