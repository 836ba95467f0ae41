// libFuzzer target: the bytes of an spm.model through our ModelProto parser
// (ParseSpmModel), the processor build (vocabulary, unigram lattice,
// precompiled charsmap trie, normalizer) and the DeBERTa tokenizer, then a
// few strings encoded with the model built. Bad models must be errors, never
// crashes; a model that loads must encode within its vocabulary.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/spm_processor.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/tokenizer_checks.h"

namespace dserve {
namespace {

constexpr std::string_view kTexts[] = {
    "Hello world",
    "  Leading, trailing  and   repeated spaces  ",
    "\xef\xbc\xa8\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f",  // fullwidth "Hello" (NFKC folds it)
    "caf\xc3\xa9 na\xc3\xafve \xe2\x98\x83 \xf0\x9d\x94\x98",         // café naïve ☃ 𝔘
    "[CLS] tabs\tand\nnewlines [SEP] [MASK]",
    "",
};

void Run(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto spec = ParseSpmModel(bytes);
  if (!spec.ok()) return;
  FUZZ_CHECK(spec->pieces.size() == spec->scores.size() && spec->pieces.size() == spec->types.size(),
             "ragged spec");
  auto processor = SpmProcessor::FromSpec(*std::move(spec));
  if (!processor.ok()) {
    FUZZ_CHECK(processor.status().code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s",
               processor.status().ToString().c_str());
    return;
  }
  const SpmProcessor& spm = **processor;
  for (int id = 0; id < spm.piece_size() && id < 64; ++id) {
    FUZZ_CHECK(spm.PieceToId(spm.IdToPiece(id)) == id, "piece %d does not map back", id);
  }
  std::vector<SpmPiece> pieces;
  std::vector<std::string> texts;
  for (std::string_view text : kTexts) {
    absl::Status s = spm.Encode(text, &pieces, &texts);
    FUZZ_CHECK(s.ok(), "a loaded model fails on valid text: %s", s.ToString().c_str());
    FUZZ_CHECK(texts.size() == pieces.size(), "%zu piece texts for %zu pieces", texts.size(), pieces.size());
    for (const SpmPiece& p : pieces) {
      FUZZ_CHECK(p.id >= 0 && p.id < spm.piece_size(), "id %d outside [0, %d)", p.id, spm.piece_size());
      FUZZ_CHECK(p.begin <= p.end && p.end <= text.size(), "offsets [%u, %u) in %zu bytes", p.begin, p.end,
                 text.size());
    }
  }
  FUZZ_CHECK(!spm.Encode("bad \xc3 UTF-8", &pieces).ok(), "invalid UTF-8 encoded");

  auto tokenizer = Tokenizer::FromProcessor(*std::move(processor));
  if (!tokenizer.ok()) return;  // no [CLS]/[SEP]
  const Tokenizer& t = **tokenizer;
  EncodeOptions options;
  options.max_length = 16;
  options.truncation = Truncation::kLongestFirst;
  for (std::string_view text : kTexts) {
    auto e = t.EncodePair(text, kTexts[0], options);
    FUZZ_CHECK(e.ok(), "EncodePair failed: %s", e.status().ToString().c_str());
    fuzz::CheckEncoding(t, *e, text, kTexts[0], true, options.max_length);
    auto windows = t.EncodeQuestionContextWindows("Who?", text, 12, 4, /*clamp_stride=*/true);
    if (windows.ok()) fuzz::CheckWindows(t, *windows, text, 12);
  }
}

}  // namespace
}  // namespace dserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dserve::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dserve::Run(data, size);
  return 0;
}
