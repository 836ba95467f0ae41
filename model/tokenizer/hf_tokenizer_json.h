// Reads a Hugging Face tokenizer.json whose model is Unigram (what
// transformers' DebertaV2Converter writes) into a SentencePiece model spec.
//
// Supported pieces (anything else is an Unimplemented error naming it):
//   model:         Unigram {vocab [[piece, score]...], unk_id, byte_fallback}
//   normalizer:    null, or Sequence of: Precompiled (the spm charsmap),
//                  Strip (both sides) and Replace(Regex " {2,}" -> " "),
//                  which together are SentencePiece's remove_extra_whitespaces.
//   pre_tokenizer: Metaspace (replacement "▁"; add_prefix_space or
//                  prepend_scheme "always"/"first" -> dummy prefix), or a
//                  Sequence holding just that.
//   added_tokens:  special ones become CONTROL pieces (appended when their id
//                  is past the vocab, e.g. DeBERTa-v3's [MASK] = 128000);
//                  non-special ones become USER_DEFINED pieces.
// Segmentation then follows SentencePiece (float scores, its tie-breaking),
// which is what DeBERTa's slow tokenizer does.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/tokenizer/spm_processor.h"

namespace dserve {

absl::StatusOr<SpmModelSpec> ParseHfTokenizerJson(std::string_view json_text);
absl::StatusOr<SpmModelSpec> ReadHfTokenizerJson(const std::string& path);

}  // namespace dserve
