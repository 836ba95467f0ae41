#include "model/tokenizer/unigram.h"

#include <algorithm>
#include <cfloat>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"

namespace dserve {

namespace {
constexpr float kUnkPenalty = 10.0;

struct BestPathNode {
  int32_t id = -1;
  float score = 0;
  int32_t starts_at = -1;
};
}  // namespace

absl::StatusOr<std::unique_ptr<UnigramModel>> UnigramModel::Create(
    const std::vector<std::string>& pieces, const std::vector<float>& scores,
    const std::vector<PieceType>& types) {
  if (pieces.size() != scores.size() || pieces.size() != types.size()) {
    return absl::InvalidArgumentError("unigram: pieces, scores and types differ in size");
  }
  std::unique_ptr<UnigramModel> m(new UnigramModel());
  m->scores_ = scores;
  m->types_ = types;
  // Same initial values as SentencePiece, so that a vocabulary with only
  // negative scores gives user-defined pieces a max_score of FLT_MIN.
  m->min_score_ = FLT_MAX;
  m->max_score_ = FLT_MIN;
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PieceType t = types[i];
    if (t == PieceType::kUnknown) {
      if (m->unk_id_ >= 0) return absl::InvalidArgumentError("unigram: unk is already defined");
      m->unk_id_ = static_cast<int>(i);
    }
    if (t == PieceType::kNormal) {
      m->min_score_ = std::min(m->min_score_, scores[i]);
      m->max_score_ = std::max(m->max_score_, scores[i]);
    }
    if (t == PieceType::kNormal || t == PieceType::kUserDefined || t == PieceType::kUnused) {
      entries.emplace_back(pieces[i], static_cast<int32_t>(i));
    }
  }
  if (m->unk_id_ < 0) return absl::InvalidArgumentError("unigram: unk is not defined");
  if (entries.empty()) return absl::InvalidArgumentError("unigram: no pieces are loaded");
  ASSIGN_OR_RETURN(m->trie_, PieceTrie::Build(std::move(entries)));
  return m;
}

void UnigramModel::Encode(std::string_view normalized, std::vector<NormalizedPiece>* out) const {
  out->clear();
  if (normalized.empty()) return;
  const size_t size = normalized.size();
  const float unk_score = min_score_ - kUnkPenalty;
  // Scratch reused per thread; released when it grew past 1 MiB of nodes so
  // a single huge input does not pin memory.
  thread_local std::vector<BestPathNode> best;
  best.assign(size + 1, BestPathNode());
  const auto* data = reinterpret_cast<const unsigned char*>(normalized.data());

  size_t starts_at = 0;
  while (starts_at < size) {
    const float till_here = best[starts_at].score;
    bool has_single_node = false;
    const size_t mblen = std::min<size_t>(Utf8CharLen(data[starts_at]), size - starts_at);
    int32_t node = PieceTrie::kRoot;
    size_t key_pos = starts_at;
    while (key_pos < size) {
      node = trie_.Child(node, data[key_pos]);
      if (node < 0) break;
      ++key_pos;
      const int32_t id = trie_.Value(node);
      if (id < 0) continue;
      const PieceType type = types_[id];
      if (type == PieceType::kUnused) continue;
      const size_t length = key_pos - starts_at;
      // The arithmetic mirrors SentencePiece's types (float score promoted to
      // double for the user-defined bonus) so ties resolve identically.
      const double score = type == PieceType::kUserDefined
                               ? (static_cast<float>(length) * max_score_ - 0.1)
                               : static_cast<double>(scores_[id]);
      const double candidate = score + till_here;
      BestPathNode& target = best[key_pos];
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = static_cast<float>(candidate);
        target.starts_at = static_cast<int32_t>(starts_at);
        target.id = id;
      }
      if (!has_single_node && length == mblen) has_single_node = true;
    }
    if (!has_single_node) {
      BestPathNode& target = best[starts_at + mblen];
      const float candidate = unk_score + till_here;
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = candidate;
        target.starts_at = static_cast<int32_t>(starts_at);
        target.id = unk_id_;
      }
    }
    starts_at += mblen;
  }

  size_t ends_at = size;
  while (ends_at > 0) {
    const BestPathNode& n = best[ends_at];
    out->push_back({static_cast<uint32_t>(n.starts_at), static_cast<uint32_t>(ends_at), n.id});
    ends_at = static_cast<size_t>(n.starts_at);
  }
  std::reverse(out->begin(), out->end());
  if (best.capacity() > (size_t{1} << 20)) std::vector<BestPathNode>().swap(best);
}

}  // namespace dserve
