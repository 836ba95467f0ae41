// DeBERTa v1's tokenizer (the family's text side; torch-free): GPT-2
// byte-level BPE as Hugging Face's DebertaTokenizer / DebertaTokenizerFast
// compute it (model/tokenizer/bpe.h), with the special ids ([CLS], [SEP],
// [PAD], [UNK], [MASK]) looked up in the checkpoint's own vocabulary and
// add_prefix_space from its tokenizer_config.json. No text rules (no
// lower-casing, no normalisation).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"

namespace dserve {

// The tokenizer of the v1 checkpoint in `dir`:
//   1. vocab.json + merges.txt (DebertaTokenizer's files; with
//      tokenizer_config.json / special_tokens_map.json when present), else
//   2. tokenizer.json, which must hold a BPE model (a Unigram one is an
//      InvalidArgument naming the file: v1 is never SentencePiece), else
//   3. only one of vocab.json and merges.txt: NotFound naming the missing one;
//   4. none of them: NotFound naming the files a v1 checkpoint needs (also
//      when the directory has an spm.model: that is DeBERTa-v2/v3's).
// Registered in model/family/tokenizer_for_model.cc for model_type "deberta".
absl::StatusOr<std::unique_ptr<Tokenizer>> DebertaV1Tokenizer(const std::string& dir);

}  // namespace dserve
