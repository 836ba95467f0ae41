#include "model/train/features.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace dserve {

absl::StatusOr<FeatureSet> BuildClassifyFeatures(const ClassifyData& data, const Tokenizer& tokenizer,
                                                 const std::vector<std::string>& labels, int max_length) {
  std::map<std::string, int> label_ids;
  for (size_t i = 0; i < labels.size(); ++i) label_ids[labels[i]] = static_cast<int>(i);
  FeatureSet set;
  EncodeOptions options;
  options.max_length = max_length;
  options.truncation = Truncation::kLongestFirst;
  for (const auto& ex : data.examples) {
    auto enc = tokenizer.Encode(ex.text, options);
    if (!enc.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", ex.line, ": ", enc.status().message()));
    Feature f;
    f.ids = std::move(enc->ids);
    f.type_ids = std::move(enc->type_ids);
    if (static_cast<int>(f.ids.size()) == max_length) ++set.truncated;
    for (const auto& l : ex.labels) {
      auto it = label_ids.find(l);
      if (it == label_ids.end()) {
        return absl::InvalidArgumentError(absl::StrCat("line ", ex.line, ": label \"", l, "\" is not one of the model's ",
                                                       labels.size(), " labels"));
      }
      f.labels.push_back(it->second);
    }
    set.units.push_back({static_cast<int>(set.features.size())});
    set.features.push_back(std::move(f));
  }
  return set;
}

absl::StatusOr<FeatureSet> BuildAnswerFeatures(const SquadData& data, const Tokenizer& tokenizer, int max_length,
                                               int doc_stride) {
  FeatureSet set;
  std::vector<std::vector<size_t>> byte_of(data.contexts.size());
  for (const auto& q : data.questions) {
    const std::string& context = data.contexts[static_cast<size_t>(q.context_index)];
    auto windows = tokenizer.EncodeQuestionContextWindows(q.question, context, max_length, doc_stride,
                                                          /*clamp_stride=*/true);
    if (!windows.ok()) return absl::InvalidArgumentError(absl::StrCat("question ", q.id, ": ", windows.status().message()));
    size_t start_byte = 0, end_byte = 0;
    const bool impossible = q.Unanswerable();
    if (!impossible) {
      auto& table = byte_of[static_cast<size_t>(q.context_index)];
      if (table.empty()) table = CodepointByteOffsets(context);
      const SquadAnswer& a = q.answers.front();
      const size_t len = CountCodepoints(a.text);
      start_byte = table[static_cast<size_t>(a.answer_start)];
      end_byte = table[static_cast<size_t>(a.answer_start) + len];
    }
    if (windows->size() > 1) ++set.truncated;
    for (auto& w : *windows) {
      Feature f;
      f.ids = std::move(w.ids);
      f.type_ids = std::move(w.type_ids);
      if (!impossible) {
        int first = -1, last = -1;
        for (size_t t = 0; t < w.sequence_ids.size(); ++t) {
          if (w.sequence_ids[t] == 1 && w.second_offsets[t].has_value()) {
            if (first < 0) first = static_cast<int>(t);
            last = static_cast<int>(t);
          }
        }
        if (first >= 0 && w.second_offsets[first]->begin <= start_byte && w.second_offsets[last]->end >= end_byte) {
          int s = first;
          while (s <= last && w.second_offsets[s]->begin <= start_byte) ++s;
          int e = last;
          while (e >= first && w.second_offsets[e]->end >= end_byte) --e;
          f.start = s - 1;
          f.end = std::max(e + 1, f.start);
        }
      }
      set.units.push_back({static_cast<int>(set.features.size())});
      set.features.push_back(std::move(f));
    }
  }
  return set;
}

absl::StatusOr<FeatureSet> BuildRerankFeatures(const RerankData& data, const Tokenizer& tokenizer,
                                               int max_length, int doc_stride, bool listwise) {
  FeatureSet set;
  std::vector<std::vector<int>> groups(static_cast<size_t>(data.num_groups));
  for (size_t e = 0; e < data.examples.size(); ++e) {
    const RerankExample& ex = data.examples[e];
    auto chunks = tokenizer.EncodeQueryDocumentChunks(ex.query, ex.passage, max_length, doc_stride,
                                                      /*clamp_stride=*/true);
    if (!chunks.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", ex.line, ": ", chunks.status().message()));
    if (chunks->size() > 1) ++set.truncated;
    std::vector<int> unit;
    for (auto& w : *chunks) {
      Feature f;
      f.ids = std::move(w.ids);
      f.type_ids = std::move(w.type_ids);
      f.target = ex.label > 0 ? 1.0f : 0.0f;
      f.pair = static_cast<int>(e);
      unit.push_back(static_cast<int>(set.features.size()));
      set.features.push_back(std::move(f));
    }
    auto& group = groups[static_cast<size_t>(ex.group)];
    group.insert(group.end(), unit.begin(), unit.end());
    if (!listwise) set.units.push_back(std::move(unit));
  }
  if (listwise) set.units = std::move(groups);
  return set;
}

TokenBatch CollateFeatures(const std::vector<Feature>& features, const std::vector<int>& indices, int pad_id,
                           bool with_type_ids) {
  std::vector<std::vector<int64_t>> rows, types;
  for (int i : indices) {
    const Feature& f = features[static_cast<size_t>(i)];
    rows.emplace_back(f.ids.begin(), f.ids.end());
    if (with_type_ids) types.emplace_back(f.type_ids.begin(), f.type_ids.end());
  }
  return TokenBatch::Pad(rows, types, pad_id);
}

}  // namespace dserve
