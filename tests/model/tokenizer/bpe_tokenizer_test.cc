// GPT-2 byte-level BPE (model/tokenizer/bpe.h) under the Tokenizer's
// DeBERTa v1 layout: Hugging Face's DebertaTokenizer goldens
// (../shared/goldens/deberta_v1/tokenizer/tokens.jsonl), the independent
// Python oracle of gen_bpe_oracle.py (thousands of generated strings,
// vocab.json + merges.txt, tokenizer.json and add_prefix_space), the regex
// classes against the regex module, and the edges: merge rounds, unknown
// bytes, truncation and windows, threads and load errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer/test_util.h"

namespace dserve {
namespace {

using ::dserve::testing::ReadJsonl;
using nlohmann::json;

std::string GoldenTokenizerDir() {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/deberta_v1/tokenizer";
}
std::string BpeOracleDir() { return std::string(DSERVE_BINARY_DIR) + "/tokenizer_bpe_oracle"; }

// The ctest fixture runs gen_bpe_oracle.py first; a binary run by hand
// generates the oracle here when it is missing.
void EnsureBpeOracle() {
  const std::string dir = BpeOracleDir();
  if (std::filesystem::exists(dir + "/DONE")) return;
  const std::string cmd = std::string("/usr/bin/python3 ") + DSERVE_SOURCE_DIR +
                          "/tests/model/tokenizer/gen_bpe_oracle.py " + dir + " --vocab-dir " +
                          GoldenTokenizerDir();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(std::filesystem::exists(dir + "/DONE"));
}

std::unique_ptr<Tokenizer> Load(const std::string& dir) {
  auto tok = Tokenizer::FromDirectory(dir);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

// Encodes a row ({"text", "text_pair"?}) with no length limit and returns
// what the goldens hold: ids, tokens, type ids, code-point offsets (null for
// specials), each token's offsets in its own text.
json EncodeRow(const Tokenizer& tok, const json& row, absl::Status* status) {
  EncodeOptions opt;
  opt.max_length = 0;
  opt.return_pieces = true;
  const std::string text = row.at("text").get<std::string>();
  const bool pair = row.contains("text_pair") && !row.at("text_pair").is_null();
  const std::string text_pair = pair ? row.at("text_pair").get<std::string>() : "";
  absl::StatusOr<Encoding> enc = pair ? tok.EncodePair(text, text_pair, opt) : tok.Encode(text, opt);
  *status = enc.status();
  if (!enc.ok()) return json();
  const CodepointIndex first(text), second(text_pair);
  json offsets = json::array();
  for (size_t i = 0; i < enc->size(); ++i) {
    if (enc->sequence_ids[i] < 0) {
      offsets.push_back(nullptr);
      continue;
    }
    const CodepointIndex& idx = enc->sequence_ids[i] == 0 ? first : second;
    offsets.push_back({idx.ToCodepoint(enc->offsets[i].begin), idx.ToCodepoint(enc->offsets[i].end)});
  }
  return json{{"ids", enc->ids}, {"tokens", enc->pieces}, {"type_ids", enc->type_ids}, {"offsets", offsets}};
}

// Rows whose encoding differs from the file's; logs the first few.
int CountMismatches(const Tokenizer& tok, const std::vector<json>& rows, const std::string& what,
                    bool check_type_ids) {
  int mismatches = 0;
  for (const json& row : rows) {
    absl::Status st;
    const json got = EncodeRow(tok, row, &st);
    bool same = st.ok() && got.at("ids") == row.at("ids") && got.at("tokens") == row.at("tokens") &&
                got.at("offsets") == row.at("offsets");
    if (same && check_type_ids) same = got.at("type_ids") == row.at("token_type_ids");
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << what << ": " << json(row.at("text")).dump()
                    << (row.contains("text_pair") ? " + " + row.at("text_pair").dump() : "")
                    << "\n status " << st << "\n got  " << got.dump() << "\n want "
                    << json{{"ids", row.at("ids")}, {"tokens", row.at("tokens")}, {"offsets", row.at("offsets")}}
                           .dump();
    }
  }
  return mismatches;
}

TEST(BpeGolden, MatchesEveryLine) {
  auto tok = Load(GoldenTokenizerDir());
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->is_bpe());
  const auto rows = ReadJsonl(GoldenTokenizerDir() + "/tokens.jsonl");
  ASSERT_EQ(rows.size(), 300u);
  EXPECT_EQ(CountMismatches(*tok, rows, "golden", /*check_type_ids=*/true), 0);
}

TEST(BpeGolden, SpecialIds) {
  auto tok = Load(GoldenTokenizerDir());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->cls_id(), 1);
  EXPECT_EQ(tok->sep_id(), 2);
  EXPECT_EQ(tok->unk_id(), 3);
  EXPECT_EQ(tok->mask_id(), 8260);
  EXPECT_EQ(tok->vocab_size(), 8261);
  EXPECT_EQ(tok->IdToPiece(8260), "[MASK]");
  EXPECT_EQ(tok->PieceToId("Ġbu"), 8259);
}

class BpeOracle : public ::testing::Test {
 protected:
  void SetUp() override { EnsureBpeOracle(); }
};

TEST_F(BpeOracle, VocabMergesMatchPython) {
  auto tok = Load(BpeOracleDir() + "/plain");
  ASSERT_NE(tok, nullptr);
  const auto rows = ReadJsonl(BpeOracleDir() + "/strings.jsonl");
  ASSERT_GE(rows.size(), 3000u);
  EXPECT_EQ(CountMismatches(*tok, rows, "vocab.json+merges.txt", false), 0);
}

TEST_F(BpeOracle, TokenizerJsonMatchesPython) {
  auto tok = Load(BpeOracleDir() + "/json");  // only tokenizer.json there
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->is_bpe());
  EXPECT_EQ(tok->mask_id(), 8260);
  const auto rows = ReadJsonl(BpeOracleDir() + "/strings.jsonl");
  EXPECT_EQ(CountMismatches(*tok, rows, "tokenizer.json", false), 0);
}

TEST_F(BpeOracle, AddPrefixSpaceMatchesPython) {
  auto tok = Load(BpeOracleDir() + "/prefix");
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->bpe().spec().add_prefix_space);
  const auto rows = ReadJsonl(BpeOracleDir() + "/strings_prefix.jsonl");
  EXPECT_EQ(CountMismatches(*tok, rows, "add_prefix_space", false), 0);
}

TEST_F(BpeOracle, RegexClassesMatchPython) {
  std::ifstream in(BpeOracleDir() + "/regex_classes.json");
  const json doc = json::parse(in);
  EXPECT_EQ(py_unicode::RegexModuleVersion(), doc.at("version").get<std::string>())
      << "regenerate model/tokenizer/py_unicode_tables.inc (gen_unicode_tables.py)";
  std::vector<int> want(0x110000, 0);
  for (const json& r : doc.at("ranges")) {
    for (int c = r.at(0).get<int>(); c <= r.at(1).get<int>(); ++c) want[c] = r.at(2).get<int>();
  }
  int wrong = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const int got = static_cast<int>(py_unicode::RegexClassOf(c));
    if (got != want[c] && ++wrong <= 5) ADD_FAILURE() << "U+" << std::hex << c << " got " << got << " want " << want[c];
  }
  EXPECT_EQ(wrong, 0);
}

TEST_F(BpeOracle, DecodeRoundTrips) {
  auto tok = Load(BpeOracleDir() + "/plain");
  ASSERT_NE(tok, nullptr);
  const BpeModel& bpe = tok->bpe();
  int wrong = 0;
  for (const json& row : ReadJsonl(BpeOracleDir() + "/strings.jsonl")) {
    const auto ids = row.at("ids").get<std::vector<int32_t>>();
    std::string want = "[CLS]" + row.at("text").get<std::string>() + "[SEP]";
    if (row.contains("text_pair")) want += row.at("text_pair").get<std::string>() + "[SEP]";
    const std::string plain = row.at("text").get<std::string>() +
                              (row.contains("text_pair") ? row.at("text_pair").get<std::string>() : "");
    if ((bpe.Decode(ids) != want || bpe.Decode(ids, /*skip_special_tokens=*/true) != plain) && ++wrong <= 5) {
      ADD_FAILURE() << json(bpe.Decode(ids)).dump() << " != " << json(want).dump();
    }
  }
  EXPECT_EQ(wrong, 0);
  // A token holding half a character decodes it to U+FFFD.
  std::vector<SpmPiece> out;
  ASSERT_TRUE(bpe.Encode("\xF0\x9F\x91\x8D", &out).ok());  // U+1F44D, 4 byte tokens here
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(bpe.Decode({out[0].id}), "\xEF\xBF\xBD");
}

TEST_F(BpeOracle, CacheAndThreadsGiveTheSameTokens) {
  auto spec = ReadBpeFiles(BpeOracleDir() + "/plain");
  ASSERT_TRUE(spec.ok()) << spec.status();
  BpeModelSpec uncached_spec = *spec;
  uncached_spec.cache_capacity = 0;
  BpeModelSpec tiny_spec = *spec;
  tiny_spec.cache_capacity = 16;  // shards fill and empty all the time
  auto cached = BpeModel::Create(*spec);
  auto uncached = BpeModel::Create(uncached_spec);
  auto tiny = BpeModel::Create(tiny_spec);
  ASSERT_TRUE(cached.ok() && uncached.ok() && tiny.ok());
  std::vector<std::string> texts;
  for (const json& row : ReadJsonl(BpeOracleDir() + "/strings.jsonl")) texts.push_back(row.at("text"));
  auto encode_all = [&](const BpeModel& m) {
    std::vector<std::vector<int32_t>> all;
    std::vector<SpmPiece> out;
    for (const std::string& t : texts) {
      EXPECT_TRUE(m.Encode(t, &out).ok());
      std::vector<int32_t> row;
      for (const SpmPiece& p : out) row.insert(row.end(), {p.id, static_cast<int32_t>(p.begin), static_cast<int32_t>(p.end)});
      all.push_back(row);
    }
    return all;
  };
  const auto want = encode_all(**uncached);
  EXPECT_EQ(encode_all(**cached), want);
  EXPECT_EQ(encode_all(**cached), want);  // warm cache
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const BpeModel& m = t % 2 ? **tiny : **cached;
      ok[t] = encode_all(m) == want ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

// A long text of words separated by whitespace runs: truncation, which
// tokenizes only a prefix of a long text, and windows must keep exactly the
// tokens of the whole text.
std::string LongText() {
  const char* seps[] = {" ", "  ", "   ", "\t", "\n\n", " \t ", "\u3000 ", "    "};
  std::string s;
  for (int i = 0; s.size() < 20000; ++i) {
    s += (i % 7 == 0 ? "It's" : i % 5 == 0 ? "\xF0\x9F\x91\x8D" : "word");
    s += std::to_string(i % 13);
    s += seps[i % 8];
  }
  return s;
}

TEST_F(BpeOracle, TruncationKeepsTheWholeTextsTokens) {
  auto tok = Load(BpeOracleDir() + "/plain");
  ASSERT_NE(tok, nullptr);
  const std::string text = LongText();
  std::vector<SpmPiece> all;
  ASSERT_TRUE(tok->EncodeRaw(text, &all).ok());
  ASSERT_GT(all.size(), 3000u);
  for (int max_length : {64, 300, 511, 1000, 1500}) {
    EncodeOptions opt;
    opt.max_length = max_length;
    opt.truncation = Truncation::kLongestFirst;
    const uint64_t before = tok->encoded_bytes();
    auto enc = tok->Encode(text, opt);
    ASSERT_TRUE(enc.ok()) << enc.status();
    ASSERT_EQ(enc->size(), static_cast<size_t>(max_length));
    if (max_length <= 300) EXPECT_LT(tok->encoded_bytes() - before, text.size());  // it stopped early
    for (int i = 1; i + 1 < max_length; ++i) {
      ASSERT_EQ(enc->ids[i], all[i - 1].id) << "max_length " << max_length << " token " << i;
      ASSERT_EQ(enc->offsets[i], (ByteSpan{all[i - 1].begin, all[i - 1].end}));
    }
    EXPECT_EQ(enc->ids.front(), tok->cls_id());
    EXPECT_EQ(enc->ids.back(), tok->sep_id());
  }
  {  // truncation off: too long is an error
    EncodeOptions opt;
    opt.max_length = 64;
    EXPECT_EQ(tok->Encode(text, opt).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// Where Gpt2CutIsSafe allows a cut, the prefix's chunks are the whole
// text's chunks before it (what lets truncation encode only a prefix); at
// some ASCII whitespace inside a run they are not, which the rule refuses.
TEST_F(BpeOracle, SafeCutsKeepThePrefixChunks) {
  int safe = 0, unsafe_differs = 0;
  std::vector<uint32_t> whole, prefix;
  auto texts = ReadJsonl(BpeOracleDir() + "/strings.jsonl");
  for (const json& row : texts) {
    const std::string text = row.at("text");
    ASSERT_TRUE(Gpt2PreTokenize(text, &whole).ok());
    for (size_t pos = 1; pos < text.size(); ++pos) {
      const char c = text[pos];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') continue;
      ASSERT_TRUE(Gpt2PreTokenize(std::string_view(text).substr(0, pos), &prefix).ok());
      std::vector<uint32_t> want;
      for (uint32_t b : whole) {
        if (b <= pos) want.push_back(b);
      }
      const bool same = prefix == want && want.back() == pos;
      if (Gpt2CutIsSafe(text, pos)) {
        ++safe;
        ASSERT_TRUE(same) << json(text).dump() << " cut at " << pos;
      } else if (!same) {
        ++unsafe_differs;
      }
    }
  }
  EXPECT_GT(safe, 1000);
  EXPECT_GT(unsafe_differs, 10);
}

TEST_F(BpeOracle, WindowsCoverTheSecondText) {
  auto tok = Load(BpeOracleDir() + "/plain");
  ASSERT_NE(tok, nullptr);
  const std::string question = "What's  the\tword?";
  const std::string context = LongText().substr(0, 3000);
  std::vector<SpmPiece> q, c;
  ASSERT_TRUE(tok->EncodeRaw(question, &q).ok());
  ASSERT_TRUE(tok->EncodeRaw(context, &c).ok());
  auto windows = tok->EncodePairWindows(question, context, 128, 32);
  ASSERT_TRUE(windows.ok()) << windows.status();
  const int room = 128 - 3 - static_cast<int>(q.size());
  EXPECT_EQ(static_cast<int64_t>(windows->size()), CountWindows(c.size(), room, 32));
  for (size_t k = 0; k < windows->size(); ++k) {
    const Window& w = (*windows)[k];
    EXPECT_EQ(w.second_token_begin, static_cast<int>(k) * (room - 32));
    ASSERT_EQ(w.ids.size(), q.size() + 3 + (w.second_token_end - w.second_token_begin));
    EXPECT_EQ(w.ids[0], tok->cls_id());
    for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(w.ids[1 + i], q[i].id);
    for (int t = w.second_token_begin; t < w.second_token_end; ++t) {
      const size_t at = q.size() + 2 + (t - w.second_token_begin);
      ASSERT_EQ(w.ids[at], c[t].id);
      ASSERT_TRUE(w.second_offsets[at].has_value());
      EXPECT_EQ(*w.second_offsets[at], (ByteSpan{c[t].begin, c[t].end}));
      EXPECT_EQ(w.type_ids[at], 1);
    }
  }
  EXPECT_EQ(windows->back().second_token_end, static_cast<int>(c.size()));
}

// ---------------------------------------------------------------------------
// Hand-made models.

BpeModelSpec TinySpec(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges) {
  BpeModelSpec spec;
  const std::vector<std::string> specials = {"[PAD]", "[CLS]", "[SEP]", "[UNK]"};
  int id = 0;
  for (const auto& s : specials) spec.vocab.emplace_back(s, id++);
  for (const auto& t : tokens) spec.vocab.emplace_back(t, id++);
  spec.mask_token.clear();
  spec.merges = std::move(merges);
  return spec;
}

std::vector<std::string> Pieces(const BpeModel& m, std::string_view text) {
  std::vector<SpmPiece> out;
  std::vector<std::string> pieces;
  EXPECT_TRUE(m.Encode(text, &out, &pieces).ok());
  return pieces;
}

TEST(BpeModelTest, MergesAllOccurrencesOfOnePairPerRound) {
  // GPT-2's loop on "pqrpqr": round "q r" gives p qr p qr; the lowest pair
  // present is then "p qr" (rank 2; "pqr p" needs a pqr first), merged at
  // both places in one round: pqr pqr. "pqr p" (rank 1) would have taken
  // the second p had merges been applied one at a time.
  auto m = BpeModel::Create(
      TinySpec({"p", "q", "r", "qr", "pqr", "pqrp"}, {{"q", "r"}, {"pqr", "p"}, {"p", "qr"}}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Pieces(**m, "pqrpqr"), (std::vector<std::string>{"pqr", "pqr"}));
  // The same on a word long enough for the heap path (> kShortWordBytes).
  std::string long_word;
  for (int i = 0; i < 30; ++i) long_word += "pqr";
  ASSERT_GT(long_word.size(), BpeModel::kShortWordBytes);
  EXPECT_EQ(Pieces(**m, long_word), std::vector<std::string>(30, "pqr"));
  // Overlapping occurrences merge left to right.
  auto a = BpeModel::Create(TinySpec({"a", "aa"}, {{"a", "a"}}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Pieces(**a, "aaaaa"), (std::vector<std::string>{"aa", "aa", "a"}));
  std::vector<std::string> want(40, "aa");
  want.push_back("a");
  EXPECT_EQ(Pieces(**a, std::string(81, 'a')), want);
}

TEST(BpeModelTest, UnknownBytes) {
  auto m = BpeModel::Create(TinySpec({"a", "b", "ab"}, {{"a", "b"}}));
  ASSERT_TRUE(m.ok());
  std::vector<SpmPiece> out;
  ASSERT_TRUE((*m)->Encode("abcab", &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].id, (*m)->unk_id());
  EXPECT_EQ(out[1].begin, 2u);
  EXPECT_EQ(out[1].end, 3u);
  // Two bytes of one character: two unknown tokens, each with the character's span...
  ASSERT_TRUE((*m)->Encode("a\xC3\xA9", &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].begin, 1u);
  EXPECT_EQ(out[2].end, 3u);
  // ...or one with fuse_unk.
  BpeModelSpec fuse = TinySpec({"a", "b", "ab"}, {{"a", "b"}});
  fuse.fuse_unk = true;
  auto f = BpeModel::Create(fuse);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Encode("a\xC3\xA9", &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].id, (*f)->unk_id());
  EXPECT_EQ(out[1].begin, 1u);
  EXPECT_EQ(out[1].end, 3u);
  // Without an unknown token: an error naming the byte.
  BpeModelSpec no_unk = TinySpec({"a"}, {});
  no_unk.unk_token.clear();
  no_unk.vocab.erase(no_unk.vocab.begin() + 3);
  auto n = BpeModel::Create(no_unk);
  ASSERT_TRUE(n.ok()) << n.status();
  const absl::Status st = (*n)->Encode("ax", &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("0x78"), std::string::npos) << st;
}

TEST(BpeModelTest, InvalidUtf8IsRefused) {
  auto m = BpeModel::Create(TinySpec({"a"}, {}));
  ASSERT_TRUE(m.ok());
  std::vector<SpmPiece> out;
  const absl::Status st = (*m)->Encode("aa\xFF", &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("byte 2"), std::string::npos) << st;
}

TEST(ByteLevelTest, AlphabetIsABijection) {
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(ByteToUnicode(' '), U'\u0120');
  EXPECT_EQ(ByteToUnicode('\n'), U'\u010A');
  EXPECT_EQ(UnicodeToByte(U'\u0144'), -1);
}

TEST(ByteLevelTest, PreTokenizerChunks) {
  auto chunks = [](std::string_view text) {
    std::vector<uint32_t> b;
    EXPECT_TRUE(Gpt2PreTokenize(text, &b).ok());
    std::vector<std::string> out;
    for (size_t i = 0; i + 1 < b.size(); ++i) out.emplace_back(text.substr(b[i], b[i + 1] - b[i]));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(chunks("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(chunks("x\t\ny"), (V{"x", "\t", "\n", "y"}));
  EXPECT_EQ(chunks("it's IT'S"), (V{"it", "'s", " IT", "'", "S"}));
  EXPECT_EQ(chunks(" 's"), (V{" '", "s"}));
  EXPECT_EQ(chunks("end  "), (V{"end", "  "}));
  EXPECT_EQ(chunks(""), V{});
}

// ---------------------------------------------------------------------------
// Load errors name the file and the problem.

class BpeFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("bpe_files_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  absl::Status LoadStatus() { return Tokenizer::FromBpeDirectory(dir_.string()).status(); }
  std::filesystem::path dir_;
};

const char kVocab[] = R"({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "a": 4, "b": 5, "ab": 6, "[MASK]": 7})";

TEST_F(BpeFilesTest, LoadsAGoodPair) {
  Write("vocab.json", kVocab);
  Write("merges.txt", "#version: 0.2\na b\n");
  auto tok = Tokenizer::FromDirectory(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<SpmPiece> out;
  ASSERT_TRUE((*tok)->EncodeRaw("abab", &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 6);
}

TEST_F(BpeFilesTest, MissingVocab) {
  Write("merges.txt", "#version: 0.2\na b\n");
  const absl::Status st = LoadStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("vocab.json"), std::string::npos) << st;
}

TEST_F(BpeFilesTest, MissingMerges) {
  Write("vocab.json", kVocab);
  const absl::Status st = LoadStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("merges.txt"), std::string::npos) << st;
}

TEST_F(BpeFilesTest, CorruptVocab) {
  Write("vocab.json", R"({"a": 4, "b": )");
  Write("merges.txt", "a b\n");
  absl::Status st = LoadStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vocab.json: not valid JSON"), std::string::npos) << st;
  Write("vocab.json", R"({"a": "four"})");
  st = LoadStatus();
  EXPECT_NE(st.message().find("the id of 'a' is not an integer"), std::string::npos) << st;
  Write("vocab.json", R"({"a": 4, "b": 4})");
  st = LoadStatus();
  EXPECT_NE(st.message().find("id 4 is given to both"), std::string::npos) << st;
}

TEST_F(BpeFilesTest, MergeWithAnUnknownToken) {
  Write("vocab.json", kVocab);
  Write("merges.txt", "#version: 0.2\na b\nab c\n");
  absl::Status st = LoadStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("merges.txt: merge 2 'ab c' needs token 'c'"), std::string::npos) << st;
  Write("merges.txt", "#version: 0.2\nb a\n");  // result "ba" missing
  st = LoadStatus();
  EXPECT_NE(st.message().find("needs token 'ba'"), std::string::npos) << st;
}

TEST_F(BpeFilesTest, MalformedMergesLine) {
  Write("vocab.json", kVocab);
  Write("merges.txt", "#version: 0.2\na b\nab\n");
  const absl::Status st = LoadStatus();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("merges.txt line 3"), std::string::npos) << st;
}

TEST_F(BpeFilesTest, ConfigSetsPrefixSpaceAndSpecials) {
  Write("vocab.json", R"({"<s>": 0, "</s>": 1, "<unk>": 2, "a": 3, "\u0120": 4, "\u0120a": 5})");
  Write("merges.txt", "\u0120 a\n");  // no header: the first line is a merge
  Write("tokenizer_config.json",
        R"({"add_prefix_space": true, "cls_token": {"content": "<s>"}, "sep_token": "</s>", "unk_token": "<unk>",
            "pad_token": null, "mask_token": null})");
  auto tok = Tokenizer::FromBpeDirectory(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->cls_id(), 0);
  EXPECT_EQ((*tok)->sep_id(), 1);
  EXPECT_EQ((*tok)->unk_id(), 2);
  EXPECT_EQ((*tok)->mask_id(), 6);  // none: added after the vocabulary
  std::vector<SpmPiece> out;
  ASSERT_TRUE((*tok)->EncodeRaw("a", &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, 5);  // "Ġa" with the added space
  EXPECT_EQ(out[0].begin, 0u);
  EXPECT_EQ(out[0].end, 1u);
  Write("tokenizer_config.json", R"({"add_prefix_space": "yes"})");
  EXPECT_NE(LoadStatus().message().find("tokenizer_config.json: add_prefix_space"), std::string::npos);
}

TEST_F(BpeFilesTest, TokenizerJsonErrors) {
  Write("tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Whitespace"}})");
  absl::Status st = Tokenizer::FromTokenizerJsonFile((dir_ / "tokenizer.json").string()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("pre_tokenizer Whitespace"), std::string::npos) << st;
  Write("tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"[CLS]": 0, "[SEP]": 1, "a": 2}, "merges": ["a a"]},
            "pre_tokenizer": {"type": "ByteLevel"}})");
  st = Tokenizer::FromTokenizerJsonFile((dir_ / "tokenizer.json").string()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tokenizer.json (model.merges): merge 1 'a a' needs token 'aa'"), std::string::npos)
      << st;
  Write("tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "continuing_subword_prefix": "##"},
            "pre_tokenizer": {"type": "ByteLevel"}})");
  st = Tokenizer::FromTokenizerJsonFile((dir_ / "tokenizer.json").string()).status();
  EXPECT_NE(st.message().find("continuing_subword_prefix"), std::string::npos) << st;
}

}  // namespace
}  // namespace dserve
