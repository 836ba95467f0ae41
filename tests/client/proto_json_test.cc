#include "client/proto_json.h"

#include <gtest/gtest.h>

#include "dserve/v1/inference.pb.h"

namespace dserve {
namespace {

TEST(ProtoJsonTest, SnakeCaseNamesNumbersAndDefaults) {
  v1::ClassifyResponse response;
  auto* labels = response.add_results();
  auto* l = labels->add_labels();
  l->set_label("positive");
  l->set_score(0.8123f);
  labels->set_tokens(7);
  response.mutable_usage()->set_tokens(12345678901234ull);
  response.set_model("m");
  response.set_model_version("0123456789abcdef");
  const nlohmann::json j = ProtoToJson(response);
  EXPECT_EQ(j.dump(),
            "{\"model\":\"m\",\"model_version\":\"0123456789abcdef\",\"results\":[{\"labels\":[{\"label\":\"positive\",\"score\":0.8123}],"
            "\"tokens\":7,\"truncated\":false}],\"timing\":null,"
            "\"usage\":{\"items\":0,\"tokens\":12345678901234}}");
}

TEST(ProtoJsonTest, AnswerDefaultsPrintedSoScriptsNeedNoFallbacks) {
  v1::AnswerResponse response;
  response.set_no_answer_score(0.25f);
  const nlohmann::json j = ProtoToJson(response);
  EXPECT_EQ(j["no_answer"], false);
  EXPECT_EQ(j["no_answer_score"], 0.25);
  EXPECT_TRUE(j["answers"].is_array());
  EXPECT_TRUE(j["answers"].empty());
  EXPECT_TRUE(j.contains("null_score_diff"));
}

TEST(ProtoJsonTest, EnumsByNameAndOptionalScalarsAsNull) {
  v1::AnswerRequest request;
  EXPECT_TRUE(ProtoToJson(request)["null_score_diff_threshold"].is_null());
  request.set_null_score_diff_threshold(1.5f);
  EXPECT_EQ(ProtoToJson(request)["null_score_diff_threshold"], 1.5);
  v1::ClassifyRequest classify;
  classify.set_truncation(v1::TRUNCATION_NONE);
  classify.add_texts("a");
  const nlohmann::json j = ProtoToJson(classify);
  EXPECT_EQ(j["truncation"], "TRUNCATION_NONE");
  EXPECT_EQ(j["texts"], nlohmann::json::array({"a"}));
}

}  // namespace
}  // namespace dserve
