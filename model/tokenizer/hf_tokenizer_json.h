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
//
// Or a byte-level BPE (GPT-2, RoBERTa, DeBERTa v1's DebertaTokenizerFast),
// into a BpeModelSpec (bpe.h):
//   model:         BPE {vocab {token: id}, merges ["a b"...] or [["a","b"]...],
//                  unk_token, fuse_unk, ignore_merges}; dropout, byte_fallback,
//                  continuing_subword_prefix and end_of_word_suffix must be
//                  unset (null, empty or false).
//   normalizer:    null.
//   pre_tokenizer: ByteLevel {add_prefix_space, use_regex}, alone or as the
//                  only member of a Sequence.
//   post_processor, decoder: not read (the layout is [CLS] A [SEP] B [SEP];
//                  offsets are always trimmed, bpe.h).
//   added_tokens:  ids outside the vocab are added; the roles [CLS] (else
//                  <s>), [SEP] (</s>), [PAD] (<pad>), [UNK] (model.unk_token,
//                  else <unk>), [MASK] (<mask>) are found by name.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/spm_processor.h"

namespace dserve {

// Unigram only (a BPE model is Unimplemented).
absl::StatusOr<SpmModelSpec> ParseHfTokenizerJson(std::string_view json_text);
absl::StatusOr<SpmModelSpec> ReadHfTokenizerJson(const std::string& path);

// Either model.
using HfTokenizerModel = std::variant<SpmModelSpec, BpeModelSpec>;
// `source` names the file in BPE load errors (BpeModelSpec::*_source).
absl::StatusOr<HfTokenizerModel> ParseHfTokenizerJsonModel(std::string_view json_text,
                                                           const std::string& source = "tokenizer.json");
// Errors are prefixed with `path`.
absl::StatusOr<HfTokenizerModel> ReadHfTokenizerJsonModel(const std::string& path);

}  // namespace dserve
