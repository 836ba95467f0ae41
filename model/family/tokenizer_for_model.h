// The tokenizer of a checkpoint directory with its model family's text
// rules (DESIGN §7): DeBERTa-v2/v3 (model_type "deberta-v2") encodes with
// SentencePiece alone (spm.model, else tokenizer.json); ALBERT ("albert")
// applies Hugging Face AlbertTokenizer's rules around SentencePiece
// (spiece.model; flags from tokenizer_config.json, model/albert/albert_text.h);
// DeBERTa v1 ("deberta") encodes with GPT-2 byte-level BPE (vocab.json +
// merges.txt, else a BPE tokenizer.json; model/deberta_v1/deberta_v1_text.h),
// its special ids taken from that vocabulary.
// Callers (server, eval, tokenize, train) never ask which family it is.
// Torch-free.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/tokenizer/tokenizer.h"

namespace dserve {

// `config` is the directory's parsed config.json.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir,
                                                                   const ModelConfig& config);

// Reads `dir`/config.json for the model_type; a directory without one is
// DeBERTa's (a bare tokenizer folder). Errors name the file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadCheckpointTokenizer(const std::string& dir);

}  // namespace dserve
