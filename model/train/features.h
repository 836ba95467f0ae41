// Training features: examples of each task tokenized into model inputs with
// their targets (torch-free). A "unit" is what the sampler shuffles and what
// the loss is averaged over: one feature, or (listwise rerank) one query's
// candidates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deberta/model.h"  // TokenBatch (torch-free header)
#include "model/tokenizer/tokenizer.h"
#include "model/train/data.h"

namespace dserve {

struct Feature {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<int> labels;  // classify: label ids (all of them for multi-label)
  float target = 0.0f;      // rerank: 1 relevant, 0 not
  int pair = -1;            // rerank: the (query, passage) example this chunk is of
  int start = 0, end = 0;   // answer: token positions (0 = [CLS] = no answer)
};

struct FeatureSet {
  std::vector<Feature> features;
  std::vector<std::vector<int>> units;  // feature indices per unit
  int64_t truncated = 0;                // examples cut to max_length
};

// classify: [CLS] text [SEP], longest-first truncation to max_length;
// labels mapped through `label_ids` (label -> id); an unknown label is an
// error naming the line.
absl::StatusOr<FeatureSet> BuildClassifyFeatures(const ClassifyData& data, const Tokenizer& tokenizer,
                                                 const std::vector<std::string>& labels, int max_length);

// answer: one feature per window (EncodeQuestionContextWindows with
// `doc_stride`); start/end as Hugging Face run_qa.py prepare_train_features:
// the first answer's code-point span -> bytes -> the first/last context
// tokens covering it; impossible questions and answers not wholly inside
// the window -> 0 ([CLS]).
absl::StatusOr<FeatureSet> BuildAnswerFeatures(const SquadData& data, const Tokenizer& tokenizer, int max_length,
                                               int doc_stride);

// rerank, the way the server scores (issue 18, defect 6): every pair is
// [CLS] query [SEP] chunk [SEP] over the passage's chunks
// (EncodeQueryDocumentChunks with `doc_stride`, clamped, as serving and
// eval do), one feature per chunk with `pair` set; the trainer max-pools a
// pair's chunk logits as the server does. A unit is one pair's chunks, or
// with `listwise` every chunk of one query's pairs (in pair order).
// `truncated` counts the pairs that needed more than one chunk.
absl::StatusOr<FeatureSet> BuildRerankFeatures(const RerankData& data, const Tokenizer& tokenizer,
                                               int max_length, int doc_stride, bool listwise);

// Pads `indices` of `features` into one batch (right padding with pad_id).
TokenBatch CollateFeatures(const std::vector<Feature>& features, const std::vector<int>& indices, int pad_id,
                           bool with_type_ids);

}  // namespace dserve
