// --dtype auto (issue 27): the decision from timings and argmax agreement,
// the warning for an explicit bf16, and the argmax comparison of head
// outputs. Pure logic; no model is loaded.
#include "server/dtype_choice.h"

#include <gtest/gtest.h>

namespace dserve {
namespace {

DtypeProbe Probe(double fp32_s, double bf16_s, int compared = 8, int disagreed = 0) {
  DtypeProbe p;
  p.rows = 8;
  p.length = 128;
  p.threads = 1;
  p.rounds = 3;
  p.fp32_s = fp32_s;
  p.bf16_s = bf16_s;
  p.compared = compared;
  p.disagreed = disagreed;
  return p;
}

TEST(ChooseAutoDtype, FasterBf16ThatKeepsArgmaxWins) {
  const DtypeProbe p = Probe(1.0, 0.58);  // AMD EPYC with avx512_bf16: 1.71x
  EXPECT_EQ(ChooseAutoDtype(true, &p).dtype, "bf16");
}

TEST(ChooseAutoDtype, SlowerBf16LosesAsOnTheIntelXeon) {
  const DtypeProbe p = Probe(1.232, 1.585);  // issue 27: 0.78x
  const DtypeChoice c = ChooseAutoDtype(true, &p);
  EXPECT_EQ(c.dtype, "fp32");
  EXPECT_NE(c.reason.find("not faster"), std::string::npos) << c.reason;
}

TEST(ChooseAutoDtype, NearTiesGoToFp32) {
  const DtypeProbe slightly = Probe(1.0, 1.0 / 1.04);  // 4% faster: within the margin
  EXPECT_EQ(ChooseAutoDtype(true, &slightly).dtype, "fp32");
  const DtypeProbe equal = Probe(1.0, 1.0);
  EXPECT_EQ(ChooseAutoDtype(true, &equal).dtype, "fp32");
  const DtypeProbe enough = Probe(1.0, 1.0 / 1.06);
  EXPECT_EQ(ChooseAutoDtype(true, &enough).dtype, "bf16");
}

TEST(ChooseAutoDtype, ChangedArgmaxKeepsFp32HoweverFast) {
  const DtypeProbe p = Probe(1.0, 0.3, /*compared=*/8, /*disagreed=*/1);
  const DtypeChoice c = ChooseAutoDtype(true, &p);
  EXPECT_EQ(c.dtype, "fp32");
  EXPECT_NE(c.reason.find("1 of 8"), std::string::npos) << c.reason;
  const DtypeProbe none = Probe(1.0, 0.3, /*compared=*/0, /*disagreed=*/0);
  EXPECT_EQ(ChooseAutoDtype(true, &none).dtype, "fp32");
}

TEST(ChooseAutoDtype, NotOfferedOrNotMeasuredIsFp32) {
  const DtypeProbe p = Probe(1.0, 0.5);
  EXPECT_EQ(ChooseAutoDtype(false, &p).dtype, "fp32");
  EXPECT_EQ(ChooseAutoDtype(true, nullptr).dtype, "fp32");
  const DtypeProbe zero = Probe(0.0, 0.0);
  EXPECT_EQ(ChooseAutoDtype(true, &zero).dtype, "fp32");
}

TEST(Bf16Warning, OnlyWhenSlowerOrArgmaxChanged) {
  EXPECT_EQ(Bf16Warning(Probe(1.0, 0.6)), "");
  const std::string slower = Bf16Warning(Probe(1.232, 1.585));
  EXPECT_NE(slower.find("slower than fp32"), std::string::npos) << slower;
  EXPECT_NE(slower.find("fp32 1.2320s"), std::string::npos) << slower;  // both figures
  EXPECT_NE(slower.find("bf16 1.5850s"), std::string::npos) << slower;
  const std::string flipped = Bf16Warning(Probe(1.0, 0.6, 8, 2));
  EXPECT_NE(flipped.find("changed 2 of 8"), std::string::npos) << flipped;
}

TEST(Bf16Offered, CudaAlwaysCpuByItsBf16Path) {
  EXPECT_TRUE(Bf16Offered("cuda:0"));
  std::string why;
  Bf16Offered("cpu", &why);
  EXPECT_NE(why.find("bf16 matmul path"), std::string::npos) << why;
}

HeadOutputs Classify(std::vector<float> logits, int64_t labels) {
  HeadOutputs h;
  h.num_labels = labels;
  h.batch_size = static_cast<int64_t>(logits.size()) / labels;
  h.logits = std::move(logits);
  return h;
}

TEST(CompareArgmax, ClassifyRowByRow) {
  const HeadOutputs ref = Classify({0.1f, 2.0f, -1.0f, 3.0f, 0.0f, 1.0f}, 3);
  const HeadOutputs same = Classify({0.2f, 1.9f, -1.0f, 2.9f, 0.1f, 1.0f}, 3);
  ArgmaxComparison c = CompareArgmax(ref, same);
  EXPECT_EQ(c.compared, 2);
  EXPECT_EQ(c.disagreed, 0);
  const HeadOutputs flipped = Classify({0.1f, 2.0f, -1.0f, 0.5f, 0.0f, 1.0f}, 3);  // row 1: label 0 -> 2
  c = CompareArgmax(ref, flipped);
  EXPECT_EQ(c.compared, 2);
  EXPECT_EQ(c.disagreed, 1);
}

TEST(CompareArgmax, ExactTieInTheReferenceIsNoDisagreement) {
  const HeadOutputs ref = Classify({1.0f, 1.0f}, 2);
  const HeadOutputs other = Classify({0.9f, 1.1f}, 2);
  const ArgmaxComparison c = CompareArgmax(ref, other);
  EXPECT_EQ(c.compared, 1);
  EXPECT_EQ(c.disagreed, 0);
}

TEST(CompareArgmax, OneLogitRerankerComparesTheTopRow) {
  const HeadOutputs ref = Classify({0.5f, 2.0f, 1.0f}, 1);
  ArgmaxComparison c = CompareArgmax(ref, Classify({0.4f, 1.9f, 1.1f}, 1));
  EXPECT_EQ(c.compared, 1);
  EXPECT_EQ(c.disagreed, 0);
  c = CompareArgmax(ref, Classify({0.4f, 0.9f, 1.1f}, 1));
  EXPECT_EQ(c.disagreed, 1);
  c = CompareArgmax(Classify({0.5f}, 1), Classify({0.7f}, 1));  // one row: nothing to rank
  EXPECT_EQ(c.compared, 0);
}

TEST(CompareArgmax, AnswerStartAndEndPerRow) {
  HeadOutputs ref;
  ref.batch_size = 2;
  ref.length = 3;
  ref.start_logits = {0, 5, 1, 2, 0, 0};
  ref.end_logits = {0, 1, 5, 0, 3, 0};
  HeadOutputs other = ref;
  EXPECT_EQ(CompareArgmax(ref, other).compared, 4);
  EXPECT_EQ(CompareArgmax(ref, other).disagreed, 0);
  other.end_logits = {0, 1, 5, 4, 3, 0};  // row 1's end moves to 0
  EXPECT_EQ(CompareArgmax(ref, other).disagreed, 1);
}

TEST(FirstRows, KeepsTheLeadingRows) {
  const TokenBatch b = TokenBatch::Pad({{1, 2, 3}, {4, 5}, {6}}, {}, 0);
  const TokenBatch two = FirstRows(b, 2);
  EXPECT_EQ(two.batch_size, 2);
  EXPECT_EQ(two.length, 3);
  EXPECT_EQ(two.input_ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(two.attention_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 0}));
  EXPECT_TRUE(two.token_type_ids.empty());
}

}  // namespace
}  // namespace dserve
