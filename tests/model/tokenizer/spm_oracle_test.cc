// Compares our SentencePiece encoding with libsentencepiece (Debian's
// python3-sentencepiece) on >= 5,000 generated strings for every model that
// gen_spm_oracle.py trains with spm_train, and on the shared goldens.
// Agreement must be 100%: ids, pieces and byte offsets.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/tokenizer/spm_processor.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer/test_util.h"

namespace dserve {
namespace {

using ::dserve::testing::EnsureOracle;
using ::dserve::testing::OracleDir;
using ::dserve::testing::ReadJsonl;

std::string Escape(const std::string& s) { return nlohmann::json(s).dump(); }

// Returns the number of strings whose encoding differs; logs the first few.
int CountMismatches(const Tokenizer& tok, const std::vector<std::string>& strings,
                    const std::vector<nlohmann::json>& oracle, const std::string& model) {
  EXPECT_EQ(strings.size(), oracle.size());
  int mismatches = 0;
  std::vector<SpmPiece> out;
  std::vector<std::string> pieces;
  for (size_t i = 0; i < strings.size() && i < oracle.size(); ++i) {
    const absl::Status st = tok.EncodeRaw(strings[i], &out, &pieces);
    std::vector<int> ids;
    std::vector<std::vector<uint32_t>> offsets;
    for (const SpmPiece& p : out) {
      ids.push_back(p.id);
      offsets.push_back({p.begin, p.end});
    }
    const auto want_ids = oracle[i].at("ids").get<std::vector<int>>();
    const auto want_pieces = oracle[i].at("pieces").get<std::vector<std::string>>();
    const auto want_offsets = oracle[i].at("offsets").get<std::vector<std::vector<uint32_t>>>();
    if (!st.ok() || ids != want_ids || pieces != want_pieces || offsets != want_offsets) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << model << " string " << i << " " << Escape(strings[i]) << "\n status "
                      << st << "\n got    " << nlohmann::json(pieces).dump() << " "
                      << nlohmann::json(ids).dump() << " " << nlohmann::json(offsets).dump()
                      << "\n want   " << nlohmann::json(want_pieces).dump() << " "
                      << nlohmann::json(want_ids).dump() << " "
                      << nlohmann::json(want_offsets).dump();
      }
    }
  }
  return mismatches;
}

class SpmOracleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { EnsureOracle(); }
};

TEST_P(SpmOracleTest, MatchesLibSentencePieceOnGeneratedStrings) {
  const std::string model = GetParam();
  const std::string dir = OracleDir() + "/" + model;
  auto tok = Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto strings = ::dserve::testing::OracleStrings();
  ASSERT_GE(strings.size(), 5000u);
  const auto oracle = ReadJsonl(dir + "/oracle.jsonl");
  const int mismatches = CountMismatches(**tok, strings, oracle, model);
  std::printf("[oracle] %s: %zu strings, %d mismatches\n", model.c_str(), strings.size(),
              mismatches);
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(TrainedModels, SpmOracleTest,
                         ::testing::Values("nmt_nfkc", "identity_ws", "bytefb_cf_digits",
                                           "user_symbols", "ws_suffix", "nfkc_noprefix",
                                           "big_vocab"));

TEST(SpmOracleSetTest, GeneratedSetIsComplete) {
  EnsureOracle();
  EXPECT_EQ(::dserve::testing::OracleModels().size(), 7u);
  EXPECT_GE(::dserve::testing::OracleStrings().size(), 5000u);
}

// The nmt_nfkc model re-expressed as a Hugging Face tokenizer.json (the
// DebertaV2Converter layout, no spm.model in the directory) must encode the
// same way.
TEST(HfTokenizerJsonTest, MatchesSpmOracle) {
  EnsureOracle();
  const std::string dir = OracleDir() + "/nmt_nfkc_hf";
  auto tok = Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto strings = ::dserve::testing::OracleStrings();
  const auto oracle = ReadJsonl(OracleDir() + "/nmt_nfkc/oracle.jsonl");
  EXPECT_EQ(CountMismatches(**tok, strings, oracle, "nmt_nfkc_hf"), 0);
  // [MASK] comes from added_tokens at id = vocab size, as in DeBERTa-v3.
  auto spm_tok = Tokenizer::FromDirectory(OracleDir() + "/nmt_nfkc");
  ASSERT_TRUE(spm_tok.ok());
  EXPECT_EQ((*tok)->mask_id(), (*spm_tok)->mask_id());
  EXPECT_EQ((*tok)->PieceToId("[MASK]"), (*spm_tok)->spm().piece_size());
  EXPECT_EQ((*tok)->cls_id(), 1);
  EXPECT_EQ((*tok)->sep_id(), 2);
}

TEST(GoldenTest, MatchesSharedGolden) {
  const auto golden = nlohmann::json::parse(
      std::ifstream(::dserve::testing::GoldenDir() + "/spm_golden.json"));
  auto tok = Tokenizer::FromSpmFile(::dserve::testing::GoldenDir() + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.spm().piece_size(), golden.at("piece_size").get<int>());
  const auto& special = golden.at("special_ids");
  EXPECT_EQ(t.pad_id(), special.at("[PAD]").get<int>());
  EXPECT_EQ(t.cls_id(), special.at("[CLS]").get<int>());
  EXPECT_EQ(t.sep_id(), special.at("[SEP]").get<int>());
  EXPECT_EQ(t.unk_id(), special.at("[UNK]").get<int>());
  EXPECT_EQ(t.mask_id(), special.at("[MASK]_if_added_like_deberta_v3").get<int>());
  EXPECT_EQ(t.vocab_size(), t.spm().piece_size() + 1);
  const auto vocab = golden.at("vocab").get<std::vector<std::string>>();
  for (size_t i = 0; i < vocab.size(); ++i) {
    EXPECT_EQ(t.IdToPiece(static_cast<int>(i)), vocab[i]);
    EXPECT_EQ(t.PieceToId(vocab[i]), static_cast<int>(i));
  }
  EXPECT_EQ(t.IdToPiece(t.mask_id()), "[MASK]");
  EXPECT_EQ(t.PieceToId("[MASK]"), t.mask_id());

  const auto& samples = golden.at("samples");
  ASSERT_GE(samples.size(), 20u);
  int checked = 0;
  for (const auto& s : samples) {
    const std::string text = s.at("text").get<std::string>();
    std::vector<SpmPiece> out;
    std::vector<std::string> pieces;
    ASSERT_TRUE(t.EncodeRaw(text, &out, &pieces).ok());
    EXPECT_EQ(pieces, s.at("pieces").get<std::vector<std::string>>()) << Escape(text);
    const auto& spans = s.at("spans");
    ASSERT_EQ(out.size(), spans.size()) << Escape(text);
    std::vector<int> ids;
    for (size_t i = 0; i < out.size(); ++i) {
      ids.push_back(out[i].id);
      EXPECT_EQ(out[i].begin, spans[i].at("begin_byte").get<uint32_t>()) << Escape(text) << " " << i;
      EXPECT_EQ(out[i].end, spans[i].at("end_byte").get<uint32_t>()) << Escape(text) << " " << i;
      // Code-point offsets, as the gRPC API reports them.
      CodepointIndex cpi(text);
      EXPECT_EQ(cpi.ToCodepoint(out[i].begin), spans[i].at("begin_char").get<uint32_t>());
      EXPECT_EQ(cpi.ToCodepoint(out[i].end), spans[i].at("end_char").get<uint32_t>());
    }
    EXPECT_EQ(ids, s.at("ids").get<std::vector<int>>()) << Escape(text);
    EncodeOptions opts;
    opts.max_length = 0;
    auto enc = t.Encode(text, opts);
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->ids, s.at("deberta_input_ids").get<std::vector<int32_t>>()) << Escape(text);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(samples.size()));
}

}  // namespace
}  // namespace dserve
