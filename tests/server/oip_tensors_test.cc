// The Open Inference Protocol's tensor contract (server/doors/oip/oip_tensors.h):
// requests -> v1 requests, every refusal naming the tensor, raw encodings,
// v1 responses -> outputs. No server: a ServedModel with a task and labels.
#include "server/doors/oip/oip_tensors.h"

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/doors/oip/oip_calls.h"
#include "server/model_loader.h"

namespace dserve::oip {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ServedModel Model(Task task) {
  ServedModel m;
  m.name = TaskName(task);
  m.task = task;
  m.version = "0123456789abcdef";
  if (task == Task::kClassify) m.labels = {"a", "b", "c"};
  return m;
}

std::string Raw(const std::vector<std::string>& elements) {
  std::string out;
  for (const auto& e : elements) {
    const auto n = static_cast<uint32_t>(e.size());
    char len[4];
    std::memcpy(len, &n, 4);  // little-endian hosts
    out.append(len, 4);
    out += e;
  }
  return out;
}

inference::ModelInferRequest Request(const std::string& model,
                                     const std::vector<std::tuple<std::string, std::vector<std::string>,
                                                                  std::vector<int64_t>>>& tensors,
                                     bool raw = false) {
  inference::ModelInferRequest r;
  r.set_model_name(model);
  for (const auto& [name, values, shape] : tensors) {
    auto* t = r.add_inputs();
    t->set_name(name);
    t->set_datatype("BYTES");
    for (int64_t d : shape) t->add_shape(d);
    if (raw) {
      r.add_raw_input_contents(Raw(values));
    } else {
      for (const auto& v : values) t->mutable_contents()->add_bytes_contents(v);
    }
  }
  return r;
}

absl::StatusOr<V1Call> Convert(const inference::ModelInferRequest& r, const ServedModel& m) {
  auto in = FromGrpcRequest(r);
  if (!in.ok()) return in.status();
  return ToV1Call(*in, m);
}

void ExpectInvalid(const absl::StatusOr<V1Call>& call, const std::vector<std::string>& words) {
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument) << call.status();
  for (const auto& w : words) EXPECT_THAT(std::string(call.status().message()), HasSubstr(w));
}

TEST(OipTensors, ClassifyTypedAndRawGiveTheSameRequest) {
  const ServedModel m = Model(Task::kClassify);
  for (bool raw : {false, true}) {
    auto r = Request("classify", {{"TEXT", {"x", "y\xc3\xa9"}, {2, 1}}, {"TEXT_PAIR", {"p", "q"}, {2}}}, raw);
    (*r.mutable_parameters())["top_k"].set_int64_param(2);
    (*r.mutable_parameters())["raw_scores"].set_bool_param(true);
    (*r.mutable_parameters())["truncation"].set_string_param("none");
    auto call = Convert(r, m);
    ASSERT_TRUE(call.ok()) << call.status();
    ASSERT_NE(call->classify, nullptr);
    EXPECT_THAT(call->classify->texts(), ElementsAre("x", "y\xc3\xa9"));
    EXPECT_THAT(call->classify->text_pairs(), ElementsAre("p", "q"));
    EXPECT_EQ(call->classify->top_k(), 0u);  // PROBABILITIES needs every label
    EXPECT_TRUE(call->classify->raw_scores());
    EXPECT_EQ(call->classify->truncation(), v1::TRUNCATION_NONE);
    EXPECT_EQ(call->label_columns, 2);
    EXPECT_THAT(call->outputs, ElementsAre("PROBABILITIES", "LABEL"));
  }
}

TEST(OipTensors, AnswerAndRerankParameters) {
  auto r = Request("answer", {{"QUESTION", {"q"}, {1, 1}}, {"CONTEXT", {"c1", "c2"}, {2}}});
  (*r.mutable_parameters())["max_answer_length"].set_int64_param(7);
  (*r.mutable_parameters())["no_answer_threshold"].set_double_param(-1.5);
  (*r.mutable_parameters())["timeout"].set_int64_param(2500);
  (*r.mutable_parameters())["priority"].set_int64_param(3);
  r.add_outputs()->set_name("SCORE");
  r.add_outputs()->set_name("ANSWER");
  auto call = Convert(r, Model(Task::kAnswer));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->answer->question(), "q");
  EXPECT_THAT(call->answer->contexts(), ElementsAre("c1", "c2"));
  EXPECT_EQ(call->answer->max_answer_tokens(), 7u);
  EXPECT_FLOAT_EQ(call->answer->null_score_diff_threshold(), -1.5f);
  EXPECT_EQ(call->timeout, absl::Microseconds(2500));
  EXPECT_EQ(call->priority, 3);
  EXPECT_EQ(call->answer->priority(), 3);
  EXPECT_THAT(call->outputs, ElementsAre("ANSWER", "SCORE"));  // the model's order

  auto rr = Request("rerank", {{"QUERY", {"q"}, {1}}, {"DOCUMENTS", {"a", "b", "c"}, {3, 1}}}, true);
  auto rerank = Convert(rr, Model(Task::kRerank));
  ASSERT_TRUE(rerank.ok()) << rerank.status();
  EXPECT_THAT(rerank->rerank->documents(), ElementsAre("a", "b", "c"));
  EXPECT_EQ(rerank->rerank->top_n(), 0u);
  EXPECT_EQ(rerank->documents, 3);
}

TEST(OipTensors, InvalidTensorsNameTheTensor) {
  const ServedModel classify = Model(Task::kClassify);
  auto wrong_type = Request("classify", {{"TEXT", {"x"}, {1}}});
  wrong_type.mutable_inputs(0)->set_datatype("FP32");
  ExpectInvalid(Convert(wrong_type, classify), {"input 'TEXT'", "FP32", "BYTES"});
  ExpectInvalid(Convert(Request("classify", {{"TEXT", {"x", "y"}, {3}}}), classify), {"TEXT", "2 elements", "[3]"});
  ExpectInvalid(Convert(Request("classify", {{"TEXT", {"x", "y"}, {1, 2}}}), classify), {"TEXT", "shape [1,2]"});
  ExpectInvalid(Convert(Request("classify", {{"TEXT", {"x", "a\xff"}, {2}}}), classify),
                {"TEXT", "element 1", "UTF-8"});
  ExpectInvalid(Convert(Request("classify", {{"TEXT", {"x"}, {1}}, {"TEXT", {"y"}, {1}}}), classify),
                {"TEXT", "twice"});
  ExpectInvalid(Convert(Request("classify", {{"TEXT", {"x"}, {1}}, {"TEXT_PAIR", {"p", "q"}, {2}}}), classify),
                {"TEXT_PAIR", "TEXT has 1"});
  ExpectInvalid(Convert(Request("classify", {{"TXT", {"x"}, {1}}}), classify), {"TXT", "no such input"});
  ExpectInvalid(Convert(Request("answer", {{"QUESTION", {"q"}, {1}}}), Model(Task::kAnswer)), {"CONTEXT", "missing"});
  ExpectInvalid(Convert(Request("rerank", {{"QUERY", {"a", "b"}, {2}}, {"DOCUMENTS", {"d"}, {1}}}),
                        Model(Task::kRerank)),
                {"QUERY", "one"});
  auto fp32_data = Request("classify", {{"TEXT", {}, {1}}});
  fp32_data.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
  ExpectInvalid(Convert(fp32_data, classify), {"TEXT", "fp32_contents"});
  auto no_data = Request("classify", {{"TEXT", {}, {1}}});
  ExpectInvalid(Convert(no_data, classify), {"TEXT", "no data"});
  auto bad_param = Request("classify", {{"TEXT", {"x"}, {1}}});
  (*bad_param.mutable_parameters())["top_k"].set_string_param("2");
  ExpectInvalid(Convert(bad_param, classify), {"top_k", "integer"});
  auto bad_output = Request("classify", {{"TEXT", {"x"}, {1}}});
  bad_output.add_outputs()->set_name("LOGITS");
  ExpectInvalid(Convert(bad_output, classify), {"LOGITS"});
  auto mixed = Request("classify", {{"TEXT", {"x"}, {1}}});
  mixed.add_raw_input_contents(Raw({"x"}));
  ExpectInvalid(Convert(mixed, classify), {"TEXT", "raw_input_contents"});
  auto count = Request("classify", {{"TEXT", {"x"}, {1}}}, true);
  count.add_raw_input_contents("");
  ExpectInvalid(Convert(count, classify), {"raw_input_contents", "2 entries", "1 inputs"});
}

TEST(OipTensors, RawBytesSplitAndErrors) {
  const std::string raw = Raw({"ab", "", "\xc3\xa9"});  // the elements are views into it
  auto split = SplitRawBytes(raw, "T");
  ASSERT_TRUE(split.ok());
  EXPECT_THAT(*split, ElementsAre("ab", "", "\xc3\xa9"));
  EXPECT_THAT(std::string(SplitRawBytes(std::string("\x05\x00\x00\x00" "ab", 6), "T").status().message()),
              HasSubstr("says 5 bytes"));
  EXPECT_THAT(std::string(SplitRawBytes(std::string("\x01\x00", 2), "T").status().message()),
              HasSubstr("4-byte length"));
}

TEST(OipTensors, ResponsesAndRawOutputs) {
  const ServedModel m = Model(Task::kClassify);
  auto call = Convert(Request("classify", {{"TEXT", {"x", "y"}, {2}}}), m);
  ASSERT_TRUE(call.ok());
  v1::ClassifyResponse r;
  r.set_model_version("v7");
  for (const auto& order : {std::vector<std::pair<std::string, float>>{{"b", 0.5f}, {"c", 0.3f}, {"a", 0.2f}},
                            {{"a", 0.9f}, {"c", 0.06f}, {"b", 0.04f}}}) {
    auto* result = r.add_results();
    for (const auto& [label, score] : order) {
      auto* ls = result->add_labels();
      ls->set_label(label);
      ls->set_score(score);
    }
  }
  inference::ModelInferResponse out;
  ASSERT_TRUE(ToInferResponse(*call, m, r, &out).ok());
  EXPECT_EQ(out.model_version(), "v7");
  ASSERT_EQ(out.outputs_size(), 2);
  EXPECT_THAT(out.outputs(0).shape(), ElementsAre(2, 3));
  EXPECT_THAT(out.outputs(0).contents().fp32_contents(), ElementsAre(0.2f, 0.5f, 0.3f, 0.9f, 0.04f, 0.06f));
  EXPECT_THAT(out.outputs(1).contents().bytes_contents(), ElementsAre("b", "a"));
  EXPECT_EQ(RawOutput(out.outputs(1)), Raw({"b", "a"}));
  UseRawOutputs(&out);
  ASSERT_EQ(out.raw_output_contents_size(), 2);
  EXPECT_FALSE(out.outputs(0).has_contents());
  float first = 0;
  std::memcpy(&first, out.raw_output_contents(0).data(), 4);
  EXPECT_FLOAT_EQ(first, 0.2f);
  EXPECT_EQ(out.raw_output_contents(0).size(), 6 * 4u);
}

TEST(OipTensors, PathErrorsNameTensors) {
  EXPECT_EQ(WithTensorNames(absl::InvalidArgumentError("texts[1]: empty text"), Task::kClassify).message(),
            "input TEXT[1]: empty text");
  EXPECT_EQ(WithTensorNames(absl::InvalidArgumentError("text_pairs: 1 for 2 texts"), Task::kClassify).message(),
            "input TEXT_PAIR: 1 for 2 texts");
  EXPECT_EQ(WithTensorNames(absl::InvalidArgumentError("documents[0]: empty text"), Task::kRerank).message(),
            "input DOCUMENTS[0]: empty text");
  EXPECT_EQ(WithTensorNames(absl::InvalidArgumentError("request needs 9 items"), Task::kRerank).message(),
            "request needs 9 items");
  EXPECT_EQ(WithTensorNames(absl::NotFoundError("texts"), Task::kClassify).message(), "texts");
}

}  // namespace
}  // namespace dserve::oip
