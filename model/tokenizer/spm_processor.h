// Raw SentencePiece encoding: what libsentencepiece's
// SentencePieceProcessor::Encode(text, &SentencePieceText) gives, without
// linking libsentencepiece.
//
// For each output piece: its id, its text (the normalized piece; a run of
// unknown characters is merged into one [UNK] piece whose text is the run;
// with byte fallback an unknown character becomes one <0xNN> piece per UTF-8
// byte) and its byte range [begin, end) in the ORIGINAL input. Byte-fallback
// pieces of one character: the last holds the character's range, the others
// are empty at its start. The dummy-prefix "▁" piece that has no source text
// is empty ([b, b)).
//
// Only the unigram model type is supported (DeBERTa-v3 and most spm models);
// BPE/WORD/CHAR models are rejected at load time with a clear error.
//
// Immutable after creation; Encode is const and thread-safe. It keeps a small
// per-thread scratch buffer so steady-state calls allocate only the output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/unigram.h"

namespace dserve {

// A model in SentencePiece terms, from spm.model or tokenizer.json.
struct SpmModelSpec {
  std::vector<std::string> pieces;  // indexed by id
  std::vector<float> scores;
  std::vector<PieceType> types;
  NormalizerOptions normalizer;  // user_defined_symbols is filled from types
  bool byte_fallback = false;
  // Names from trainer_spec, used to find special pieces when the usual
  // DeBERTa names are absent.
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  std::string pad_piece = "<pad>";
};

// Parses a serialized SentencePiece ModelProto (the bytes of spm.model).
absl::StatusOr<SpmModelSpec> ParseSpmModel(std::string_view serialized);

// One encoded piece. Offsets are UTF-8 byte offsets into the original text.
struct SpmPiece {
  int32_t id;
  uint32_t begin;
  uint32_t end;
};

// What one Encode call worked on, for callers that post-process its pieces
// (the text rules in text_rules.h): the normalized text the pieces were cut
// from, the Normalizer's map from it to input bytes (normalized.size() + 1
// entries; empty when the text normalizes to nothing) and, per output
// piece, its bytes [first, second) in `normalized` (a byte-fallback piece
// holds one byte; a merged [UNK] run holds the run).
struct SpmTrace {
  std::string normalized;
  std::vector<uint32_t> norm_to_orig;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
};

class SpmProcessor {
 public:
  static absl::StatusOr<std::unique_ptr<SpmProcessor>> FromSpec(SpmModelSpec spec);
  static absl::StatusOr<std::unique_ptr<SpmProcessor>> FromSerialized(std::string_view bytes);
  static absl::StatusOr<std::unique_ptr<SpmProcessor>> FromFile(const std::string& path);

  // Encodes `text`. Invalid UTF-8 -> InvalidArgument naming the byte
  // position. `pieces` (optional) receives each piece's text, `trace`
  // (optional) what the pieces were cut from. Outputs are cleared first.
  absl::Status Encode(std::string_view text, std::vector<SpmPiece>* out,
                      std::vector<std::string>* pieces = nullptr,
                      SpmTrace* trace = nullptr) const;

  int piece_size() const { return static_cast<int>(spec_.pieces.size()); }
  // Empty string for ids out of range.
  const std::string& IdToPiece(int id) const;
  // Id of `piece` (any type), or -1 if the vocabulary has no such piece.
  int PieceToId(std::string_view piece) const;
  PieceType type(int id) const { return spec_.types[id]; }
  float score(int id) const { return spec_.scores[id]; }
  int unk_id() const { return model_->unk_id(); }
  const SpmModelSpec& spec() const { return spec_; }
  const Normalizer& normalizer() const { return *normalizer_; }

 private:
  SpmProcessor() = default;

  SpmModelSpec spec_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<UnigramModel> model_;
  absl::flat_hash_map<std::string, int> piece_to_id_;
  int byte_ids_[256];  // <0xNN> ids when byte_fallback
};

}  // namespace dserve
