#include "model/tokenizer/normalizer.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"

namespace dserve {

namespace {
constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";
constexpr std::string_view kReplacementChar = "\xef\xbf\xbd";
}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::Create(NormalizerOptions options) {
  std::unique_ptr<Normalizer> n(new Normalizer(std::move(options)));
  const std::string& blob = n->options_.precompiled_charsmap;
  if (!blob.empty()) {
    if (blob.size() <= 4) return absl::InvalidArgumentError("precompiled charsmap is broken");
    uint32_t trie_size = 0;
    for (int i = 3; i >= 0; --i) trie_size = (trie_size << 8) | static_cast<unsigned char>(blob[i]);
    if (trie_size >= blob.size() - 4 + 1 || trie_size % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("precompiled charsmap: trie size ", trie_size, " exceeds blob size ", blob.size()));
    }
    n->units_.resize(trie_size / 4);
    // Units are little-endian; copy into aligned storage.
    for (size_t i = 0; i < n->units_.size(); ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(blob.data() + 4 + 4 * i);
      n->units_[i] = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    }
    n->charsmap_ = DartsCloneView(n->units_.data(), n->units_.size());
    n->replacements_ = std::string_view(blob).substr(4 + trie_size);
  }
  if (!n->options_.user_defined_symbols.empty()) {
    std::vector<std::pair<std::string, int32_t>> entries;
    for (size_t i = 0; i < n->options_.user_defined_symbols.size(); ++i) {
      entries.emplace_back(n->options_.user_defined_symbols[i], static_cast<int32_t>(i));
    }
    ASSIGN_OR_RETURN(n->user_symbols_, PieceTrie::Build(std::move(entries)));
  }
  return n;
}

std::pair<std::string_view, size_t> Normalizer::NormalizePrefix(std::string_view input) const {
  if (!user_symbols_.empty()) {
    const size_t len = user_symbols_.LongestPrefix(input);
    if (len > 0) return {input.substr(0, len), len};
  }
  if (!charsmap_.empty()) {
    uint32_t value = 0;
    const size_t len = charsmap_.LongestPrefix(input, &value);
    if (len > 0) {
      if (value >= replacements_.size()) return {std::string_view(), len};
      const char* s = replacements_.data() + value;
      const size_t max = replacements_.size() - value;
      const void* nul = std::memchr(s, '\0', max);
      const size_t n = nul ? static_cast<const char*>(nul) - s : max;
      return {std::string_view(s, n), len};
    }
  }
  char32_t cp;
  const int n = DecodeUtf8(input, 0, &cp);
  if (n == 0) return {kReplacementChar, 1};
  return {input.substr(0, n), static_cast<size_t>(n)};
}

void Normalizer::Normalize(std::string_view input, std::string* normalized,
                           std::vector<uint32_t>* norm_to_orig) const {
  normalized->clear();
  norm_to_orig->clear();
  if (input.empty()) return;
  const NormalizerOptions& o = options_;
  uint32_t consumed = 0;

  // Leading whitespace: rules that produce exactly " " are dropped.
  if (o.remove_extra_whitespaces) {
    while (!input.empty()) {
      const auto p = NormalizePrefix(input);
      if (p.first != " ") break;
      input.remove_prefix(p.second);
      consumed += static_cast<uint32_t>(p.second);
    }
  }
  // SentencePiece returns an empty result (no final offset) here.
  if (input.empty()) return;

  normalized->reserve(input.size() * 3 / 2 + 8);
  norm_to_orig->reserve(input.size() * 3 / 2 + 8);

  auto add_ws = [&]() {
    if (o.escape_whitespaces) {
      normalized->append(kSpaceSymbol);
      norm_to_orig->insert(norm_to_orig->end(), kSpaceSymbol.size(), consumed);
    } else {
      normalized->push_back(' ');
      norm_to_orig->push_back(consumed);
    }
  };

  if (!o.treat_whitespace_as_suffix && o.add_dummy_prefix) add_ws();

  bool is_prev_space = o.remove_extra_whitespaces;
  while (!input.empty()) {
    const auto p = NormalizePrefix(input);
    std::string_view sp = p.first;
    while (is_prev_space && !sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (char c : sp) {
        if (o.escape_whitespaces && c == ' ') {
          normalized->append(kSpaceSymbol);
          norm_to_orig->insert(norm_to_orig->end(), kSpaceSymbol.size(), consumed);
        } else {
          normalized->push_back(c);
          norm_to_orig->push_back(consumed);
        }
      }
      is_prev_space = sp.back() == ' ';
    }
    consumed += static_cast<uint32_t>(p.second);
    input.remove_prefix(p.second);
    if (!o.remove_extra_whitespaces) is_prev_space = false;
  }

  if (o.remove_extra_whitespaces) {
    const std::string_view space = o.escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
    while (normalized->size() >= space.size() &&
           std::string_view(*normalized).substr(normalized->size() - space.size()) == space) {
      const size_t length = normalized->size() - space.size();
      consumed = (*norm_to_orig)[length];
      normalized->resize(length);
      norm_to_orig->resize(length);
    }
  }

  if (o.treat_whitespace_as_suffix && o.add_dummy_prefix) add_ws();

  norm_to_orig->push_back(consumed);
}

std::string Normalizer::Normalize(std::string_view input) const {
  std::string out;
  std::vector<uint32_t> map;
  Normalize(input, &out, &map);
  return out;
}

}  // namespace dserve
