#include "model/tokenizer/bpe.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"

namespace dserve {

// One map behind one reader/writer lock, taken once per Encode call for all
// its words (and once more to add the words it lacked), not once per word;
// a full cache is emptied (it follows the traffic, memory stays bounded).
class BpeModel::WordCache {
 public:
  explicit WordCache(int capacity) : capacity_(static_cast<size_t>(std::max(1, capacity))) {}

  absl::Mutex mu;
  // Short words and their few tokens sit in the slot itself (no pointer to
  // chase on a hit): std::string's small-string buffer and an inlined vector.
  absl::flat_hash_map<std::string, absl::InlinedVector<WordToken, 3>> map ABSL_GUARDED_BY(mu);

  void InsertLocked(std::string_view word, const WordToken* begin, const WordToken* end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (map.size() >= capacity_) map.clear();
    map.try_emplace(std::string(word), begin, end);  // a repeated word stays as it is
  }

 private:
  size_t capacity_;
};

BpeModel::BpeModel() = default;
BpeModel::~BpeModel() = default;

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(BpeModelSpec spec) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  int max_id = -1;
  for (const auto& [piece, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const auto& [piece, id] : spec.added_tokens) max_id = std::max(max_id, id);
  m->id_to_piece_.resize(static_cast<size_t>(max_id + 1));
  m->piece_to_id_.reserve(spec.vocab.size() + spec.added_tokens.size());
  auto add = [&](const std::string& piece, int id, const std::string& source) -> absl::Status {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": token '", piece, "' has negative id ", id));
    }
    if (!m->id_to_piece_[id].empty() && m->id_to_piece_[id] != piece) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": id ", id, " is given to both '",
                                                     m->id_to_piece_[id], "' and '", piece, "'"));
    }
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": empty token at id ", id));
    auto [it, inserted] = m->piece_to_id_.try_emplace(piece, id);
    if (!inserted && it->second != id) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": token '", piece, "' has two ids, ",
                                                     it->second, " and ", id));
    }
    m->id_to_piece_[id] = piece;
    return absl::OkStatus();
  };
  for (const auto& [piece, id] : spec.vocab) RETURN_IF_ERROR(add(piece, id, spec.vocab_source));
  if (spec.vocab.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.vocab_source, ": the vocabulary is empty"));
  }
  for (const auto& [piece, id] : spec.added_tokens) {
    RETURN_IF_ERROR(add(piece, id, absl::StrCat(spec.vocab_source, " (added tokens)")));
  }
  m->special_.assign(m->id_to_piece_.size(), false);
  for (const auto& [piece, id] : spec.added_tokens) m->special_[id] = true;

  // Special tokens by role; one the vocabulary lacks is added after it, as
  // transformers' tokenizers add missing special tokens.
  auto role = [&](const std::string& token, int* id) {
    if (token.empty()) return;
    int found = m->PieceToId(token);
    if (found < 0) {
      found = m->piece_size();
      m->id_to_piece_.push_back(token);
      m->special_.push_back(true);
      m->piece_to_id_.emplace(token, found);
    }
    m->special_[found] = true;
    *id = found;
  };
  role(spec.cls_token, &m->cls_id_);
  role(spec.sep_token, &m->sep_id_);
  role(spec.unk_token, &m->unk_id_);
  role(spec.pad_token, &m->pad_id_);
  role(spec.mask_token, &m->mask_id_);

  for (int b = 0; b < 256; ++b) {
    const std::string_view sym = ByteToUnicodeUtf8(static_cast<uint8_t>(b));
    auto it = m->piece_to_id_.find(absl::string_view(sym.data(), sym.size()));
    m->byte_id_[b] = it == m->piece_to_id_.end() ? -1 : it->second;
  }

  m->merges_.reserve(spec.merges.size());
  m->pair_rank_.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    // Plain references: clang (the fuzz build) cannot capture structured bindings in C++17.
    const std::string& left = spec.merges[r].first;
    const std::string& right = spec.merges[r].second;
    auto id_of = [&](const std::string& token) -> absl::StatusOr<int32_t> {
      auto it = m->piece_to_id_.find(token);
      if (it == m->piece_to_id_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(spec.merges_source, ": merge ", r + 1, " '", left,
                                                       " ", right, "' needs token '", token,
                                                       "', which is not in ", spec.vocab_source));
      }
      return it->second;
    };
    Merge mg;
    ASSIGN_OR_RETURN(mg.left, id_of(left));
    ASSIGN_OR_RETURN(mg.right, id_of(right));
    ASSIGN_OR_RETURN(mg.result, id_of(left + right));
    const int32_t rank = static_cast<int32_t>(r);
    m->merges_.push_back(mg);
    m->pair_rank_[PairKey(mg.left, mg.right)] = rank;  // a repeated pair keeps its last rank
  }
  m->byte_pair_rank_.assign(256 * 256, -1);
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      if (m->byte_id_[a] >= 0 && m->byte_id_[b] >= 0) {
        m->byte_pair_rank_[a * 256 + b] = m->Rank(m->byte_id_[a], m->byte_id_[b]);
      }
    }
  }
  if (spec.cache_capacity > 0) m->cache_ = std::make_unique<WordCache>(spec.cache_capacity);
  m->spec_ = std::move(spec);
  return m;
}

const std::string& BpeModel::IdToPiece(int id) const {
  static const std::string* const kEmpty = new std::string();
  if (id < 0 || id >= piece_size()) return *kEmpty;
  return id_to_piece_[id];
}

int BpeModel::PieceToId(std::string_view piece) const {
  auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
  return it == piece_to_id_.end() ? -1 : it->second;
}

bool BpeModel::IsSpecial(int id) const {
  return id >= 0 && id < static_cast<int>(special_.size()) && special_[id];
}

bool BpeModel::CanCutBefore(std::string_view text, size_t pos) const {
  return spec_.use_regex && Gpt2CutIsSafe(text, pos);
}

int32_t BpeModel::Rank(int32_t a, int32_t b) const {
  if (a < 0 || b < 0) return -1;
  auto it = pair_rank_.find(PairKey(a, b));
  return it == pair_rank_.end() ? -1 : it->second;
}

void BpeModel::EncodeShortWord(std::string_view bytes, std::vector<WordToken>* out) const {
  // Each live symbol keeps the rank of the pair it starts (kNone: none).
  // A round finds the lowest rank and merges its pairs left to right; the
  // pairs a merge creates get their ranks at once, which can never equal
  // the round's (a merged token is longer than either part), so they wait
  // for a later round as in GPT-2's loop.
  constexpr int32_t kNone = INT32_MAX;
  const int n = static_cast<int>(bytes.size());
  int32_t id[kShortWordBytes], rank[kShortWordBytes], next[kShortWordBytes], prev[kShortWordBytes];
  uint32_t len[kShortWordBytes];
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  for (int i = 0; i < n; ++i) {
    id[i] = byte_id_[s[i]];
    len[i] = 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
    const int32_t r = i + 1 < n ? byte_pair_rank_[s[i] * 256 + s[i + 1]] : -1;
    rank[i] = r < 0 ? kNone : r;
  }
  for (;;) {
    int32_t best = kNone;
    for (int i = 0; i >= 0; i = next[i]) best = std::min(best, rank[i]);
    if (best == kNone) break;
    const Merge& mg = merges_[best];
    for (int i = 0; i >= 0; i = next[i]) {
      if (rank[i] != best) continue;
      const int j = next[i];
      id[i] = mg.result;
      len[i] += len[j];
      next[i] = next[j];
      if (next[i] >= 0) prev[next[i]] = i;
      const int32_t r = next[i] >= 0 ? Rank(id[i], id[next[i]]) : -1;
      rank[i] = r < 0 ? kNone : r;
      if (prev[i] >= 0) {
        const int32_t pr = Rank(id[prev[i]], id[i]);
        rank[prev[i]] = pr < 0 ? kNone : pr;
      }
    }
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back({id[i], len[i]});
}

void BpeModel::EncodeWord(std::string_view bytes, std::vector<WordToken>* out) const {
  if (spec_.ignore_merges) {
    std::string level;
    AppendByteLevel(bytes, &level);
    auto it = piece_to_id_.find(level);
    if (it != piece_to_id_.end()) {
      out->push_back({it->second, static_cast<uint32_t>(bytes.size())});
      return;
    }
  }
  if (bytes.size() == 1) {
    out->push_back({byte_id_[static_cast<unsigned char>(bytes[0])], 1});
    return;
  }
  if (bytes.size() <= kShortWordBytes) return EncodeShortWord(bytes, out);
  // Symbols are a linked list over the bytes; a merged symbol lives at its
  // first byte's index and a consumed one has len 0.
  struct Sym {
    int32_t id;
    uint32_t len;
    int32_t prev, next;
  };
  // (rank, position) min-heap of candidate pairs; stale entries are checked
  // when popped.
  using Entry = std::pair<int32_t, int32_t>;
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Entry> heap;
  thread_local std::vector<int32_t> round, merged;
  const int32_t n = static_cast<int32_t>(bytes.size());
  syms.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    syms[i] = {byte_id_[static_cast<unsigned char>(bytes[i])], 1, i - 1, i + 1 < n ? i + 1 : -1};
  }
  auto rank_of = [&](int32_t a, int32_t b) -> int32_t {
    if (syms[a].id < 0 || syms[b].id < 0) return -1;
    auto it = pair_rank_.find(PairKey(syms[a].id, syms[b].id));
    return it == pair_rank_.end() ? -1 : it->second;
  };
  auto push = [&](int32_t a) {
    if (a < 0 || syms[a].next < 0) return;
    const int32_t r = rank_of(a, syms[a].next);
    if (r < 0) return;
    heap.emplace_back(r, a);
    std::push_heap(heap.begin(), heap.end(), std::greater<Entry>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    // One round of GPT-2's loop: the lowest-ranked pair present, merged at
    // all its positions left to right; pairs that the round creates wait
    // for the next round even when ranked lower.
    const int32_t rank = heap.front().first;
    round.clear();
    while (!heap.empty() && heap.front().first == rank) {
      round.push_back(heap.front().second);
      std::pop_heap(heap.begin(), heap.end(), std::greater<Entry>());
      heap.pop_back();
    }
    std::sort(round.begin(), round.end());
    const Merge& mg = merges_[rank];
    merged.clear();
    int32_t last = -1;
    for (int32_t pos : round) {
      if (pos == last) continue;
      last = pos;
      Sym& a = syms[pos];
      if (a.len == 0 || a.id != mg.left || a.next < 0) continue;
      Sym& b = syms[a.next];
      if (b.id != mg.right) continue;
      a.id = mg.result;
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (a.next >= 0) syms[a.next].prev = pos;
      merged.push_back(pos);
    }
    for (int32_t pos : merged) {
      push(syms[pos].prev);
      push(pos);
    }
  }
  for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) out->push_back({syms[i].id, syms[i].len});
}

absl::Status BpeModel::Encode(std::string_view text, std::vector<SpmPiece>* out,
                              std::vector<std::string>* pieces) const {
  out->clear();
  if (pieces != nullptr) pieces->clear();
  bool prefix = false;
  if (spec_.add_prefix_space && !text.empty()) {
    if (spec_.prefix_rule == PrefixSpaceRule::kFast) {
      prefix = text[0] != ' ';
    } else {
      char32_t cp;
      prefix = DecodeUtf8(text, 0, &cp) == 0 || !py_unicode::IsSpace(cp);
    }
  }
  std::string buf;
  std::string_view work = text;
  if (prefix) {
    buf.reserve(text.size() + 1);
    buf.push_back(' ');
    buf.append(text);
    work = buf;
  }
  thread_local std::vector<uint32_t> bounds;
  if (spec_.use_regex) {
    RETURN_IF_ERROR(Gpt2PreTokenize(work, &bounds));
  } else {
    RETURN_IF_ERROR(ValidateUtf8(text, "text"));
    bounds.assign(1, 0);
    if (!work.empty()) bounds.push_back(static_cast<uint32_t>(work.size()));
  }
  // The virtual space of add_prefix_space stands for the first character.
  uint32_t first_len = 0;
  if (prefix) {
    char32_t cp;
    first_len = static_cast<uint32_t>(DecodeUtf8(text, 0, &cp));
  }
  auto to_text = [&](uint32_t p, bool is_end) -> uint32_t {
    if (!prefix) return p;
    if (p == 0) return 0;
    if (p == 1) return is_end ? first_len : 0;
    return p - 1;
  };
  auto continuation = [&](uint32_t p) {
    return p < text.size() && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80;
  };
  // Chunk k's tokens are toks[first_tok[k], last_tok[k]) once all are known:
  // cached words first (one lock), then the others.
  thread_local std::vector<WordToken> toks;
  thread_local std::vector<uint32_t> first_tok, last_tok, missed;
  const size_t chunks = bounds.size() - 1;
  toks.clear();
  first_tok.assign(chunks, 0);
  last_tok.assign(chunks, 0);
  auto word_of = [&](size_t k) { return work.substr(bounds[k], bounds[k + 1] - bounds[k]); };
  size_t misses = 0;
  if (cache_ != nullptr) {
    absl::ReaderMutexLock lock(&cache_->mu);
    // The cache is larger than the L2 cache: ask for a window of slots ahead
    // so that their memory latencies overlap.
    constexpr size_t kAhead = 8;
    auto prefetch = [&](size_t k) {
      const std::string_view w = word_of(k);
      if (w.size() > 1 && w.size() <= kMaxCachedWordBytes) cache_->map.prefetch(absl::string_view(w.data(), w.size()));
    };
    for (size_t k = 0; k < std::min(chunks, kAhead); ++k) prefetch(k);
    for (size_t k = 0; k < chunks; ++k) {
      if (k + kAhead < chunks) prefetch(k + kAhead);
      const std::string_view w = word_of(k);
      if (w.size() == 1) {  // one byte: its symbol, nothing to merge or cache
        first_tok[k] = static_cast<uint32_t>(toks.size());
        toks.push_back({byte_id_[static_cast<unsigned char>(w[0])], 1});
        last_tok[k] = static_cast<uint32_t>(toks.size());
        continue;
      }
      auto it = w.size() <= kMaxCachedWordBytes ? cache_->map.find(absl::string_view(w.data(), w.size()))
                                                : cache_->map.end();
      if (it == cache_->map.end()) {
        last_tok[k] = UINT32_MAX;  // not yet
        ++misses;
        continue;
      }
      first_tok[k] = static_cast<uint32_t>(toks.size());
      toks.insert(toks.end(), it->second.begin(), it->second.end());
      last_tok[k] = static_cast<uint32_t>(toks.size());
    }
  } else {
    std::fill(last_tok.begin(), last_tok.end(), UINT32_MAX);
  }
  missed.clear();
  for (size_t k = 0; k < chunks; ++k) {
    if (last_tok[k] != UINT32_MAX) continue;
    first_tok[k] = static_cast<uint32_t>(toks.size());
    EncodeWord(word_of(k), &toks);
    last_tok[k] = static_cast<uint32_t>(toks.size());
    if (word_of(k).size() <= kMaxCachedWordBytes && word_of(k).size() > 1) missed.push_back(static_cast<uint32_t>(k));
  }
  if (cache_ != nullptr && misses > 0 && !missed.empty()) {
    absl::MutexLock lock(&cache_->mu);
    for (uint32_t k : missed) {
      cache_->InsertLocked(word_of(k), toks.data() + first_tok[k], toks.data() + last_tok[k]);
    }
  }
  out->resize(toks.size());  // at most one piece per token (fuse_unk makes fewer)
  SpmPiece* o = out->data();
  size_t n_out = 0;
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t wb = bounds[k];
    uint32_t pos = wb;
    bool prev_unk = false;
    for (uint32_t ti = first_tok[k]; ti < last_tok[k]; ++ti) {
      const WordToken& t = toks[ti];
      const uint32_t b0 = pos, b1 = pos + t.len;
      pos = b1;
      if (t.id < 0) {
        if (unk_id_ < 0) {
          const uint32_t at = to_text(b0, false);
          return absl::InvalidArgumentError(absl::StrFormat(
              "byte 0x%02X at byte %d has no token in %s and the tokenizer has no unknown token",
              static_cast<unsigned char>(work[b0]), at, spec_.vocab_source));
        }
        if (spec_.fuse_unk && prev_unk) {
          SpmPiece& last = o[n_out - 1];
          uint32_t e = to_text(b1, true);
          while (continuation(e)) ++e;
          last.end = std::max(last.end, e);
          continue;
        }
      }
      prev_unk = t.id < 0;
      const int32_t id = t.id < 0 ? unk_id_ : t.id;
      // trim_offsets: spaces at either end are no part of the span.
      uint32_t lead = 0, trail = 0;
      if (t.id >= 0) {
        while (b0 + lead < b1 && work[b0 + lead] == ' ') ++lead;
        while (b1 - trail > b0 && work[b1 - trail - 1] == ' ') ++trail;
        if (spec_.add_prefix_space && lead == 1 && to_text(b0, false) == 0) lead = 0;
      }
      const uint32_t s = std::min(b0 + lead, b1);
      const uint32_t e = std::max(b1 - trail, s);
      uint32_t begin = to_text(s, false), end = to_text(e, true);
      // A part of a multi-byte character stands for the whole character.
      while (begin > 0 && continuation(begin)) --begin;
      while (continuation(end)) ++end;
      if (end < begin) end = begin;
      o[n_out++] = {id, begin, end};
      if (pieces != nullptr) pieces->push_back(id_to_piece_[id]);
    }
  }
  out->resize(n_out);
  return absl::OkStatus();
}

std::string BpeModel::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes, out;
  auto flush = [&]() {
    for (size_t p = 0; p < bytes.size();) {
      char32_t cp;
      const int n = DecodeUtf8(bytes, p, &cp);
      if (n == 0) {
        out.append("\xEF\xBF\xBD");  // U+FFFD
        ++p;
      } else {
        out.append(bytes, p, static_cast<size_t>(n));
        p += static_cast<size_t>(n);
      }
    }
    bytes.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= piece_size()) continue;
    const std::string& piece = id_to_piece_[id];
    if (IsSpecial(id)) {
      if (skip_special_tokens) continue;
      flush();
      out.append(piece);
      continue;
    }
    for (size_t p = 0; p < piece.size();) {
      char32_t cp;
      const int n = DecodeUtf8(piece, p, &cp);
      if (n == 0) break;
      p += static_cast<size_t>(n);
      const int b = UnicodeToByte(cp);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
      } else {  // not a byte symbol: the character itself
        flush();
        AppendUtf8(cp, &out);
      }
    }
  }
  flush();
  return out;
}

// ---------------------------------------------------------------------------
// vocab.json + merges.txt (+ tokenizer_config.json, special_tokens_map.json)

namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// A special token entry: "text" or {"content": "text", ...}.
absl::Status ReadTokenField(const json& doc, const char* key, const std::string& path,
                            std::string* out) {
  if (!doc.contains(key)) return absl::OkStatus();
  const json& v = doc.at(key);
  if (v.is_null()) {
    out->clear();
  } else if (v.is_string()) {
    *out = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    *out = v.at("content").get<std::string>();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"", key, "\" must be a string or an object with \"content\""));
  }
  return absl::OkStatus();
}

absl::Status ReadSpecialTokens(const json& doc, const std::string& path, BpeModelSpec* spec) {
  RETURN_IF_ERROR(ReadTokenField(doc, "cls_token", path, &spec->cls_token));
  RETURN_IF_ERROR(ReadTokenField(doc, "sep_token", path, &spec->sep_token));
  RETURN_IF_ERROR(ReadTokenField(doc, "pad_token", path, &spec->pad_token));
  RETURN_IF_ERROR(ReadTokenField(doc, "unk_token", path, &spec->unk_token));
  RETURN_IF_ERROR(ReadTokenField(doc, "mask_token", path, &spec->mask_token));
  return absl::OkStatus();
}

absl::StatusOr<json> ReadJsonObject(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!doc.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return doc;
}

}  // namespace

absl::StatusOr<BpeModelSpec> ReadBpeFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  BpeModelSpec spec;
  const std::string vocab_path = (fs::path(dir) / "vocab.json").string();
  const std::string merges_path = (fs::path(dir) / "merges.txt").string();
  spec.vocab_source = vocab_path;
  spec.merges_source = merges_path;

  ASSIGN_OR_RETURN(json vocab, ReadJsonObject(vocab_path));
  spec.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_path, ": the id of '", it.key(), "' is not an integer: ", it.value().dump()));
    }
    spec.vocab.emplace_back(it.key(), it.value().get<int>());
  }

  ASSIGN_OR_RETURN(std::string merges, ReadWholeFile(merges_path));
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges.size();) {
    size_t eol = merges.find('\n', pos);
    if (eol == std::string::npos) eol = merges.size();
    std::string_view line(merges.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          merges_path, " line ", line_no, ": expected two tokens separated by one space, got '",
          std::string(line.substr(0, 80)), "'"));
    }
    spec.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }

  std::error_code ec;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path, ec)) continue;
    ASSIGN_OR_RETURN(json doc, ReadJsonObject(path));
    RETURN_IF_ERROR(ReadSpecialTokens(doc, path, &spec));
    if (doc.contains("add_prefix_space")) {
      if (!doc.at("add_prefix_space").is_boolean()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": add_prefix_space must be true or false"));
      }
      spec.add_prefix_space = doc.at("add_prefix_space").get<bool>();
    }
    if (doc.contains("added_tokens_decoder") && doc.at("added_tokens_decoder").is_object()) {
      // transformers >= 4.34: {"id": {"content": ...}}; those the vocabulary
      // lacks are added tokens.
      std::vector<std::string> known;
      for (const auto& [piece, id] : spec.vocab) known.push_back(piece);
      std::sort(known.begin(), known.end());
      for (auto it = doc.at("added_tokens_decoder").begin(); it != doc.at("added_tokens_decoder").end(); ++it) {
        if (!it.value().is_object() || !it.value().contains("content")) continue;
        const std::string content = it.value().at("content").get<std::string>();
        int id = -1;
        if (!absl::SimpleAtoi(it.key(), &id)) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": added_tokens_decoder key '", it.key(),
                                                         "' is not an id"));
        }
        if (!std::binary_search(known.begin(), known.end(), content)) spec.added_tokens.emplace_back(content, id);
      }
    }
  }
  spec.prefix_rule = PrefixSpaceRule::kSlow;
  return spec;
}

}  // namespace dserve
