// Scorers against hand-computed values.
#include "model/train/metrics.h"

#include <cmath>

#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(SquadNormalize, OfficialSteps) {
  EXPECT_EQ(NormalizeAnswer("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(NormalizeAnswer("an apple a day"), "apple day");
  EXPECT_EQ(NormalizeAnswer("theater"), "theater");
  EXPECT_EQ(NormalizeAnswer("A.B.C."), "abc");        // punctuation first, then articles
  EXPECT_EQ(NormalizeAnswer("the-end"), "theend");
  EXPECT_EQ(NormalizeAnswer("  \t\n "), "");
  EXPECT_EQ(NormalizeAnswer("THE"), "");
  EXPECT_EQ(NormalizeAnswer("\xC3\x89lan vital"), "\xC3\xA9lan vital");  // Élan -> élan
  EXPECT_EQ(NormalizeAnswer("caf\xC3\xA9 a"), "caf\xC3\xA9");            // é is a word character
  EXPECT_EQ(NormalizeAnswer("\xE2\x80\x94the\xE2\x80\x94"), "\xE2\x80\x94 \xE2\x80\x94");  // em dash is not
}

TEST(SquadScores, TokenF1AndExact) {
  EXPECT_NEAR(TokenF1("the cat sat", "cat sat on mat"), 2.0 / 3.0, 1e-12);
  EXPECT_EQ(TokenF1("", ""), 1.0);
  EXPECT_EQ(TokenF1("", "x"), 0.0);
  EXPECT_EQ(TokenF1("x", ""), 0.0);
  EXPECT_EQ(TokenF1("a b", "c d"), 0.0);
  // Multiset intersection: "x x y" vs "x y y" -> common 2, P = R = 2/3.
  EXPECT_NEAR(TokenF1("x x y", "x y y"), 2.0 / 3.0, 1e-12);
  EXPECT_EQ(ExactMatch("The Cat.", "cat"), 1);
  EXPECT_EQ(ExactMatch("cats", "cat"), 0);
}

std::vector<SquadGold> Gold() {
  return {{"q1", {"cat sat on mat"}}, {"q2", {}}, {"q3", {"red", "Blue!"}}, {"q4", {"Paris"}}};
}
std::map<std::string, std::string> Preds() {
  return {{"q1", "the cat sat"}, {"q2", ""}, {"q3", "blue"}, {"q4", ""}};
}

TEST(SquadScores, HandComputed) {
  SquadScores s = ScoreSquadV2(Gold(), Preds());
  EXPECT_EQ(s.total, 4);
  EXPECT_NEAR(s.exact, 50.0, 1e-9);
  EXPECT_NEAR(s.f1, 100.0 * (2.0 / 3 + 1 + 1 + 0) / 4, 1e-9);
  EXPECT_EQ(s.has_ans_total, 3);
  EXPECT_NEAR(s.has_ans_exact, 100.0 / 3, 1e-9);
  EXPECT_NEAR(s.has_ans_f1, 100.0 * (2.0 / 3 + 1) / 3, 1e-9);
  EXPECT_EQ(s.no_ans_total, 1);
  EXPECT_NEAR(s.no_ans_exact, 100.0, 1e-9);
  EXPECT_NEAR(s.no_ans_f1, 100.0, 1e-9);
  EXPECT_FALSE(s.best_f1.has_value());
  auto j = s.ToJson();
  for (const char* k : {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
                        "NoAns_total"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
}

TEST(SquadScores, GoldThatNormalisesToEmptyMeansNoAnswer) {
  // Official: golds normalising to "" are dropped; none left -> [""].
  std::vector<SquadGold> gold = {{"q", {"the", "!"}}};
  EXPECT_NEAR(ScoreSquadV2(gold, {{"q", ""}}).exact, 100.0, 1e-9);
  EXPECT_NEAR(ScoreSquadV2(gold, {{"q", "x"}}).f1, 0.0, 1e-9);
  // Still counted as HasAns (the raw list is non-empty).
  EXPECT_EQ(ScoreSquadV2(gold, {{"q", ""}}).has_ans_total, 1);
}

TEST(SquadScores, MissingPredictionIsSkipped) {
  SquadScores s = ScoreSquadV2(Gold(), {{"q3", "red"}});
  EXPECT_EQ(s.total, 1);
  EXPECT_NEAR(s.exact, 100.0, 1e-9);
}

TEST(SquadScores, FindBestThreshOfficial) {
  std::map<std::string, double> na = {{"q1", 0.1}, {"q2", 0.9}, {"q3", -0.5}, {"q4", 0.3}};
  SquadScores s = ScoreSquadV2(Gold(), Preds(), &na);
  ASSERT_TRUE(s.best_f1.has_value());
  EXPECT_NEAR(*s.best_f1, 100.0 * (1 + 1 + 2.0 / 3) / 4, 1e-9);
  EXPECT_NEAR(*s.best_f1_thresh, 0.1, 1e-12);
  EXPECT_NEAR(*s.best_exact, 50.0, 1e-9);
  EXPECT_NEAR(*s.best_exact_thresh, -0.5, 1e-12);
}

TEST(SquadScores, ChooseNullThreshold) {
  std::map<std::string, double> na = {{"q1", 0.1}, {"q2", 0.9}, {"q3", -0.5}, {"q4", 0.3}};
  auto [t, f1] = ChooseNullThreshold(Gold(), Preds(), na);
  EXPECT_NEAR(t, 0.1, 1e-12);
  EXPECT_NEAR(f1, 100.0 * (1 + 1 + 2.0 / 3) / 4, 1e-9);
  // Answering nothing is best: the threshold lies below every score.
  std::vector<SquadGold> gold = {{"a", {"x"}}, {"b", {}}};
  auto [t2, f2] = ChooseNullThreshold(gold, {{"a", "y"}, {"b", "z"}}, {{"a", 1.0}, {"b", 2.0}});
  EXPECT_LT(t2, 1.0);
  EXPECT_NEAR(f2, 50.0, 1e-9);
  // Tied scores are answered together (+1 and -1 cancel): not worth answering.
  std::vector<SquadGold> tie = {{"a", {"x"}}, {"b", {}}};
  auto [t3, f3] = ChooseNullThreshold(tie, {{"a", "x"}, {"b", "z"}}, {{"a", 0.5}, {"b", 0.5}});
  EXPECT_LT(t3, 0.5);
  EXPECT_NEAR(f3, 50.0, 1e-9);
}

TEST(Classification, MacroF1HandComputed) {
  auto s = ScoreClassification({{"a"}, {"a"}, {"b"}, {"c"}}, {{"a"}, {"b"}, {"b"}, {"c"}});
  EXPECT_NEAR(s.accuracy, 0.75, 1e-12);
  EXPECT_NEAR(s.per_label["a"].precision, 1.0, 1e-12);
  EXPECT_NEAR(s.per_label["a"].recall, 0.5, 1e-12);
  EXPECT_NEAR(s.per_label["b"].precision, 0.5, 1e-12);
  EXPECT_NEAR(s.per_label["b"].recall, 1.0, 1e-12);
  EXPECT_EQ(s.per_label["a"].support, 2);
  EXPECT_NEAR(s.macro_f1, (2.0 / 3 + 2.0 / 3 + 1.0) / 3, 1e-12);
}

TEST(Classification, PredictedOnlyLabelCountsInMacro) {
  auto s = ScoreClassification({{"a"}, {"a"}}, {{"a"}, {"d"}});
  EXPECT_NEAR(s.per_label["a"].f1, 2.0 / 3, 1e-12);  // P 1, R 0.5
  EXPECT_EQ(s.per_label["d"].support, 0);
  EXPECT_NEAR(s.macro_f1, (2.0 / 3 + 0.0) / 2, 1e-12);
}

TEST(Classification, MultiLabelSubsetAccuracy) {
  auto s = ScoreClassification({{"x", "y"}, {"y"}}, {{"y", "x"}, {"x", "y"}});
  EXPECT_NEAR(s.accuracy, 0.5, 1e-12);
  EXPECT_NEAR(s.per_label["x"].precision, 0.5, 1e-12);
  EXPECT_NEAR(s.per_label["y"].recall, 1.0, 1e-12);
}

TEST(Ranking, HandComputed) {
  std::vector<std::vector<std::pair<double, int>>> groups = {
      {{0.9, 0}, {0.8, 1}, {0.1, 1}},
      {{0.5, 1}, {0.4, 0}},
      {{0.3, 0}},  // no relevant passage: skipped
  };
  RankingScores s = ScoreRanking(groups);
  EXPECT_EQ(s.queries, 2);
  EXPECT_EQ(s.queries_without_relevant, 1);
  EXPECT_NEAR(s.mrr_at_10, (0.5 + 1.0) / 2, 1e-12);
  const double ndcg1 = (1 / std::log2(3.0) + 1 / std::log2(4.0)) / (1 + 1 / std::log2(3.0));
  EXPECT_NEAR(s.ndcg_at_10, (ndcg1 + 1.0) / 2, 1e-12);
  EXPECT_NEAR(s.map, ((0.5 + 2.0 / 3) / 2 + 1.0) / 2, 1e-12);
  EXPECT_TRUE(s.ToJson().contains("mrr@10"));
}

TEST(Ranking, CutoffAtTenAndTies) {
  std::vector<std::pair<double, int>> q;
  for (int i = 0; i < 10; ++i) q.emplace_back(1.0 - i * 0.01, 0);
  q.emplace_back(0.0, 1);
  RankingScores s = ScoreRanking({q});
  EXPECT_EQ(s.mrr_at_10, 0.0);
  EXPECT_EQ(s.ndcg_at_10, 0.0);
  EXPECT_NEAR(s.map, 1.0 / 11, 1e-12);
  // Equal scores keep input order: the relevant second passage ranks 2nd.
  RankingScores t = ScoreRanking({{{0.5, 0}, {0.5, 1}}});
  EXPECT_NEAR(t.mrr_at_10, 0.5, 1e-12);
}

TEST(Percentile, NearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile({5}, 99), 5);
  EXPECT_EQ(Percentile({}, 50), 0);
}

}  // namespace
}  // namespace dserve
