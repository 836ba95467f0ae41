#include "server/doors/oip/oip_tensors.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"
#include "server/metrics.h"
#include "server/model_loader.h"

namespace dserve {
namespace oip {
namespace {

using Output = inference::ModelInferResponse::InferOutputTensor;

// One tensor of a task's contract. `shape` is the metadata's (with the batch
// dimension when the task batches), `dims` the model config's (without it).
struct TensorSpec {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::vector<int64_t> dims;
  bool optional = false;
  bool single = false;  // inputs: exactly one element
};

struct Contract {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  bool batched = false;  // the first dimension is the batch (classify)
};

Contract ContractFor(const ServedModel& m) {
  Contract c;
  switch (m.task) {
    case Task::kClassify: {
      const auto labels = static_cast<int64_t>(m.labels.size());
      c.batched = true;
      c.inputs = {{"TEXT", "BYTES", {-1, 1}, {1}, false, false},
                  {"TEXT_PAIR", "BYTES", {-1, 1}, {1}, true, false}};
      c.outputs = {{"PROBABILITIES", "FP32", {-1, labels}, {labels}}, {"LABEL", "BYTES", {-1, -1}, {-1}}};
      break;
    }
    case Task::kAnswer:
      c.inputs = {{"QUESTION", "BYTES", {1}, {1}, false, true}, {"CONTEXT", "BYTES", {-1}, {-1}, false, false}};
      c.outputs = {{"ANSWER", "BYTES", {-1}, {-1}},        {"SCORE", "FP32", {-1}, {-1}},
                   {"START", "INT64", {-1}, {-1}},         {"END", "INT64", {-1}, {-1}},
                   {"CONTEXT_INDEX", "INT64", {-1}, {-1}}, {"NO_ANSWER", "BOOL", {1}, {1}},
                   {"NO_ANSWER_SCORE", "FP32", {1}, {1}}};
      break;
    case Task::kRerank:
      c.inputs = {{"QUERY", "BYTES", {1}, {1}, false, true}, {"DOCUMENTS", "BYTES", {-1}, {-1}, false, false}};
      c.outputs = {{"SCORES", "FP32", {-1}, {-1}}};
      break;
    default:
      break;
  }
  return c;
}

std::string ShapeString(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

std::vector<std::string> Names(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  return names;
}

absl::Status Invalid(absl::string_view tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': ", what));
}

// The typed field the data of `t` was put in, other than bytes_contents ("" if none).
const char* OtherTypedField(const inference::InferTensorContents& c) {
  if (c.bool_contents_size() > 0) return "bool_contents";
  if (c.int_contents_size() > 0) return "int_contents";
  if (c.int64_contents_size() > 0) return "int64_contents";
  if (c.uint_contents_size() > 0) return "uint_contents";
  if (c.uint64_contents_size() > 0) return "uint64_contents";
  if (c.fp32_contents_size() > 0) return "fp32_contents";
  if (c.fp64_contents_size() > 0) return "fp64_contents";
  return "";
}

// The elements of a BYTES input after every check of the contract: the
// datatype, the shape ([N] or [N,1]; one element when `spec.single`), the data
// (typed or raw) holding exactly the shape's elements, each valid UTF-8.
absl::StatusOr<std::vector<absl::string_view>> Elements(const InputTensor& t, const TensorSpec& spec) {
  if (t.datatype != spec.datatype) {
    return Invalid(t.name, absl::StrCat("datatype '", t.datatype, "', but the model takes ", spec.datatype));
  }
  const bool shape_ok = (t.shape.size() == 1 || (t.shape.size() == 2 && t.shape[1] == 1)) &&
                        std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d >= 0; });
  if (!shape_ok) {
    return Invalid(t.name, absl::StrCat("shape ", ShapeString(t.shape), ", but the model takes ",
                                        spec.single ? "one element: [1] or [1,1]" : "[N] or [N,1]"));
  }
  const int64_t count = t.shape[0];
  if (spec.single && count != 1) {
    return Invalid(t.name, absl::StrCat("shape ", ShapeString(t.shape), " holds ", count,
                                        " elements, but the model takes one: [1] or [1,1]"));
  }
  std::vector<absl::string_view> elements;
  if (t.raw.has_value()) {
    auto split = SplitRawBytes(*t.raw, t.name);
    if (!split.ok()) return split.status();
    elements = *std::move(split);
  } else if (t.contents != nullptr) {
    if (const char* other = OtherTypedField(*t.contents); *other != '\0') {
      return Invalid(t.name, absl::StrCat("data in contents.", other, "; BYTES data goes in bytes_contents"));
    }
    for (const std::string& e : t.contents->bytes_contents()) elements.emplace_back(e);
  } else {
    return Invalid(t.name, "no data (contents.bytes_contents, raw_input_contents or JSON data)");
  }
  if (static_cast<int64_t>(elements.size()) != count) {
    return Invalid(t.name, absl::StrCat(elements.size(), " elements of data, but shape ", ShapeString(t.shape),
                                        " holds ", count));
  }
  for (size_t i = 0; i < elements.size(); ++i) {
    absl::Status utf8 = ValidateUtf8(std::string_view(elements[i].data(), elements[i].size()),
                                     absl::StrCat("element ", i));
    if (!utf8.ok()) return Invalid(t.name, utf8.message());
  }
  return elements;
}

// --- request parameters ---------------------------------------------------

const inference::InferParameter* FindParam(const Parameters* params, const char* name) {
  if (params == nullptr) return nullptr;
  auto it = params->find(name);
  return it == params->end() ? nullptr : &it->second;
}

absl::Status ParamError(const char* name, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "': ", want));
}

absl::StatusOr<std::optional<int64_t>> IntParam(const Parameters* params, const char* name, int64_t min_value) {
  const inference::InferParameter* p = FindParam(params, name);
  if (p == nullptr) return std::optional<int64_t>();
  int64_t v = 0;
  if (p->has_int64_param()) {
    v = p->int64_param();
  } else if (p->has_uint64_param() && p->uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
    v = static_cast<int64_t>(p->uint64_param());
  } else {
    return ParamError(name, "expects an integer");
  }
  if (v < min_value) return ParamError(name, absl::StrCat(v, " is below the minimum ", min_value));
  return std::optional<int64_t>(v);
}

absl::StatusOr<std::optional<bool>> BoolParam(const Parameters* params, const char* name) {
  const inference::InferParameter* p = FindParam(params, name);
  if (p == nullptr) return std::optional<bool>();
  if (!p->has_bool_param()) return ParamError(name, "expects a boolean");
  return std::optional<bool>(p->bool_param());
}

absl::StatusOr<std::optional<double>> DoubleParam(const Parameters* params, const char* name) {
  const inference::InferParameter* p = FindParam(params, name);
  if (p == nullptr) return std::optional<double>();
  if (p->has_double_param()) return std::optional<double>(p->double_param());
  if (p->has_int64_param()) return std::optional<double>(static_cast<double>(p->int64_param()));
  return ParamError(name, "expects a number");
}

absl::StatusOr<std::optional<v1::Truncation>> TruncationParam(const Parameters* params) {
  const inference::InferParameter* p = FindParam(params, "truncation");
  if (p == nullptr) return std::optional<v1::Truncation>();
  static const auto* const kValues = new std::map<std::string, v1::Truncation>{
      {"none", v1::TRUNCATION_NONE},
      {"longest_first", v1::TRUNCATION_LONGEST_FIRST},
      {"only_first", v1::TRUNCATION_ONLY_FIRST},
      {"only_second", v1::TRUNCATION_ONLY_SECOND}};
  auto it = p->has_string_param() ? kValues->find(p->string_param()) : kValues->end();
  if (it == kValues->end()) {
    return ParamError("truncation", "expects one of \"none\", \"longest_first\", \"only_first\", \"only_second\"");
  }
  return std::optional<v1::Truncation>(it->second);
}

// --- outputs ----------------------------------------------------------------

Output* AddOutput(const V1Call& call, absl::string_view name, const char* datatype, std::vector<int64_t> shape,
                  inference::ModelInferResponse* out) {
  if (std::find(call.outputs.begin(), call.outputs.end(), name) == call.outputs.end()) return nullptr;
  Output* o = out->add_outputs();
  o->set_name(std::string(name));
  o->set_datatype(datatype);
  for (int64_t d : shape) o->add_shape(d);
  return o;
}

template <typename Response>
void FillHeader(const V1Call& call, const ServedModel& m, const Response& r, inference::ModelInferResponse* out) {
  out->set_model_name(m.name);
  out->set_model_version(r.model_version());
  out->set_id(call.id);
}

// Puts the outputs in the order the model declares them.
void SortOutputs(const V1Call& call, inference::ModelInferResponse* out) {
  auto rank = [&call](const Output& o) {
    return std::find(call.outputs.begin(), call.outputs.end(), o.name()) - call.outputs.begin();
  };
  std::stable_sort(out->mutable_outputs()->begin(), out->mutable_outputs()->end(),
                   [&rank](const Output& a, const Output& b) { return rank(a) < rank(b); });
}

void AppendLe(std::string* out, const void* value, size_t size) {
  // Little-endian hosts only (x86-64, aarch64): the bytes as they are.
  out->append(static_cast<const char*>(value), size);
}

// The validated elements of each input, by tensor name.
using ElementMap = std::map<std::string, std::vector<absl::string_view>>;

template <typename Repeated>
void AddAll(const std::vector<absl::string_view>& values, Repeated* out) {
  for (absl::string_view v : values) out->Add(std::string(v));
}

uint32_t Clamp32(int64_t v) { return static_cast<uint32_t>(std::min<int64_t>(v, UINT32_MAX)); }

absl::Status BuildClassify(ElementMap& e, const Parameters* params, const ServedModel& m, V1Call* call) {
  auto r = std::make_unique<v1::ClassifyRequest>();
  r->set_model(m.name);
  AddAll(e["TEXT"], r->mutable_texts());
  if (e.count("TEXT_PAIR")) {
    if (e["TEXT_PAIR"].size() != e["TEXT"].size()) {
      return Invalid("TEXT_PAIR", absl::StrCat(e["TEXT_PAIR"].size(), " elements, but TEXT has ", e["TEXT"].size(),
                                               " (one pair per text)"));
    }
    AddAll(e["TEXT_PAIR"], r->mutable_text_pairs());
  }
  ASSIGN_OR_RETURN(auto top_k, IntParam(params, "top_k", 0));
  if (top_k && *top_k > 0) call->label_columns = std::min<int64_t>(*top_k, static_cast<int64_t>(m.labels.size()));
  ASSIGN_OR_RETURN(auto raw_scores, BoolParam(params, "raw_scores"));
  if (raw_scores) r->set_raw_scores(*raw_scores);
  ASSIGN_OR_RETURN(auto truncation, TruncationParam(params));
  if (truncation) r->set_truncation(*truncation);
  if (call->priority) r->set_priority(*call->priority);
  call->classify = std::move(r);  // top_k stays 0: PROBABILITIES holds every label
  return absl::OkStatus();
}

absl::Status BuildAnswer(ElementMap& e, const Parameters* params, const ServedModel& m, V1Call* call) {
  auto r = std::make_unique<v1::AnswerRequest>();
  r->set_model(m.name);
  r->set_question(std::string(e["QUESTION"][0]));
  AddAll(e["CONTEXT"], r->mutable_contexts());
  ASSIGN_OR_RETURN(auto top_k, IntParam(params, "top_k", 0));
  if (top_k) r->set_top_k(Clamp32(*top_k));
  ASSIGN_OR_RETURN(auto max_tokens, IntParam(params, "max_answer_length", 0));
  if (max_tokens) r->set_max_answer_tokens(Clamp32(*max_tokens));
  ASSIGN_OR_RETURN(auto max_chars, IntParam(params, "max_answer_chars", 0));
  if (max_chars) r->set_max_answer_chars(Clamp32(*max_chars));
  ASSIGN_OR_RETURN(auto threshold, DoubleParam(params, "no_answer_threshold"));
  if (threshold) r->set_null_score_diff_threshold(static_cast<float>(*threshold));
  if (call->priority) r->set_priority(*call->priority);
  call->answer = std::move(r);
  return absl::OkStatus();
}

absl::Status BuildRerank(ElementMap& e, const Parameters* params, const ServedModel& m, V1Call* call) {
  auto r = std::make_unique<v1::RerankRequest>();
  r->set_model(m.name);
  r->set_query(std::string(e["QUERY"][0]));
  AddAll(e["DOCUMENTS"], r->mutable_documents());
  ASSIGN_OR_RETURN(auto raw_scores, BoolParam(params, "raw_scores"));
  if (raw_scores) r->set_raw_scores(*raw_scores);
  ASSIGN_OR_RETURN(auto truncation, TruncationParam(params));
  if (truncation) r->set_truncation(*truncation);
  if (call->priority) r->set_priority(*call->priority);
  call->documents = r->documents_size();
  call->rerank = std::move(r);  // top_n stays 0: SCORES holds every document
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<absl::string_view>> SplitRawBytes(absl::string_view raw, absl::string_view tensor) {
  std::vector<absl::string_view> elements;
  size_t pos = 0;
  while (pos < raw.size()) {
    if (raw.size() - pos < 4) {
      return Invalid(tensor, absl::StrCat("raw BYTES data ends inside an element's 4-byte length at byte ", pos));
    }
    uint32_t length = 0;
    std::memcpy(&length, raw.data() + pos, 4);
    pos += 4;
    if (length > raw.size() - pos) {
      return Invalid(tensor, absl::StrCat("raw BYTES element ", elements.size(), " says ", length,
                                          " bytes, but only ", raw.size() - pos, " remain (at byte ", pos - 4, ")"));
    }
    elements.push_back(raw.substr(pos, length));
    pos += length;
  }
  return elements;
}

absl::StatusOr<InferInput> FromGrpcRequest(const inference::ModelInferRequest& request) {
  InferInput in;
  in.model = request.model_name();
  in.version = request.model_version();
  in.id = request.id();
  in.parameters = &request.parameters();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents: ", request.raw_input_contents_size(),
                                                   " entries for ", request.inputs_size(),
                                                   " inputs (one per input, in order)"));
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& t = request.inputs(i);
    InputTensor tensor;
    tensor.name = t.name();
    tensor.datatype = t.datatype();
    tensor.shape.assign(t.shape().begin(), t.shape().end());
    if (raw) {
      if (t.has_contents()) {
        return Invalid(t.name(), "has contents while the request uses raw_input_contents (use one or the other)");
      }
      tensor.raw = absl::string_view(request.raw_input_contents(i));
    } else if (t.has_contents()) {
      tensor.contents = &t.contents();
    }
    in.inputs.push_back(std::move(tensor));
  }
  for (const auto& o : request.outputs()) in.outputs.push_back(o.name());
  return in;
}

absl::StatusOr<V1Call> ToV1Call(const InferInput& input, const ServedModel& m) {
  const Contract contract = ContractFor(m);
  if (contract.inputs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", m.name, "' serves ", TaskName(m.task), ", which the OIP door does not"));
  }
  V1Call call;
  call.task = m.task;
  call.id = input.id;
  // Requested outputs: known, each once; returned in the model's order.
  std::set<std::string> requested;
  for (const std::string& name : input.outputs) {
    const auto names = Names(contract.outputs);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "': model '", m.name, "' has no such output (",
                                                     absl::StrJoin(names, ", "), ")"));
    }
    if (!requested.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "': requested twice"));
    }
  }
  for (const auto& spec : contract.outputs) {
    if (requested.empty() || requested.count(spec.name)) call.outputs.push_back(spec.name);
  }
  // Inputs: known, each once, the required ones present.
  std::map<std::string, const InputTensor*> by_name;
  for (const InputTensor& t : input.inputs) {
    auto spec = std::find_if(contract.inputs.begin(), contract.inputs.end(),
                             [&t](const TensorSpec& s) { return s.name == t.name; });
    if (spec == contract.inputs.end()) {
      return Invalid(t.name, absl::StrCat("model '", m.name, "' (", TaskName(m.task), ") has no such input (inputs: ",
                                          absl::StrJoin(Names(contract.inputs), ", "), ")"));
    }
    if (!by_name.emplace(t.name, &t).second) return Invalid(t.name, "sent twice");
  }
  ElementMap elements;
  for (const TensorSpec& spec : contract.inputs) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      if (spec.optional) continue;
      return Invalid(spec.name, absl::StrCat("missing: model '", m.name, "' (", TaskName(m.task), ") needs ",
                                             absl::StrJoin(Names(contract.inputs), ", ")));
    }
    ASSIGN_OR_RETURN(auto values, Elements(*it->second, spec));
    elements[spec.name] = std::move(values);
  }
  const Parameters* params = input.parameters;
  ASSIGN_OR_RETURN(auto priority, IntParam(params, "priority", INT32_MIN));
  if (priority) {
    if (*priority > INT32_MAX) return ParamError("priority", "out of the int32 range");
    call.priority = static_cast<int>(*priority);
  }
  ASSIGN_OR_RETURN(auto timeout_us, IntParam(params, "timeout", 1));
  if (timeout_us) call.timeout = absl::Microseconds(*timeout_us);

  absl::Status built = absl::OkStatus();
  if (m.task == Task::kClassify) built = BuildClassify(elements, params, m, &call);
  if (m.task == Task::kAnswer) built = BuildAnswer(elements, params, m, &call);
  if (m.task == Task::kRerank) built = BuildRerank(elements, params, m, &call);
  if (!built.ok()) return built;
  return call;
}

absl::Status ToInferResponse(const V1Call& call, const ServedModel& m, const v1::ClassifyResponse& r,
                             inference::ModelInferResponse* out) {
  FillHeader(call, m, r, out);
  const auto n = static_cast<int64_t>(r.results_size());
  const auto labels = static_cast<int64_t>(m.labels.size());
  std::map<std::string, int64_t> index;
  for (int64_t i = 0; i < labels; ++i) index[m.labels[i]] = i;
  if (Output* o = AddOutput(call, "PROBABILITIES", "FP32", {n, labels}, out)) {
    auto* data = o->mutable_contents()->mutable_fp32_contents();
    data->Resize(static_cast<int>(n * labels), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      if (r.results(t).labels_size() != labels) {
        return absl::InternalError(absl::StrCat("classify result ", t, " has ", r.results(t).labels_size(),
                                                " labels, the model ", labels));
      }
      for (const auto& ls : r.results(t).labels()) {
        auto it = index.find(ls.label());
        if (it == index.end()) return absl::InternalError(absl::StrCat("unknown label '", ls.label(), "'"));
        data->Set(static_cast<int>(t * labels + it->second), ls.score());
      }
    }
  }
  if (Output* o = AddOutput(call, "LABEL", "BYTES", {n, call.label_columns}, out)) {
    auto* data = o->mutable_contents()->mutable_bytes_contents();
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t k = 0; k < call.label_columns; ++k) {
        if (k >= r.results(t).labels_size()) return absl::InternalError("classify result with too few labels");
        data->Add(std::string(r.results(t).labels(k).label()));  // results are best first
      }
    }
  }
  SortOutputs(call, out);
  return absl::OkStatus();
}

absl::Status ToInferResponse(const V1Call& call, const ServedModel& m, const v1::AnswerResponse& r,
                             inference::ModelInferResponse* out) {
  FillHeader(call, m, r, out);
  const auto k = static_cast<int64_t>(r.answers_size());
  if (Output* o = AddOutput(call, "ANSWER", "BYTES", {k}, out)) {
    for (const auto& a : r.answers()) o->mutable_contents()->add_bytes_contents(a.text());
  }
  if (Output* o = AddOutput(call, "SCORE", "FP32", {k}, out)) {
    for (const auto& a : r.answers()) o->mutable_contents()->add_fp32_contents(a.score());
  }
  if (Output* o = AddOutput(call, "START", "INT64", {k}, out)) {
    for (const auto& a : r.answers()) o->mutable_contents()->add_int64_contents(a.start_char());
  }
  if (Output* o = AddOutput(call, "END", "INT64", {k}, out)) {
    for (const auto& a : r.answers()) o->mutable_contents()->add_int64_contents(a.end_char());
  }
  if (Output* o = AddOutput(call, "CONTEXT_INDEX", "INT64", {k}, out)) {
    for (const auto& a : r.answers()) o->mutable_contents()->add_int64_contents(a.context_index());
  }
  if (Output* o = AddOutput(call, "NO_ANSWER", "BOOL", {1}, out)) o->mutable_contents()->add_bool_contents(r.no_answer());
  if (Output* o = AddOutput(call, "NO_ANSWER_SCORE", "FP32", {1}, out)) {
    o->mutable_contents()->add_fp32_contents(r.no_answer_score());
  }
  SortOutputs(call, out);
  return absl::OkStatus();
}

absl::Status ToInferResponse(const V1Call& call, const ServedModel& m, const v1::RerankResponse& r,
                             inference::ModelInferResponse* out) {
  FillHeader(call, m, r, out);
  const auto documents = static_cast<int>(call.documents);
  if (Output* o = AddOutput(call, "SCORES", "FP32", {documents}, out)) {
    auto* data = o->mutable_contents()->mutable_fp32_contents();
    data->Resize(documents, 0.0f);
    if (r.results_size() != documents) return absl::InternalError("rerank returned fewer documents than sent");
    for (const auto& d : r.results()) {
      if (d.index() >= static_cast<uint32_t>(documents)) return absl::InternalError("rerank index out of range");
      data->Set(static_cast<int>(d.index()), d.score());
    }
  }
  return absl::OkStatus();
}

std::string RawOutput(const Output& o) {
  const auto& c = o.contents();
  std::string raw;
  for (const std::string& e : c.bytes_contents()) {
    const auto length = static_cast<uint32_t>(e.size());
    AppendLe(&raw, &length, 4);
    raw += e;
  }
  for (float v : c.fp32_contents()) AppendLe(&raw, &v, sizeof v);
  for (int64_t v : c.int64_contents()) AppendLe(&raw, &v, sizeof v);
  for (bool v : c.bool_contents()) raw.push_back(v ? 1 : 0);
  return raw;
}

void UseRawOutputs(inference::ModelInferResponse* response) {
  for (auto& o : *response->mutable_outputs()) {
    response->add_raw_output_contents(RawOutput(o));
    o.clear_contents();
  }
}

void FillModelMetadata(const ServedModel& m, inference::ModelMetadataResponse* out) {
  const Contract c = ContractFor(m);
  out->set_name(m.name);
  out->add_versions(m.version);
  out->set_platform("dserve");
  auto add = [](const TensorSpec& s, inference::ModelMetadataResponse::TensorMetadata* t) {
    t->set_name(s.name);
    t->set_datatype(s.datatype);
    for (int64_t d : s.shape) t->add_shape(d);
  };
  for (const auto& s : c.inputs) add(s, out->add_inputs());
  for (const auto& s : c.outputs) add(s, out->add_outputs());
}

namespace {
inference::DataType ConfigType(const std::string& datatype) {
  if (datatype == "BYTES") return inference::TYPE_STRING;
  if (datatype == "FP32") return inference::TYPE_FP32;
  if (datatype == "INT64") return inference::TYPE_INT64;
  if (datatype == "BOOL") return inference::TYPE_BOOL;
  return inference::TYPE_INVALID;
}
}  // namespace

void FillModelConfig(const ServedModel& m, const ServeOptions& options, inference::ModelConfig* out) {
  const Contract c = ContractFor(m);
  out->set_name(m.name);
  out->set_platform("dserve");
  out->set_backend("dserve");
  out->set_max_batch_size(c.batched ? static_cast<int32_t>(std::min<int64_t>(options.max_texts_per_request, INT32_MAX))
                                    : 0);
  for (const auto& s : c.inputs) {
    auto* in = out->add_input();
    in->set_name(s.name);
    in->set_data_type(ConfigType(s.datatype));
    for (int64_t d : (c.batched ? s.dims : s.shape)) in->add_dims(d);
    in->set_optional(s.optional);
  }
  for (const auto& s : c.outputs) {
    auto* o = out->add_output();
    o->set_name(s.name);
    o->set_data_type(ConfigType(s.datatype));
    for (int64_t d : (c.batched ? s.dims : s.shape)) o->add_dims(d);
  }
  auto* group = out->add_instance_group();
  group->set_name(absl::StrCat(m.name, "_0"));
  const std::string device = m.model->device();
  group->set_count(std::max(1, m.settings.workers));
  if (absl::StartsWith(device, "cuda")) {
    group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
    int gpu = 0;
    if (device.size() > 5 && absl::SimpleAtoi(device.substr(5), &gpu)) group->add_gpus(gpu);
  } else {
    group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
  auto* batching = out->mutable_dynamic_batching();
  batching->set_max_queue_delay_microseconds(static_cast<uint64_t>(std::max<int64_t>(0, m.settings.max_queue_delay_us)));
  auto& params = *out->mutable_parameters();
  params["task"].set_string_value(TaskName(m.task));
  params["version"].set_string_value(m.version);
  params["max_length"].set_string_value(std::to_string(m.max_length));
  params["max_batch_items"].set_string_value(std::to_string(m.settings.max_batch_size));
  params["dtype"].set_string_value(m.model->dtype());
  params["requested_dtype"].set_string_value(m.requested_dtype);
  params["device"].set_string_value(device);
  if (!m.labels.empty()) params["labels"].set_string_value(absl::StrJoin(m.labels, ","));
}

void FillModelStatistics(const ServedModel& m, inference::ModelStatistics* out) {
  const ModelStatsSnapshot s = m.metrics->Stats();
  out->set_name(m.name);
  out->set_version(m.version);
  out->set_last_inference(s.last_inference_ms);
  out->set_inference_count(s.inference_count);
  out->set_execution_count(s.execution_count);
  auto* stats = out->mutable_inference_stats();
  stats->mutable_success()->set_count(s.success_count);
  stats->mutable_success()->set_ns(s.success_ns);
  stats->mutable_fail()->set_count(s.fail_count);
  stats->mutable_fail()->set_ns(s.fail_ns);
  stats->mutable_queue()->set_count(s.queue_count);
  stats->mutable_queue()->set_ns(s.queue_ns);
  stats->mutable_compute_infer()->set_count(s.execution_count);
  stats->mutable_compute_infer()->set_ns(s.execution_ns);
  // Input preparation and output extraction are inside the forward pass
  // (compute_infer); there is no response cache. Present, as zeros, because
  // clients (perf_analyzer) read every field.
  stats->mutable_compute_input();
  stats->mutable_compute_output();
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
}

std::vector<std::string> ServerExtensions() {
  return {"binary_tensor_data", "model_configuration", "statistics", "parameters"};
}

}  // namespace oip
}  // namespace dserve
