#include "model/tools/forward_command.h"

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/deberta/model.h"

namespace dserve {
namespace {

struct Line {
  std::vector<int64_t> ids;
  std::vector<int64_t> types;
};

// Reads one id array; the error names the field and the offending element.
absl::Status ReadIds(const nlohmann::json& doc, const char* field, std::vector<int64_t>* out) {
  const auto& arr = doc.at(field);
  if (!arr.is_array()) return absl::InvalidArgumentError(absl::StrCat(field, " must be an array of integers"));
  out->reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] is not an integer: ", arr[i].dump()));
    }
    out->push_back(arr[i].get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ParseLine(const std::string& text, const ModelConfig& config, int64_t max_length, Line* line) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return absl::InvalidArgumentError("not a JSON object");
  if (!doc.contains("input_ids")) return absl::InvalidArgumentError("missing input_ids");
  if (auto s = ReadIds(doc, "input_ids", &line->ids); !s.ok()) return s;
  if (line->ids.empty()) return absl::InvalidArgumentError("input_ids is empty");
  for (size_t i = 0; i < line->ids.size(); ++i) {
    if (line->ids[i] < 0 || line->ids[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("input_ids[", i, "] = ", line->ids[i],
                                                     " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  if (static_cast<int64_t>(line->ids.size()) > max_length) {
    return absl::InvalidArgumentError(absl::StrCat(line->ids.size(), " tokens exceed the model's limit of ",
                                                   max_length, " (max_position_embeddings with absolute positions)"));
  }
  if (doc.contains("token_type_ids")) {
    if (auto s = ReadIds(doc, "token_type_ids", &line->types); !s.ok()) return s;
    if (line->types.size() != line->ids.size()) {
      return absl::InvalidArgumentError(absl::StrCat("token_type_ids has ", line->types.size(),
                                                     " entries, input_ids has ", line->ids.size()));
    }
    // type_vocab_size 0 (DeBERTa v1 base/large, v3): the model ignores
    // token types, as Hugging Face's does; a pair's 0/1 types are accepted.
    const int64_t types = config.type_vocab_size > 0 ? config.type_vocab_size : INT64_MAX;
    for (size_t i = 0; i < line->types.size(); ++i) {
      if (line->types[i] < 0 || line->types[i] >= types) {
        return absl::InvalidArgumentError(
            absl::StrCat("token_type_ids[", i, "] = ", line->types[i], " is outside [0, ", types, ")"));
      }
    }
  }
  return absl::OkStatus();
}

nlohmann::json Slice(const std::vector<float>& v, size_t begin, size_t n) {
  return nlohmann::json(std::vector<float>(v.begin() + begin, v.begin() + begin + n));
}

}  // namespace

int RunForwardCommand(const ForwardCommandOptions& options, std::istream& in, std::ostream& out,
                      std::ostream& err) {
  auto loaded = DebertaModel::Load(options.model_dir, ModelOptions{options.dtype, options.device});
  if (!loaded.ok()) {
    err << "dserve forward: cannot load model: " << loaded.status().message() << "\n";
    return 2;
  }
  const DebertaModel& model = **loaded;
  const ModelConfig& config = model.config();
  // With relative positions only, nothing bounds the length but memory.
  const int64_t max_length =
      config.position_biased_input ? config.max_position_embeddings : std::numeric_limits<int64_t>::max();
  std::vector<Line> lines;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    if (absl::Status s = ParseLine(text, config, max_length, &line); !s.ok()) {
      err << "dserve forward: line " << number << ": " << s.message() << "\n";
      return 1;
    }
    lines.push_back(std::move(line));
  }
  const size_t step = static_cast<size_t>(std::max(1, options.batch_size));
  for (size_t first = 0; first < lines.size(); first += step) {
    const size_t last = std::min(lines.size(), first + step);
    std::vector<std::vector<int64_t>> ids, types;
    bool any_types = false;
    for (size_t i = first; i < last; ++i) any_types |= !lines[i].types.empty();
    for (size_t i = first; i < last; ++i) {
      ids.push_back(lines[i].ids);
      if (any_types) types.push_back(lines[i].types.empty() ? std::vector<int64_t>(lines[i].ids.size(), 0) : lines[i].types);
    }
    auto result = model.Run(TokenBatch::Pad(ids, types, 0), options.hidden);
    if (!result.ok()) {
      err << "dserve forward: lines " << first + 1 << "-" << last << ": " << result.status().message() << "\n";
      return 1;
    }
    const HeadOutputs& o = *result;
    for (size_t r = 0; r < last - first; ++r) {
      const size_t n = ids[r].size();
      nlohmann::json line;
      if (!o.logits.empty()) line["logits"] = Slice(o.logits, r * o.num_labels, o.num_labels);
      if (!o.start_logits.empty()) {
        line["start_logits"] = Slice(o.start_logits, r * o.length, n);
        line["end_logits"] = Slice(o.end_logits, r * o.length, n);
      }
      if (options.hidden) {
        nlohmann::json rows = nlohmann::json::array();
        for (size_t t = 0; t < n; ++t)
          rows.push_back(Slice(o.hidden, (r * o.length + t) * o.hidden_size, o.hidden_size));
        line["last_hidden_state"] = std::move(rows);
      }
      out << line.dump() << "\n";
    }
  }
  out.flush();
  return 0;
}

}  // namespace dserve
