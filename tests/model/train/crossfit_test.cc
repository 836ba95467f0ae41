// Issue 18, defect 7: the answer model's checkpoint is chosen by an F1 whose
// no-answer threshold was tuned on the other half of the eval set
// (CrossFitThreshold), not on the questions it scores.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/train/evaluate.h"

namespace dserve {
namespace {

// Two question ids of each fold.
std::vector<std::string> IdsOfFold(int fold, size_t n) {
  std::vector<std::string> ids;
  for (int i = 0; ids.size() < n; ++i) {
    const std::string id = absl::StrCat("q", i);
    if (FoldOf(id) == fold) ids.push_back(id);
  }
  return ids;
}

TEST(CrossFitThreshold, EachFoldIsAnsweredWithTheOtherFoldsThreshold) {
  // Fold 0: the answerable question scores na -1 (its span right), the
  // unanswerable +1; tuned alone it takes threshold -1 and is perfect.
  // Fold 1: answerable +2, unanswerable +3: its own threshold is 2.
  // Cross-fitted: fold 0 with threshold 2 answers both (the unanswerable
  // one wrongly); fold 1 with threshold -1 answers neither (the answerable
  // one wrongly): F1 50, where fitting each fold to itself gives 100.
  const auto f0 = IdsOfFold(0, 2), f1 = IdsOfFold(1, 2);
  std::vector<SquadGold> gold = {{f0[0], {"the mill"}}, {f0[1], {}}, {f1[0], {"at six"}}, {f1[1], {}}};
  std::map<std::string, std::string> spans = {
      {f0[0], "the mill"}, {f0[1], "the river"}, {f1[0], "at six"}, {f1[1], "at seven"}};
  std::map<std::string, double> na = {{f0[0], -1.0}, {f0[1], 1.0}, {f1[0], 2.0}, {f1[1], 3.0}};
  const CrossFit cross = CrossFitThreshold(gold, spans, na);
  EXPECT_DOUBLE_EQ(cross.thresholds[0], -1.0);
  EXPECT_DOUBLE_EQ(cross.thresholds[1], 2.0);
  EXPECT_DOUBLE_EQ(cross.f1, 50.0);
  EXPECT_DOUBLE_EQ(cross.exact, 50.0);
  // In-sample, one threshold over everything: 3 of 4 right at threshold 2.
  EXPECT_DOUBLE_EQ(ChooseNullThreshold(gold, spans, na).second, 75.0);
}

TEST(CrossFitThreshold, OneFoldAloneUsesItsOwnThreshold) {
  const auto f0 = IdsOfFold(0, 2);
  std::vector<SquadGold> gold = {{f0[0], {"the mill"}}, {f0[1], {}}};
  std::map<std::string, std::string> spans = {{f0[0], "the mill"}, {f0[1], "the river"}};
  std::map<std::string, double> na = {{f0[0], -1.0}, {f0[1], 1.0}};
  const CrossFit cross = CrossFitThreshold(gold, spans, na);
  EXPECT_DOUBLE_EQ(cross.f1, 100.0);
  EXPECT_DOUBLE_EQ(cross.thresholds[0], -1.0);
}

TEST(CrossFitThreshold, FoldsAreAStableHashOfTheId) {
  // FNV-1a of the id's bytes, low bit: fixed for every machine and run.
  EXPECT_EQ(FoldOf(""), 1);   // 2166136261 is odd
  EXPECT_EQ(FoldOf("a"), 0);  // (2166136261 ^ 97) * 16777619 mod 2^32 = 0xe40c292c
  int ones = 0;
  for (int i = 0; i < 1000; ++i) ones += FoldOf(absl::StrCat("q", i));
  EXPECT_GT(ones, 400);
  EXPECT_LT(ones, 600);
}

}  // namespace
}  // namespace dserve
