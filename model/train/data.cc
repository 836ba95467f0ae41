#include "model/train/data.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "model/util/logging.h"

namespace dserve {
namespace {

using json = nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const char* TypeName(const json& j) { return j.type_name(); }

// Calls fn(line_number, line) for every non-blank line.
template <typename Fn>
absl::Status ForEachJsonLine(const std::string& path, Fn fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = absl::StrCat(path, ":", number);
    if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, ": invalid JSON"));
    if (!j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON object, got ", TypeName(j)));
    }
    absl::Status status = fn(number, where, j);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status FieldError(const std::string& where, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": field \"", field, "\" ", what));
}

absl::StatusOr<std::string> GetText(const json& obj, const std::string& where, const std::string& field,
                                    bool allow_empty = false) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return FieldError(where, field, "is missing");
  if (!it->is_string()) return FieldError(where, field, absl::StrCat("must be a string, got ", TypeName(*it)));
  std::string s = it->get<std::string>();
  if (s.empty() && !allow_empty) return FieldError(where, field, "is empty");
  absl::Status utf8 = ValidateUtf8(s, field);
  if (!utf8.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", utf8.message()));
  return s;
}

absl::StatusOr<std::string> LabelText(const json& v, const std::string& where, const std::string& field) {
  if (v.is_string()) {
    if (v.get<std::string>().empty()) return FieldError(where, field, "is empty");
    return v.get<std::string>();
  }
  if (v.is_number_integer()) return absl::StrCat(v.get<int64_t>());
  return FieldError(where, field, absl::StrCat("must be a string or an integer, got ", TypeName(v)));
}

}  // namespace

absl::StatusOr<ClassifyData> ReadClassifyJsonl(const std::string& path) {
  ClassifyData data;
  int first_kind_line = 0;
  absl::Status status = ForEachJsonLine(path, [&](int number, const std::string& where,
                                                  const json& j) -> absl::Status {
    ClassifyExample ex;
    ex.line = number;
    auto text = GetText(j, where, "text");
    if (!text.ok()) return text.status();
    ex.text = *std::move(text);
    const bool has_label = j.contains("label") && !j["label"].is_null();
    const bool has_labels = j.contains("labels") && !j["labels"].is_null();
    if (has_label && has_labels) return FieldError(where, "label", "and \"labels\" are both given; use one");
    if (!has_label && !has_labels) return FieldError(where, "label", "is missing (or give \"labels\": [...])");
    if (first_kind_line == 0) {
      first_kind_line = number;
      data.multi_label = has_labels;
    } else if (data.multi_label != has_labels) {
      return FieldError(where, has_labels ? "labels" : "label",
                        absl::StrCat("is used but line ", first_kind_line, " uses \"",
                                     data.multi_label ? "labels" : "label", "\"; a file uses one of them"));
    }
    if (has_label) {
      auto label = LabelText(j["label"], where, "label");
      if (!label.ok()) return label.status();
      ex.labels.push_back(*label);
    } else {
      const json& labels = j["labels"];
      if (!labels.is_array()) {
        return FieldError(where, "labels", absl::StrCat("must be an array, got ", TypeName(labels)));
      }
      std::set<std::string> seen;
      for (size_t i = 0; i < labels.size(); ++i) {
        auto label = LabelText(labels[i], where, absl::StrCat("labels[", i, "]"));
        if (!label.ok()) return label.status();
        if (seen.insert(*label).second) ex.labels.push_back(*label);
      }
    }
    if (j.contains("tags") && !j["tags"].is_null()) {
      const json& tags = j["tags"];
      if (!tags.is_array()) return FieldError(where, "tags", absl::StrCat("must be an array, got ", TypeName(tags)));
      for (size_t i = 0; i < tags.size(); ++i) {
        if (!tags[i].is_string()) {
          return FieldError(where, absl::StrCat("tags[", i, "]"),
                            absl::StrCat("must be a string, got ", TypeName(tags[i])));
        }
        ex.tags.push_back(tags[i].get<std::string>());
      }
    }
    data.examples.push_back(std::move(ex));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  if (data.examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  return data;
}

std::vector<std::string> CollectLabels(const ClassifyData& data) {
  std::set<std::string> labels;
  for (const auto& ex : data.examples) labels.insert(ex.labels.begin(), ex.labels.end());
  return {labels.begin(), labels.end()};
}

absl::StatusOr<SquadData> ReadSquadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  json root;
  try {
    root = json::parse(*text);
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON: ", e.what()));
  }
  auto fail = [&](const std::string& field, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, " ", what));
  };
  auto array_at = [&](const json& obj, const std::string& key, const std::string& where,
                      const json** out) -> absl::Status {
    auto it = obj.find(key);
    const std::string field = where.empty() ? key : absl::StrCat(where, ".", key);
    if (it == obj.end() || it->is_null()) return fail(field, "is missing");
    if (!it->is_array()) return fail(field, absl::StrCat("must be an array, got ", TypeName(*it)));
    *out = &*it;
    return absl::OkStatus();
  };
  auto string_at = [&](const json& obj, const std::string& key, const std::string& where,
                       bool allow_empty) -> absl::StatusOr<std::string> {
    const std::string field = absl::StrCat(where, ".", key);
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fail(field, "is missing");
    if (!it->is_string()) return fail(field, absl::StrCat("must be a string, got ", TypeName(*it)));
    std::string s = it->get<std::string>();
    if (s.empty() && !allow_empty) return fail(field, "is empty");
    absl::Status utf8 = ValidateUtf8(s, field);
    if (!utf8.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", utf8.message()));
    return s;
  };

  if (!root.is_object()) return fail("top level", absl::StrCat("must be an object, got ", TypeName(root)));
  SquadData data;
  std::unordered_set<std::string> ids;
  const json* articles = nullptr;
  if (auto s = array_at(root, "data", "", &articles); !s.ok()) return s;
  for (size_t a = 0; a < articles->size(); ++a) {
    const std::string aw = absl::StrCat("data[", a, "]");
    const json& article = (*articles)[a];
    if (!article.is_object()) return fail(aw, "must be an object");
    const json* paragraphs = nullptr;
    if (auto s = array_at(article, "paragraphs", aw, &paragraphs); !s.ok()) return s;
    for (size_t p = 0; p < paragraphs->size(); ++p) {
      const std::string pw = absl::StrCat(aw, ".paragraphs[", p, "]");
      const json& paragraph = (*paragraphs)[p];
      if (!paragraph.is_object()) return fail(pw, "must be an object");
      auto context = string_at(paragraph, "context", pw, false);
      if (!context.ok()) return context.status();
      const int64_t context_cps = static_cast<int64_t>(CountCodepoints(*context));
      const int context_index = static_cast<int>(data.contexts.size());
      data.contexts.push_back(*context);
      const json* qas = nullptr;
      if (auto s = array_at(paragraph, "qas", pw, &qas); !s.ok()) return s;
      for (size_t q = 0; q < qas->size(); ++q) {
        const std::string qw = absl::StrCat(pw, ".qas[", q, "]");
        const json& qa = (*qas)[q];
        if (!qa.is_object()) return fail(qw, "must be an object");
        SquadQuestion question;
        question.context_index = context_index;
        auto id = qa.find("id");
        if (id == qa.end() || id->is_null()) return fail(qw + ".id", "is missing");
        if (id->is_string()) {
          question.id = id->get<std::string>();
        } else if (id->is_number_integer()) {
          question.id = absl::StrCat(id->get<int64_t>());
        } else {
          return fail(qw + ".id", absl::StrCat("must be a string, got ", TypeName(*id)));
        }
        if (question.id.empty()) return fail(qw + ".id", "is empty");
        if (!ids.insert(question.id).second) return fail(qw + ".id", absl::StrCat("\"", question.id, "\" is a duplicate"));
        auto qtext = string_at(qa, "question", qw, false);
        if (!qtext.ok()) return qtext.status();
        question.question = *qtext;
        if (auto it = qa.find("is_impossible"); it != qa.end() && !it->is_null()) {
          if (!it->is_boolean()) return fail(qw + ".is_impossible", absl::StrCat("must be a boolean, got ", TypeName(*it)));
          question.is_impossible = it->get<bool>();
        }
        const json* answers = nullptr;
        if (auto it = qa.find("answers"); it != qa.end() && !it->is_null()) {
          if (auto s = array_at(qa, "answers", qw, &answers); !s.ok()) return s;
        } else if (!question.is_impossible) {
          return fail(qw + ".answers", "is missing (and is_impossible is not true)");
        }
        for (size_t k = 0; answers != nullptr && k < answers->size(); ++k) {
          const std::string kw = absl::StrCat(qw, ".answers[", k, "]");
          const json& answer = (*answers)[k];
          if (!answer.is_object()) return fail(kw, "must be an object");
          SquadAnswer ans;
          auto atext = string_at(answer, "text", kw, true);
          if (!atext.ok()) return atext.status();
          ans.text = *atext;
          auto start = answer.find("answer_start");
          if (start == answer.end() || start->is_null()) return fail(kw + ".answer_start", "is missing");
          if (!start->is_number_integer()) {
            return fail(kw + ".answer_start", absl::StrCat("must be an integer, got ", TypeName(*start)));
          }
          ans.answer_start = start->get<int64_t>();
          const int64_t len = static_cast<int64_t>(CountCodepoints(ans.text));
          if (ans.answer_start < 0 || ans.answer_start + len > context_cps) {
            return fail(kw + ".answer_start",
                        absl::StrCat(ans.answer_start, " + answer length ", len,
                                     " is outside the context (", context_cps, " code points)"));
          }
          question.answers.push_back(std::move(ans));
        }
        if (question.is_impossible && !question.answers.empty()) {
          // SQuAD v2 gives unanswerable questions no answers (their spans go
          // to plausible_answers): which one is meant cannot be guessed.
          return fail(qw, absl::StrCat("is_impossible is true but it has ", question.answers.size(),
                                       " answer(s): an unanswerable question has \"answers\": [] (SQuAD v2 keeps "
                                       "such spans in \"plausible_answers\")"));
        }
        // Count answers whose text does not match the context slice.
        if (!question.answers.empty()) {
          const std::vector<size_t> byte_of_cp = CodepointByteOffsets(*context);
          for (const auto& ans : question.answers) {
            const int64_t len = static_cast<int64_t>(CountCodepoints(ans.text));
            const size_t b0 = byte_of_cp[static_cast<size_t>(ans.answer_start)];
            const size_t b1 = byte_of_cp[static_cast<size_t>(ans.answer_start + len)];
            if (context->compare(b0, b1 - b0, ans.text) != 0) ++data.misaligned_answers;
          }
        }
        data.questions.push_back(std::move(question));
      }
    }
  }
  if (data.questions.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no questions"));
  if (data.misaligned_answers > 0) {
    Logger("train")->warn("{}: {} answers do not match their context at answer_start", path,
                          data.misaligned_answers);
  }
  return data;
}

std::vector<size_t> CodepointByteOffsets(const std::string& text) {
  CodepointIndex index(text);
  std::vector<size_t> byte_of(index.num_codepoints() + 1, text.size());
  for (size_t b = text.size() + 1; b-- > 0;) byte_of[index.ToCodepoint(b)] = b;
  return byte_of;
}

absl::StatusOr<RerankData> ReadRerankJsonl(const std::string& path) {
  RerankData data;
  std::unordered_map<std::string, int> groups;
  absl::Status status = ForEachJsonLine(path, [&](int number, const std::string& where,
                                                  const json& j) -> absl::Status {
    RerankExample ex;
    ex.line = number;
    auto query = GetText(j, where, "query");
    if (!query.ok()) return query.status();
    auto passage = GetText(j, where, "passage");
    if (!passage.ok()) return passage.status();
    ex.query = *std::move(query);
    ex.passage = *std::move(passage);
    auto it = j.find("label");
    if (it == j.end() || it->is_null()) return FieldError(where, "label", "is missing");
    if (it->is_boolean()) {
      ex.label = it->get<bool>() ? 1 : 0;
    } else if (it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= 1000) {
      ex.label = static_cast<int>(it->get<int64_t>());
    } else {
      return FieldError(where, "label", absl::StrCat("must be 0, 1 (or a non-negative integer grade), got ",
                                                     it->dump()));
    }
    auto [g, inserted] = groups.emplace(ex.query, static_cast<int>(groups.size()));
    ex.group = g->second;
    data.examples.push_back(std::move(ex));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  if (data.examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  data.num_groups = static_cast<int>(groups.size());
  return data;
}

absl::StatusOr<std::vector<TextDocument>> ReadTextDocuments(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::vector<TextDocument> docs;
  std::string line;
  int number = 0;
  bool open = false;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\f\v") == std::string::npos) {
      open = false;
      continue;
    }
    absl::Status utf8 = ValidateUtf8(line, "line");
    if (!utf8.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", utf8.message()));
    if (!open) {
      docs.push_back(TextDocument{{}, number});
      open = true;
    }
    docs.back().lines.push_back(line);
  }
  if (docs.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no text"));
  return docs;
}

}  // namespace dserve
