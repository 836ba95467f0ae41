// ALBERT's tokenizer rules (the family's text side; torch-free): Hugging
// Face AlbertTokenizer's preprocessing and digit-comma split around
// SentencePiece (model/tokenizer/text_rules.h), with do_lower_case,
// remove_space and keep_accents from the checkpoint's tokenizer_config.json
// when it sets them (AlbertTokenizer's defaults otherwise).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/text_rules.h"

namespace dserve {

// Registered in model/family/tokenizer_for_model.cc for model_type "albert".
absl::StatusOr<TextRules> AlbertTokenizerRules(const std::string& dir);

}  // namespace dserve
