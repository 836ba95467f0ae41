// GPT-2 byte-level BPE, as Hugging Face's GPT2Tokenizer / RobertaTokenizer /
// DebertaTokenizer (slow) and the `tokenizers` ByteLevel BPE compute it:
//
//   1. pre-tokenize with the GPT-2 pattern (byte_level.h);
//   2. write each chunk's UTF-8 bytes in the byte-level alphabet;
//   3. inside each chunk, repeatedly take the adjacent pair with the lowest
//      merge rank (its line in merges.txt) and merge all its occurrences,
//      left to right without overlap, until no adjacent pair has a rank;
//   4. look each token up in the vocabulary (ids come from vocab.json, never
//      from merge ranks).
//
// Unknown handling: every merge's parts and result must be in the
// vocabulary (checked at load, as `tokenizers` does), so only a byte whose
// symbol is missing can be unknown: it becomes the unknown token (several
// in a row become one with `fuse_unk`), or, without an unknown token, an
// InvalidArgument naming the byte.
//
// Offsets are UTF-8 byte offsets [begin, end) into the ORIGINAL text, in
// the Tokenizer's unit (tokenizer.h): a token holding part of a multi-byte
// character covers that whole character (all tokens of one split character
// share its span), and leading/trailing spaces of a token are not part of
// its span (Hugging Face's ByteLevel trim_offsets: only the space byte, not
// tabs or newlines; a token of spaces only gets an empty span at its end).
// With add_prefix_space the added space is no text: a token holding it
// starts at 0, and as in `tokenizers` the text's first token keeps one
// leading space of its own.
//
// Immutable after Create; Encode/Decode are const and thread-safe. Words
// already seen are served from a bounded cache shared by all threads (one
// reader/writer lock, taken once per Encode for all its words and once more
// to add new ones); results never depend on it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "model/tokenizer/spm_processor.h"

namespace dserve {

// Which texts get a space in front with add_prefix_space.
enum class PrefixSpaceRule : uint8_t {
  kSlow,  // transformers' slow tokenizers: text non-empty and text[0] not str.isspace()
  kFast,  // `tokenizers` ByteLevel: text non-empty and not starting with ' '
};

// A byte-level BPE model, as read from vocab.json + merges.txt (+
// tokenizer_config.json, special_tokens_map.json) or tokenizer.json.
struct BpeModelSpec {
  // Byte-level token -> id (vocab.json / model.vocab), special tokens included.
  std::vector<std::pair<std::string, int>> vocab;
  // Merge pairs in rank order (rank = index). A pair listed twice has its
  // last rank (as a dict or HashMap built from the list).
  std::vector<std::pair<std::string, std::string>> merges;
  // Special tokens by role; empty = none. DebertaTokenizer's defaults.
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string unk_token = "[UNK]";
  std::string mask_token = "[MASK]";
  // Tokens outside `vocab` (added tokens): content -> id, ids past the vocab.
  std::vector<std::pair<std::string, int>> added_tokens;
  bool add_prefix_space = false;
  PrefixSpaceRule prefix_rule = PrefixSpaceRule::kSlow;
  bool use_regex = true;       // false: each text is one chunk
  bool fuse_unk = false;       // consecutive unknown bytes -> one unknown token
  bool ignore_merges = false;  // a chunk that is a vocabulary token is that token
  // Names the files in error messages ("DIR/merges.txt", "tokenizer.json").
  std::string vocab_source = "vocab";
  std::string merges_source = "merges";
  // Words of at most kMaxCachedWordBytes bytes are cached, up to this many
  // (0: no cache). Default 65536 (~ a few MB).
  int cache_capacity = 65536;
};

class BpeModel {
 public:
  static constexpr size_t kMaxCachedWordBytes = 64;
  // Words up to this many bytes are merged with EncodeShortWord.
  static constexpr size_t kShortWordBytes = 48;

  // Validates `spec`: ids non-negative and unique, every merge's parts and
  // result in the vocabulary. Errors name the source file and the entry.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(BpeModelSpec spec);

  // Encodes `text` without special tokens: ids and byte offsets into `text`
  // (see above); `pieces` (optional) receives each token's vocabulary
  // string. Outputs are cleared first. Invalid UTF-8 -> InvalidArgument
  // naming the byte position.
  absl::Status Encode(std::string_view text, std::vector<SpmPiece>* out,
                      std::vector<std::string>* pieces = nullptr) const;

  // Ids -> text: the bytes of the tokens' symbols, decoded as UTF-8 with
  // each malformed byte replaced by U+FFFD (errors="replace"); special and
  // added tokens as their text, or left out with `skip_special_tokens`.
  // Ids out of range are left out.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Where the Tokenizer may cut a long text and encode only the prefix
  // (tokenizer.h, EncodeSegmentCapped): the prefix's tokens are then the
  // whole text's first tokens. Never true without use_regex.
  bool CanCutBefore(std::string_view text, size_t pos) const;

  // 1 + the largest id (vocabulary and added tokens).
  int piece_size() const { return static_cast<int>(id_to_piece_.size()); }
  // Empty string for ids out of range (or unused ids in a sparse vocab).
  const std::string& IdToPiece(int id) const;
  // Id of `piece`, or -1.
  int PieceToId(std::string_view piece) const;
  // The id of the spec's token for each role, or -1 when it has none.
  int cls_id() const { return cls_id_; }
  int sep_id() const { return sep_id_; }
  int pad_id() const { return pad_id_; }
  int unk_id() const { return unk_id_; }
  int mask_id() const { return mask_id_; }
  bool IsSpecial(int id) const;
  const BpeModelSpec& spec() const { return spec_; }

 private:
  struct Merge {
    int32_t left, right, result;
  };
  // One token of a word: its id (-1 unknown) and its length in bytes.
  struct WordToken {
    int32_t id;
    uint32_t len;
  };
  class WordCache;

  BpeModel();

  // BPE of one chunk (raw UTF-8 bytes) into `out` (appended): short words
  // by scanning cached pair ranks, long ones with a heap of pairs; both run
  // GPT-2's rounds exactly.
  void EncodeWord(std::string_view bytes, std::vector<WordToken>* out) const;
  void EncodeShortWord(std::string_view bytes, std::vector<WordToken>* out) const;
  // Rank of merging ids (a, b), or -1.
  int32_t Rank(int32_t a, int32_t b) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  BpeModelSpec spec_;
  absl::flat_hash_map<std::string, int> piece_to_id_;
  std::vector<std::string> id_to_piece_;
  std::vector<bool> special_;
  std::array<int32_t, 256> byte_id_{};
  // Rank of merging the symbols of bytes (a, b), at a * 256 + b, or -1: the
  // first merges of every word without a hash lookup.
  std::vector<int32_t> byte_pair_rank_;
  absl::flat_hash_map<uint64_t, int32_t> pair_rank_;  // PairKey(left, right) -> rank
  std::vector<Merge> merges_;                         // by rank
  int cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1, mask_id_ = -1;
  std::unique_ptr<WordCache> cache_;

 public:
  ~BpeModel();
};

// Reads `dir`/vocab.json and `dir`/merges.txt, with add_prefix_space and
// the special tokens from `dir`/tokenizer_config.json and
// `dir`/special_tokens_map.json when present (strings or {"content": ...}
// objects; DebertaTokenizer's defaults otherwise). merges.txt: an optional
// "#version" first line, then one "left right" pair per line; blank lines
// are skipped. Errors name the file and the line or entry.
absl::StatusOr<BpeModelSpec> ReadBpeFiles(const std::string& dir);

}  // namespace dserve
