// Readers for the training and evaluation data formats of DESIGN §4.
// Torch-free. Every error is InvalidArgument (NotFound when the file cannot
// be opened) and names the file, the line (JSONL) or the JSON path (SQuAD),
// and the field, e.g. "train.jsonl:12: field \"label\" must be a string or
// an integer, got array".
//
// Thread safety: plain functions over plain structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dserve {

// ---------------------------------------------------------------- classify --
// JSONL, one object per line: {"text": s, "label": l, "tags": [..]?} or, for
// multi-label data, {"text": s, "labels": [l, ...], "tags": [..]?}. Labels
// are strings; integers are accepted and kept as their decimal text. A file
// uses one of "label" / "labels" on every line. Blank lines are skipped.
struct ClassifyExample {
  std::string text;
  std::vector<std::string> labels;  // exactly one unless multi-label
  std::vector<std::string> tags;
  int line = 0;  // 1-based line in the file
};

struct ClassifyData {
  std::vector<ClassifyExample> examples;
  bool multi_label = false;  // the file uses "labels"
};

absl::StatusOr<ClassifyData> ReadClassifyJsonl(const std::string& path);

// Sorted unique labels of `data` (the label set of a model trained from it).
std::vector<std::string> CollectLabels(const ClassifyData& data);

// ---------------------------------------------------------------- SQuAD v2 --
// {"data": [{"paragraphs": [{"context": s, "qas": [{"id", "question",
// "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}.
// answer_start counts Unicode code points (as Python indexes str).
struct SquadAnswer {
  std::string text;
  int64_t answer_start = 0;  // code points into the context
};

struct SquadQuestion {
  std::string id;
  std::string question;
  int context_index = 0;  // into SquadData::contexts
  std::vector<SquadAnswer> answers;
  bool is_impossible = false;
  // True when the question is trained as unanswerable: is_impossible, or no
  // answers listed.
  bool Unanswerable() const { return is_impossible || answers.empty(); }
};

struct SquadData {
  std::vector<std::string> contexts;
  std::vector<SquadQuestion> questions;
  // Answers whose text differs from the context at answer_start (kept; the
  // span is trained as given by answer_start and the text's length).
  int misaligned_answers = 0;
};

// Errors: malformed JSON (with nlohmann's line/column), a missing or
// mistyped field (named by its JSON path, e.g.
// "data[0].paragraphs[1].qas[2].answers[0].answer_start"), an answer outside
// its context, duplicate question ids, invalid UTF-8.
absl::StatusOr<SquadData> ReadSquadJson(const std::string& path);

// byte_of[c] = UTF-8 byte offset where code point c of `text` starts, for
// c in [0, code points]; byte_of[code points] = text.size().
std::vector<size_t> CodepointByteOffsets(const std::string& text);

// ---------------------------------------------------------------- rerank --
// JSONL {"query": q, "passage": p, "label": 0|1} (a non-negative integer
// relevance grade, or a boolean). Pairs are grouped by query text for eval.
struct RerankExample {
  std::string query;
  std::string passage;
  int label = 0;
  int group = 0;  // index of the query among the distinct queries, in first-seen order
  int line = 0;
};

struct RerankData {
  std::vector<RerankExample> examples;
  int num_groups = 0;
};

absl::StatusOr<RerankData> ReadRerankJsonl(const std::string& path);

// ---------------------------------------------------------------- mlm --
// UTF-8 text; blank (whitespace-only) lines separate documents; each other
// line is kept (trailing '\r' removed) as one segment of its document.
struct TextDocument {
  std::vector<std::string> lines;
  int first_line = 0;
};

absl::StatusOr<std::vector<TextDocument>> ReadTextDocuments(const std::string& path);

}  // namespace dserve
