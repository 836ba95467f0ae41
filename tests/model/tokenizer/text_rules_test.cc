// Hugging Face AlbertTokenizer text rules (text_rules.h): the Python
// character tables against Debian's python3 for every code point, ids and
// pieces against gen_albert_oracle.py (libsentencepiece plus an independent
// Python implementation of the rules) on >= 5,000 strings for every model
// and flag set, offset invariants on the same strings, and hand-checked
// cases (offsets, specials, tokenizer_config.json, loading).
#include "model/tokenizer/text_rules.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer/test_util.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;
using ::dserve::testing::AlbertOracleDir;
using ::dserve::testing::EnsureAlbertOracle;
using ::dserve::testing::ReadJsonl;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kMarker = "\xe2\x96\x81";  // ▁

std::string Escape(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<std::string> AlbertStrings() {
  std::vector<std::string> out;
  for (const auto& row : ReadJsonl(AlbertOracleDir() + "/strings.jsonl")) {
    out.push_back(row.at("text").get<std::string>());
  }
  return out;
}

// ---------------------------------------------------------------------------
// py_unicode against Python, code point by code point.

std::vector<char32_t> Codepoints(const nlohmann::json& list) {
  std::vector<char32_t> out;
  for (const auto& v : list) out.push_back(v.get<uint32_t>());
  return out;
}

TEST(PyUnicodeTest, MatchesPythonForEveryCodePoint) {
  EnsureAlbertOracle();
  const auto rows = ReadJsonl(AlbertOracleDir() + "/py_unicode.jsonl");
  ASSERT_GT(rows.size(), 10000u);
  EXPECT_EQ(py_unicode::UnidataVersion(), rows[0].at("unidata_version").get<std::string>());
  std::map<char32_t, const nlohmann::json*> special;
  for (size_t i = 1; i < rows.size(); ++i) special[rows[i][0].get<uint32_t>()] = &rows[i];
  int mismatches = 0;
  char32_t buf[py_unicode::kMaxMapped];
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const auto it = special.find(c);
    const bool listed = it != special.end();
    const nlohmann::json& r = listed ? *it->second : nlohmann::json();
    const bool space = listed && r[1].get<int>() != 0;
    const bool digit = listed && r[2].get<int>() != 0;
    const bool combining = listed && r[3].get<int>() != 0;
    const std::vector<char32_t> stripped = listed ? Codepoints(r[4]) : std::vector<char32_t>{c};
    const std::vector<char32_t> lower = listed ? Codepoints(r[5]) : std::vector<char32_t>{c};
    const int sigma = listed ? r[6].get<int>() : 0;
    const int ns = py_unicode::DecomposeStripped(c, buf);
    const std::vector<char32_t> got_stripped(buf, buf + ns);
    const int nl = py_unicode::LowerFull(c, buf);
    const std::vector<char32_t> got_lower(buf, buf + nl);
    const bool ok = py_unicode::IsSpace(c) == space && py_unicode::IsDigit(c) == digit &&
                    py_unicode::IsCombining(c) == combining && got_stripped == stripped &&
                    got_lower == lower &&
                    static_cast<int>(py_unicode::SigmaContextOf(c)) == sigma;
    if (!ok && ++mismatches <= 10) ADD_FAILURE() << "U+" << std::hex << uint32_t{c};
  }
  std::printf("[py_unicode] %zu listed code points, %d mismatches over U+0000..U+10FFFF\n",
              special.size(), mismatches);
  EXPECT_EQ(mismatches, 0);
}

// ---------------------------------------------------------------------------
// Offsets: what a slice of the original text becomes.

// Text as the model sees it, for comparing: SentencePiece-normalized, without
// '▁' and with the final sigma as σ (context at a slice's edge differs).
std::string Canonical(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, kMarker.size()) == kMarker) {
      i += kMarker.size();
    } else if (s.substr(i, 2) == "\xcf\x82") {  // ς
      out += "\xcf\x83";                        // σ
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::string SliceAsModelSees(const Tokenizer& tok, std::string_view original) {
  const AlignedText pre = PreprocessText(original, tok.text_rules());
  return Canonical(tok.spm().normalizer().Normalize(pre.text));
}

bool IsBytePiece(const Tokenizer& tok, int id) {
  return id < tok.spm().piece_size() && tok.spm().type(id) == PieceType::kByte;
}

std::string PieceAsModelSees(const Tokenizer& tok, const SpmPiece& p, const std::string& piece) {
  if (IsBytePiece(tok, p.id)) {
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  return Canonical(piece);
}

// Whether tokens may overlap on `overlap` (original text): it holds at most
// one character the model sees (the others are dropped by step 4 or by
// SentencePiece's normalizer, and belong to the character before them), or
// it normalizes to one character (Hangul jamo that NFKC composes).
bool MayShare(const Tokenizer& tok, std::string_view overlap) {
  int visible = 0;
  for (size_t pos = 0; pos < overlap.size();) {
    char32_t c;
    const int n = DecodeUtf8(overlap, pos, &c);
    if (n == 0) return false;
    visible += !SliceAsModelSees(tok, overlap.substr(pos, n)).empty();
    pos += n;
  }
  return visible <= 1 || CountCodepoints(SliceAsModelSees(tok, overlap)) == 1;
}

// The offset contract of text_rules.h on one encoding of `text`: spans in
// range and never going backwards; consecutive spans overlap only on one
// original character; each piece's slice of the original, preprocessed,
// holds the piece; a run of tokens i..j maps to a slice that gives exactly
// those tokens' text (QA answers) when its edges are not shared with
// neighbours. Returns the first violation, or "".
std::string CheckOffsets(const Tokenizer& tok, const std::string& text,
                         const std::vector<SpmPiece>& out, const std::vector<std::string>& pieces,
                         std::mt19937* rng) {
  const size_t n = out.size();
  auto slice = [&](size_t i, size_t j) {
    return std::string_view(text).substr(out[i].begin, out[j].end - out[i].begin);
  };
  int last_nonempty = -1;
  for (size_t i = 0; i < n; ++i) {
    const SpmPiece& p = out[i];
    const std::string where =
        absl::StrCat("token ", i, " ", Escape(pieces[i]), " [", p.begin, ",", p.end, ")");
    if (p.begin > p.end || p.end > text.size()) return where + " out of range";
    if (i > 0 && p.begin < out[i - 1].begin) return where + " begins before the token before";
    if (p.begin == p.end) continue;
    if (last_nonempty >= 0) {
      const SpmPiece& q = out[last_nonempty];
      if (p.end < q.end) return where + " ends before the token before";
      if (p.begin < q.end) {
        const std::string_view overlap = std::string_view(text).substr(p.begin, q.end - p.begin);
        if (!MayShare(tok, overlap)) {
          return where + " overlaps the token before on more than one character";
        }
      }
    }
    last_nonempty = static_cast<int>(i);
    if (IsBytePiece(tok, p.id)) continue;
    const std::string want = PieceAsModelSees(tok, p, pieces[i]);
    const std::string got = SliceAsModelSees(tok, slice(i, i));
    if (got.find(want) == std::string::npos) {
      return absl::StrCat(where, ": its slice gives ", Escape(got));
    }
  }
  if (n == 0) return "";
  std::vector<std::pair<size_t, size_t>> runs = {{0, n - 1}};
  for (int k = 0; k < 3; ++k) {
    const size_t i = (*rng)() % n, j = (*rng)() % n;
    runs.emplace_back(std::min(i, j), std::max(i, j));
  }
  for (const auto& [i, j] : runs) {
    std::string want;
    for (size_t k = i; k <= j; ++k) want += PieceAsModelSees(tok, out[k], pieces[k]);
    if (out[i].begin > out[j].end) return absl::StrCat("tokens ", i, "..", j, " reversed");
    const std::string got = SliceAsModelSees(tok, slice(i, j));
    const bool clean = (i == 0 || out[i - 1].end <= out[i].begin) &&
                       (j + 1 == n || out[j].end <= out[j + 1].begin);
    if (clean ? got != want : got.find(want) == std::string::npos) {
      return absl::StrCat("tokens ", i, "..", j, " give ", Escape(want), " but their slice ",
                          Escape(slice(i, j)), " gives ", Escape(got));
    }
  }
  return "";
}

// ---------------------------------------------------------------------------
// The oracle: every trained model with every flag set.

const char* const kModels[] = {"albert_u1000", "albert_u2500_num", "albert_u800_bytefb",
                               "albert_u4000_identity"};
const char* const kFlagSets[] = {"default", "accents_cased", "spaces_kept", "all_off"};

std::vector<std::string> ConfigNames() {
  std::vector<std::string> out;
  for (const char* m : kModels) {
    for (const char* f : kFlagSets) out.push_back(std::string(m) + "__" + f);
  }
  return out;
}

class AlbertOracleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { EnsureAlbertOracle(); }
};

TEST_P(AlbertOracleTest, MatchesPythonReferenceWithSaneOffsets) {
  const std::string dir = AlbertOracleDir() + "/" + GetParam();
  const absl::StatusOr<TextRules> rules = ReadAlbertTextRules(dir);
  ASSERT_TRUE(rules.ok()) << rules.status();
  auto tok = Tokenizer::FromDirectory(dir, *rules);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  const auto strings = AlbertStrings();
  ASSERT_GE(strings.size(), 5000u);
  const auto oracle = ReadJsonl(dir + "/oracle.jsonl");
  ASSERT_EQ(oracle.size(), strings.size());
  int pre_bad = 0, ids_bad = 0, offsets_bad = 0;
  std::mt19937 rng(7);
  std::vector<SpmPiece> out;
  std::vector<std::string> pieces;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string& s = strings[i];
    const std::string want_pre = oracle[i].at("pre").get<std::string>();
    const std::string pre = PreprocessText(s, *rules).text;
    if (pre != want_pre && ++pre_bad <= 5) {
      ADD_FAILURE() << GetParam() << " string " << i << " " << Escape(s) << "\n preprocessed "
                    << Escape(pre) << "\n want         " << Escape(want_pre);
    }
    const absl::Status st = t.EncodeRaw(s, &out, &pieces);
    std::vector<int> ids;
    for (const SpmPiece& p : out) ids.push_back(p.id);
    const auto want_ids = oracle[i].at("ids").get<std::vector<int>>();
    const auto want_pieces = oracle[i].at("pieces").get<std::vector<std::string>>();
    if (!st.ok() || ids != want_ids || pieces != want_pieces) {
      if (++ids_bad <= 5) {
        ADD_FAILURE() << GetParam() << " string " << i << " " << Escape(s) << "\n status " << st
                      << "\n got  " << nlohmann::json(pieces).dump() << " "
                      << nlohmann::json(ids).dump() << "\n want "
                      << nlohmann::json(want_pieces).dump() << " "
                      << nlohmann::json(want_ids).dump();
      }
      continue;
    }
    const std::string problem = CheckOffsets(t, s, out, pieces, &rng);
    if (!problem.empty() && ++offsets_bad <= 5) {
      ADD_FAILURE() << GetParam() << " string " << i << " " << Escape(s) << ": " << problem;
    }
  }
  std::printf("[albert oracle] %s: %zu strings; mismatches: %d preprocessed, %d ids/pieces, "
              "%d offsets\n",
              GetParam().c_str(), strings.size(), pre_bad, ids_bad, offsets_bad);
  EXPECT_EQ(pre_bad, 0);
  EXPECT_EQ(ids_bad, 0);
  EXPECT_EQ(offsets_bad, 0);
}

INSTANTIATE_TEST_SUITE_P(TrainedModels, AlbertOracleTest, ::testing::ValuesIn(ConfigNames()));

TEST(AlbertOracleSetTest, GeneratedSetIsComplete) {
  EnsureAlbertOracle();
  EXPECT_EQ(Lines(AlbertOracleDir() + "/configs.txt"), ConfigNames());
  EXPECT_GE(AlbertStrings().size(), 5000u);
  const auto stats = nlohmann::json::parse(std::ifstream(AlbertOracleDir() + "/stats.json"));
  // The strings exercise NFKD's canonical reordering (per-code-point NFKD
  // must still agree with Python's whole-string NFKD once combining
  // characters are dropped) and the digit-comma re-split.
  EXPECT_GT(stats.at("nfkd_reordered_strings").get<int>(), 0);
  int most = 0;
  for (const auto& item : stats.at("digit_comma_strings").items()) {
    most = std::max(most, item.value().get<int>());
  }
  EXPECT_GE(most, 50);
}

// ---------------------------------------------------------------------------
// Hand-checked cases.

TextRules Rules(bool lower, bool remove_space, bool keep_accents) {
  TextRules r = AlbertTextRules();
  r.do_lower_case = lower;
  r.remove_space = remove_space;
  r.keep_accents = keep_accents;
  return r;
}

struct Span {
  uint32_t begin, end;
  bool operator==(const Span& o) const { return begin == o.begin && end == o.end; }
};
std::ostream& operator<<(std::ostream& os, const Span& s) {
  return os << "[" << s.begin << "," << s.end << ")";
}
Span Orig(const AlignedText& t, uint32_t b, uint32_t e) {
  const SourceSpan s = t.ToOriginal(b, e);
  return {s.begin, s.end};
}

TEST(PreprocessTest, DefaultsLowerStripAccentsAndMapBack) {
  const AlignedText t = PreprocessText("Café", AlbertTextRules());
  EXPECT_EQ(t.text, "cafe");
  EXPECT_EQ(Orig(t, 3, 4), (Span{3, 5}));  // "e" is "é"
  EXPECT_EQ(Orig(t, 0, 4), (Span{0, 5}));
  // A decomposed accent joins the letter before it.
  const AlignedText d = PreprocessText("Cafe\u0301!", AlbertTextRules());
  EXPECT_EQ(d.text, "cafe!");
  EXPECT_EQ(Orig(d, 3, 4), (Span{3, 6}));
  EXPECT_EQ(Orig(d, 4, 5), (Span{6, 7}));
}

TEST(PreprocessTest, QuotePairsBecomeOneQuoteMappedToBoth) {
  const AlignedText t = PreprocessText("say ``hi'' '''", AlbertTextRules());
  EXPECT_EQ(t.text, "say \"hi\" \"'");
  EXPECT_EQ(Orig(t, 4, 5), (Span{4, 6}));
  EXPECT_EQ(Orig(t, 7, 8), (Span{8, 10}));
  EXPECT_EQ(Orig(t, 9, 10), (Span{11, 13}));
  EXPECT_EQ(Orig(t, 10, 11), (Span{13, 14}));
}

TEST(PreprocessTest, WhitespaceRunsCollapseToTheirWholeRun) {
  const AlignedText t = PreprocessText(" a \t\u00a0 b  ", AlbertTextRules());
  EXPECT_EQ(t.text, "a b");
  EXPECT_EQ(Orig(t, 1, 2), (Span{2, 7}));
  EXPECT_EQ(Orig(t, 0, 3), (Span{1, 8}));
  const AlignedText kept = PreprocessText(" a \t b ", Rules(true, false, false));
  EXPECT_EQ(kept.text, " a \t b ");
}

TEST(PreprocessTest, OneCharacterMadeSeveralMapsEachToIt) {
  const AlignedText t = PreprocessText("\xef\xac\x81x", AlbertTextRules());  // ﬁx
  EXPECT_EQ(t.text, "fix");
  EXPECT_EQ(Orig(t, 0, 1), (Span{0, 3}));
  EXPECT_EQ(Orig(t, 1, 2), (Span{0, 3}));
  EXPECT_EQ(Orig(t, 2, 3), (Span{3, 4}));
  EXPECT_EQ(PreprocessText("ＡＢＣ１，", AlbertTextRules()).text, "abc1,");
}

TEST(PreprocessTest, TurkishDottedCapitalI) {
  EXPECT_EQ(PreprocessText("İx", AlbertTextRules()).text, "ix");
  // Without NFKD the combining dot of lower("İ") stays, both from "İ".
  const AlignedText t = PreprocessText("İx", Rules(true, true, true));
  EXPECT_EQ(t.text, "i\xcc\x87x");
  EXPECT_EQ(Orig(t, 0, 3), (Span{0, 2}));
  EXPECT_EQ(Orig(t, 1, 3), (Span{0, 2}));
  EXPECT_EQ(PreprocessText("İx", Rules(false, true, false)).text, "Ix");
}

TEST(PreprocessTest, SigmaIsLoweredCharacterByCharacterLikeTransformers) {
  // PreTrainedTokenizer.tokenize lower-cases one character at a time, so a
  // written Σ never becomes the final ς ...
  EXPECT_EQ(PreprocessText("ΟΔΟΣ ΣΑΣ.", AlbertTextRules()).text, "οδοσ σασ.");
  // ... but preprocess_text's str.lower() sees the Σ that NFKD makes from
  // a mathematical sigma, in context.
  EXPECT_EQ(PreprocessText("α\U0001d6ba", AlbertTextRules()).text, "ας");
  EXPECT_EQ(PreprocessText("α\U0001d6ba.", AlbertTextRules()).text, "ας.");
  EXPECT_EQ(PreprocessText("\U0001d6baα", AlbertTextRules()).text, "σα");
  EXPECT_EQ(PreprocessText("α\U0001d6baβ", AlbertTextRules()).text, "ασβ");
  EXPECT_EQ(PreprocessText("ΟΔΟΣ", Rules(false, true, false)).text, "ΟΔΟΣ");
}

TEST(PreprocessTest, CanonicalReorderingOnlyMovesDroppedMarks) {
  // NFKD puts U+0323 (class 220) before U+0301 (230); both are dropped.
  EXPECT_EQ(PreprocessText("a\u0301\u0323b", AlbertTextRules()).text, "ab");
  EXPECT_EQ(PreprocessText("\u1ea1\u0301", AlbertTextRules()).text, "a");
  const AlignedText t = PreprocessText("\u0301x", AlbertTextRules());
  EXPECT_EQ(t.text, "x");
  EXPECT_EQ(Orig(t, 0, 1), (Span{0, 3}));  // a leading mark joins what follows
}

TEST(PreprocessTest, KeepAccentsAndCase) {
  EXPECT_EQ(PreprocessText("Café  ``x''", Rules(false, true, true)).text, "Café \"x\"");
  EXPECT_EQ(PreprocessText("   ", AlbertTextRules()).text, "");
  EXPECT_EQ(PreprocessText("", AlbertTextRules()).text, "");
}

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dserve_text_rules_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

TEST(ReadAlbertTextRulesTest, DefaultsWithoutConfig) {
  const absl::StatusOr<TextRules> r = ReadAlbertTextRules(TempDir("no_config"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->enabled);
  EXPECT_TRUE(r->do_lower_case);
  EXPECT_TRUE(r->remove_space);
  EXPECT_FALSE(r->keep_accents);
  EXPECT_FALSE(TextRules().enabled);
}

TEST(ReadAlbertTextRulesTest, ReadsTheThreeKeys) {
  const std::string dir = TempDir("config");
  WriteFile(dir + "/tokenizer_config.json",
            R"({"do_lower_case": false, "remove_space": false, "keep_accents": true,
                "model_max_length": 512, "unk_token": "<unk>"})");
  const absl::StatusOr<TextRules> r = ReadAlbertTextRules(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->enabled);
  EXPECT_FALSE(r->do_lower_case);
  EXPECT_FALSE(r->remove_space);
  EXPECT_TRUE(r->keep_accents);
  WriteFile(dir + "/tokenizer_config.json", R"({"keep_accents": true})");
  const absl::StatusOr<TextRules> partial = ReadAlbertTextRules(dir);
  ASSERT_TRUE(partial.ok());
  EXPECT_TRUE(partial->do_lower_case);
  EXPECT_TRUE(partial->keep_accents);
}

TEST(ReadAlbertTextRulesTest, ErrorsNameTheFileAndKey) {
  const std::string dir = TempDir("bad_config");
  WriteFile(dir + "/tokenizer_config.json", R"({"do_lower_case": "yes"})");
  absl::StatusOr<TextRules> r = ReadAlbertTextRules(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("tokenizer_config.json"));
  EXPECT_THAT(r.status().message(), HasSubstr("do_lower_case"));
  WriteFile(dir + "/tokenizer_config.json", R"({"keep_accents": null})");
  r = ReadAlbertTextRules(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("keep_accents"));
  WriteFile(dir + "/tokenizer_config.json", "{not json");
  r = ReadAlbertTextRules(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("tokenizer_config.json"));
  WriteFile(dir + "/tokenizer_config.json", "[1, 2]");
  EXPECT_FALSE(ReadAlbertTextRules(dir).ok());
}

class AlbertTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EnsureAlbertOracle();
    auto t = Tokenizer::FromDirectory(AlbertOracleDir() + "/albert_u1000", AlbertTextRules());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static EncodeOptions NoLimit() {
    EncodeOptions o;
    o.max_length = 0;
    o.return_pieces = true;
    return o;
  }
  static const Tokenizer* tok_;
};
const Tokenizer* AlbertTokenizerTest::tok_ = nullptr;

TEST_F(AlbertTokenizerTest, SpecialIdsComeFromTheModelsPieces) {
  EXPECT_EQ(tok_->pad_id(), 0);
  EXPECT_EQ(tok_->unk_id(), 1);
  EXPECT_EQ(tok_->cls_id(), 2);
  EXPECT_EQ(tok_->sep_id(), 3);
  EXPECT_EQ(tok_->mask_id(), 4);
  EXPECT_EQ(tok_->vocab_size(), tok_->spm().piece_size());  // [MASK] is a piece
  EXPECT_EQ(tok_->IdToPiece(2), "[CLS]");
  EXPECT_TRUE(tok_->text_rules().enabled);
}

TEST_F(AlbertTokenizerTest, PairLayoutAndTypeIds) {
  auto enc = tok_->EncodePair("Hello THERE", "Café ``x''", NoLimit());
  ASSERT_TRUE(enc.ok()) << enc.status();
  const size_t n = enc->size();
  ASSERT_GE(n, 5u);
  EXPECT_EQ(enc->ids.front(), 2);
  EXPECT_EQ(enc->ids.back(), 3);
  size_t first_sep = 1;
  while (enc->ids[first_sep] != 3) ++first_sep;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(enc->type_ids[i], i <= first_sep ? 0 : 1) << i;
    if (enc->sequence_ids[i] < 0) EXPECT_EQ(enc->offsets[i], (ByteSpan{0, 0}));
  }
  std::string first;
  for (size_t i = 1; i < first_sep; ++i) first += enc->pieces[i];
  EXPECT_EQ(Canonical(first), "hellothere");
}

TEST_F(AlbertTokenizerTest, PieceOffsetsPointAtTheOriginalCharacters) {
  const std::string text = "Café ``Le Monde'' ﬁne";
  std::vector<SpmPiece> out;
  std::vector<std::string> pieces;
  ASSERT_TRUE(tok_->EncodeRaw(text, &out, &pieces).ok());
  std::string joined;
  for (size_t i = 0; i < out.size(); ++i) {
    joined += Canonical(pieces[i]);
    const std::string_view slice =
        std::string_view(text).substr(out[i].begin, out[i].end - out[i].begin);
    // No span cuts a quote pair.
    EXPECT_NE(slice, "`") << i;
    EXPECT_NE(slice, "'") << i;
    // The piece holding the "e" of "cafe" ends after "é" (bytes 3-4).
    if (out[i].begin <= 3 && out[i].end > 3) EXPECT_EQ(out[i].end, 5u) << i;
  }
  EXPECT_EQ(joined, "cafe\"lemonde\"fine");
  std::mt19937 rng(1);
  EXPECT_EQ(CheckOffsets(*tok_, text, out, pieces, &rng), "");
}

TEST_F(AlbertTokenizerTest, EmptyAndBlankTextsGiveOnlySpecials) {
  for (const char* text : {"", "   ", " \t\u00a0\n"}) {
    auto enc = tok_->Encode(text, NoLimit());
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_THAT(enc->ids, ElementsAre(2, 3)) << Escape(text);
  }
}

TEST_F(AlbertTokenizerTest, InvalidUtf8IsRejectedAsWithoutRules) {
  auto enc = tok_->Encode("ok \xff", NoLimit());
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(enc.status().message(), HasSubstr("invalid UTF-8 at byte 3"));
}

TEST_F(AlbertTokenizerTest, QaWindowOffsetsRecoverContextSubstrings) {
  const std::string context = "The ``Café'' sold 1,000, cups;   ﬁne ΟΔΟΣ Straße.";
  auto windows = tok_->EncodeQuestionContextWindows("  Which CAFÉ?", context, 16, 4);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_GT(windows->size(), 1u);
  for (const Window& w : *windows) {
    uint32_t prev_begin = 0;
    std::optional<ByteSpan> first, last;
    for (const auto& off : w.second_offsets) {
      if (!off) continue;
      EXPECT_LE(off->end, context.size());
      EXPECT_GE(off->begin, prev_begin);
      prev_begin = off->begin;
      if (!first) first = off;
      last = off;
    }
    ASSERT_TRUE(first && last);
    // The window's context slice starts and ends on whole characters.
    const std::string slice = context.substr(first->begin, last->end - first->begin);
    EXPECT_TRUE(ValidateUtf8(slice).ok()) << Escape(slice);
  }
  std::vector<SpmPiece> ctx;
  std::vector<std::string> pieces;
  ASSERT_TRUE(tok_->EncodeRaw(context, &ctx, &pieces).ok());
  std::mt19937 rng(3);
  EXPECT_EQ(CheckOffsets(*tok_, context, ctx, pieces, &rng), "");
  // The first and last tokens span the whole context.
  EXPECT_EQ(context.substr(ctx.front().begin, ctx.back().end - ctx.front().begin), context);
}

TEST(AlbertDigitCommaTest, ResplitPiecesMapToTheirDigitsAndComma) {
  EnsureAlbertOracle();
  const std::string text = "Paid 1,000, then 25,000, and 3, later";
  int fired = 0;
  for (const char* model : kModels) {
    auto tok = Tokenizer::FromDirectory(AlbertOracleDir() + "/" + model, AlbertTextRules());
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::vector<SpmPiece> raw, out;
    std::vector<std::string> raw_pieces, pieces;
    const std::string pre = PreprocessText(text, (*tok)->text_rules()).text;
    ASSERT_TRUE((*tok)->spm().Encode(pre, &raw, &raw_pieces).ok());
    auto digit_comma = [](const std::string& p) {
      return p.size() > 1 && p.back() == ',' &&
             std::isdigit(static_cast<unsigned char>(p[p.size() - 2]));
    };
    for (const std::string& p : raw_pieces) fired += digit_comma(p);
    ASSERT_TRUE((*tok)->EncodeRaw(text, &out, &pieces).ok());
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_FALSE(digit_comma(pieces[i])) << model << " " << pieces[i];
      if (pieces[i] == ",") {
        EXPECT_EQ(text.substr(out[i].begin, out[i].end - out[i].begin), ",") << model << " " << i;
      }
    }
    std::mt19937 rng(5);
    EXPECT_EQ(CheckOffsets(**tok, text, out, pieces, &rng), "") << model;
  }
  EXPECT_GT(fired, 0) << "no model has a digit-comma piece for this text";
}

TEST(AlbertLoadTest, SpieceModelThenSpmModel) {
  EnsureAlbertOracle();
  const std::string model_dir = AlbertOracleDir() + "/albert_u1000";
  // Only spiece.model: found with rules; the one-argument overload (DeBERTa)
  // keeps looking for spm.model.
  auto with_rules = Tokenizer::FromDirectory(model_dir, AlbertTextRules());
  ASSERT_TRUE(with_rules.ok()) << with_rules.status();
  auto without = Tokenizer::FromDirectory(model_dir);
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), absl::StatusCode::kNotFound);
  // Only spm.model: used with rules too.
  const std::string dir = TempDir("spm_only");
  fs::copy_file(model_dir + "/spiece.model", dir + "/spm.model");
  auto spm_only = Tokenizer::FromDirectory(dir, AlbertTextRules());
  ASSERT_TRUE(spm_only.ok()) << spm_only.status();
  EXPECT_TRUE((*spm_only)->text_rules().enabled);
  // Neither.
  auto none = Tokenizer::FromDirectory(TempDir("empty"), AlbertTextRules());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("spiece.model"));
  // Disabled rules behave as the one-argument overload.
  auto disabled = Tokenizer::FromDirectory(dir, TextRules());
  ASSERT_TRUE(disabled.ok()) << disabled.status();
  EXPECT_FALSE((*disabled)->text_rules().enabled);
}

TEST(DebertaPathTest, NoRulesMeansRawSentencePiece) {
  auto tok = Tokenizer::FromDirectory(::dserve::testing::GoldenDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_FALSE((*tok)->text_rules().enabled);
  for (const char* text : {"Café ``x''  Hello", "ΟΔΟΣ 1,000, ﬁ", ""}) {
    std::vector<SpmPiece> a, b;
    std::vector<std::string> pa, pb;
    ASSERT_TRUE((*tok)->EncodeRaw(text, &a, &pa).ok());
    ASSERT_TRUE((*tok)->spm().Encode(text, &b, &pb).ok());
    EXPECT_EQ(pa, pb) << text;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].id, b[i].id);
      EXPECT_EQ(a[i].begin, b[i].begin);
      EXPECT_EQ(a[i].end, b[i].end);
    }
  }
}

}  // namespace
}  // namespace dserve
