// Unigram language-model segmentation (SentencePiece's optimized Viterbi).
//
// Given a normalized string, finds the segmentation into vocabulary pieces
// with the highest total score, exactly as libsentencepiece's
// unigram::Model::EncodeOptimized does: one left-to-right pass over UTF-8
// positions, pieces found by walking a double-array trie, user-defined pieces
// scored length * max_score - 0.1, and a one-character [UNK] node
// (min_score - 10) wherever no single-character piece exists. Ties keep the
// earlier candidate. Time is O(n * L) for n bytes and L the longest piece;
// memory is O(n).
//
// Immutable after Create; Encode is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/trie.h"

namespace dserve {

// SentencePiece piece types (values as in sentencepiece_model.proto).
enum class PieceType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A piece of the normalized string: bytes [begin, end) and its vocab id.
struct NormalizedPiece {
  uint32_t begin;
  uint32_t end;
  int32_t id;
};

class UnigramModel {
 public:
  // `pieces`, `scores` and `types` are parallel arrays indexed by id.
  // Exactly one piece must be kUnknown.
  static absl::StatusOr<std::unique_ptr<UnigramModel>> Create(
      const std::vector<std::string>& pieces, const std::vector<float>& scores,
      const std::vector<PieceType>& types);

  // Segments `normalized`; appends pieces in order to `out` (cleared first).
  void Encode(std::string_view normalized, std::vector<NormalizedPiece>* out) const;

  int unk_id() const { return unk_id_; }

 private:
  UnigramModel() = default;

  PieceTrie trie_;  // NORMAL, USER_DEFINED and UNUSED pieces -> id
  std::vector<float> scores_;
  std::vector<PieceType> types_;
  int unk_id_ = -1;
  float min_score_ = 0;
  float max_score_ = 0;
};

}  // namespace dserve
