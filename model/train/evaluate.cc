#include "model/train/evaluate.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "model/decode/decode.h"
#include "model/train/features.h"
#include "model/train/metrics.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int MaxLength(const ModelConfig& config, const EvalOptions& options) {
  return options.max_length > 0 ? options.max_length : static_cast<int>(config.max_sequence_length());
}

std::vector<int64_t> Widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

absl::StatusOr<HeadOutputs> RunRows(const Predictor& predict, const ModelConfig& config, const Tokenizer& tokenizer,
                                    const std::vector<std::vector<int64_t>>& rows,
                                    const std::vector<std::vector<int64_t>>& types) {
  TokenBatch batch =
      TokenBatch::Pad(rows, config.type_vocab_size > 0 ? types : std::vector<std::vector<int64_t>>(), tokenizer.pad_id());
  return predict(batch);
}

}  // namespace

absl::StatusOr<EvalResult> EvaluateClassify(const ClassifyData& data, const Tokenizer& tokenizer,
                                            const ModelConfig& config, const Predictor& predict,
                                            const EvalOptions& options) {
  EvalResult result;
  const auto started = Clock::now();
  const std::vector<std::string> labels = config.labels();
  ClassifyDecodeOptions decode;
  ASSIGN_OR_RETURN(decode.problem_type, ParseProblemType(config.problem_type));
  decode.temperature = config.dserve.temperature;
  EncodeOptions encode;
  encode.max_length = MaxLength(config, options);
  encode.truncation = Truncation::kLongestFirst;
  const bool multi = decode.problem_type == ProblemType::kMultiLabel;

  std::vector<std::vector<std::string>> gold, predicted;
  if (options.want_predictions) result.predictions = nlohmann::json::array();
  const size_t n = data.examples.size();
  const size_t bs = static_cast<size_t>(std::max(1, options.batch_size));
  for (size_t begin = 0; begin < n; begin += bs) {
    const auto t0 = Clock::now();
    const size_t end = std::min(n, begin + bs);
    std::vector<std::vector<int64_t>> rows, types;
    for (size_t i = begin; i < end; ++i) {
      auto enc = tokenizer.Encode(data.examples[i].text, encode);
      if (!enc.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", data.examples[i].line, ": ", enc.status().message()));
      rows.push_back(Widen(enc->ids));
      types.push_back(Widen(enc->type_ids));
    }
    ASSIGN_OR_RETURN(HeadOutputs out, RunRows(predict, config, tokenizer, rows, types));
    if (out.num_labels != static_cast<int64_t>(labels.size())) {
      return absl::InvalidArgumentError(absl::StrCat("model has ", out.num_labels, " outputs but ", labels.size(), " labels"));
    }
    for (size_t i = begin; i < end; ++i) {
      absl::Span<const float> logits(out.logits.data() + (i - begin) * labels.size(), labels.size());
      ASSIGN_OR_RETURN(auto scored, DecodeClassification(logits, labels, decode));
      std::vector<std::string> pred;
      if (multi) {
        for (const auto& s : scored) {
          if (s.score >= 0.5f) pred.push_back(s.label);
        }
      } else {
        pred.push_back(scored.front().label);
      }
      gold.push_back(data.examples[i].labels);
      if (options.want_predictions) {
        nlohmann::json scores = nlohmann::json::object();
        for (const auto& s : scored) scores[s.label] = s.score;
        result.predictions.push_back({{"line", data.examples[i].line}, {"predicted", pred},
                                      {"gold", data.examples[i].labels}, {"scores", scores}});
      }
      predicted.push_back(std::move(pred));
    }
    const double ms = MsSince(t0);
    for (size_t i = begin; i < end; ++i) result.item_latency_ms.push_back(ms);
  }
  ClassifyScores all = ScoreClassification(gold, predicted);
  result.metrics = all.ToJson(/*with_per_label=*/true);
  // Per tag.
  std::map<std::string, std::vector<size_t>> by_tag;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& t : data.examples[i].tags) by_tag[t].push_back(i);
  }
  nlohmann::json per_tag = nlohmann::json::object();
  for (const auto& [tag, idx] : by_tag) {
    std::vector<std::vector<std::string>> g, p;
    for (size_t i : idx) {
      g.push_back(gold[i]);
      p.push_back(predicted[i]);
    }
    ClassifyScores s = ScoreClassification(g, p);
    per_tag[tag] = {{"accuracy", s.accuracy}, {"macro_f1", s.macro_f1}, {"count", s.count}};
  }
  result.metrics["per_tag"] = per_tag;
  result.main_metric = all.accuracy;
  result.main_metric_name = "accuracy";
  result.seconds = MsSince(started) / 1000.0;
  return result;
}

absl::StatusOr<EvalResult> EvaluateAnswer(const SquadData& data, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const Predictor& predict,
                                          const EvalOptions& options) {
  EvalResult result;
  const auto started = Clock::now();
  const int max_length = MaxLength(config, options);
  QaDecodeOptions decode;
  decode.n_best = static_cast<uint32_t>(config.dserve.qa.n_best);
  decode.max_answer_tokens = static_cast<uint32_t>(config.dserve.qa.max_answer_tokens);
  decode.null_score_diff_threshold = static_cast<float>(config.dserve.qa.null_score_diff_threshold);
  decode.top_k = 1;

  std::map<std::string, std::string> final_preds, span_preds;
  std::map<std::string, double> na_probs;
  const size_t n = data.questions.size();
  const size_t bs = static_cast<size_t>(std::max(1, options.batch_size));
  size_t begin = 0;
  while (begin < n) {
    const auto t0 = Clock::now();
    // Whole questions until the batch holds at least bs windows.
    std::vector<std::vector<Window>> windows;
    size_t end = begin, count = 0;
    while (end < n && count < bs) {
      const SquadQuestion& q = data.questions[end];
      const std::string& context = data.contexts[static_cast<size_t>(q.context_index)];
      auto ws = tokenizer.EncodeQuestionContextWindows(q.question, context, max_length,
                                                       config.dserve.qa.doc_stride, /*clamp_stride=*/true);
      if (!ws.ok()) return absl::InvalidArgumentError(absl::StrCat("question ", q.id, ": ", ws.status().message()));
      count += ws->size();
      windows.push_back(*std::move(ws));
      ++end;
    }
    std::vector<std::vector<int64_t>> rows, types;
    for (const auto& ws : windows) {
      for (const auto& w : ws) {
        rows.push_back(Widen(w.ids));
        types.push_back(Widen(w.type_ids));
      }
    }
    ASSIGN_OR_RETURN(HeadOutputs out, RunRows(predict, config, tokenizer, rows, types));
    size_t row = 0;
    for (size_t qi = begin; qi < end; ++qi) {
      const SquadQuestion& q = data.questions[qi];
      const std::string& context = data.contexts[static_cast<size_t>(q.context_index)];
      std::vector<QaWindow> qa;
      for (const auto& w : windows[qi - begin]) {
        const size_t len = w.ids.size();
        const float* s = out.start_logits.data() + row * static_cast<size_t>(out.length);
        const float* e = out.end_logits.data() + row * static_cast<size_t>(out.length);
        qa.push_back(QaWindow{absl::Span<const float>(s, len), absl::Span<const float>(e, len),
                              absl::Span<const std::optional<ByteSpan>>(w.second_offsets), 0});
        ++row;
      }
      const absl::string_view contexts[1] = {context};
      ASSIGN_OR_RETURN(QaDecodeResult decoded, DecodeAnswer(qa, contexts, decode));
      const std::string best_span = decoded.answers.empty() ? "" : decoded.answers.front().text;
      span_preds[q.id] = best_span;
      final_preds[q.id] = decoded.no_answer ? "" : best_span;
      na_probs[q.id] = decoded.null_score_diff;
    }
    const double ms = MsSince(t0);
    for (size_t qi = begin; qi < end; ++qi) result.item_latency_ms.push_back(ms);
    begin = end;
  }
  std::vector<SquadGold> gold;
  for (const auto& q : data.questions) {
    SquadGold g;
    g.id = q.id;
    for (const auto& a : q.answers) g.answers.push_back(a.text);
    gold.push_back(std::move(g));
  }
  SquadScores scores = ScoreSquadV2(gold, final_preds);
  // find_best_thresh over the candidate spans (see the header).
  SquadScores candidate = ScoreSquadV2(gold, span_preds, &na_probs);
  scores.best_exact = candidate.best_exact;
  scores.best_exact_thresh = candidate.best_exact_thresh;
  scores.best_f1 = candidate.best_f1;
  scores.best_f1_thresh = candidate.best_f1_thresh;
  auto [threshold, best_f1] = ChooseNullThreshold(gold, span_preds, na_probs);
  const CrossFit cross = CrossFitThreshold(gold, span_preds, na_probs);
  result.metrics = scores.ToJson();
  result.metrics["null_score_diff_threshold"] = config.dserve.qa.null_score_diff_threshold;
  result.metrics["chosen_null_threshold"] = threshold;
  result.metrics["chosen_null_threshold_f1"] = best_f1;
  result.metrics["crossfit_f1"] = cross.f1;
  result.metrics["crossfit_exact"] = cross.exact;
  result.metrics["crossfit_thresholds"] = {cross.thresholds[0], cross.thresholds[1]};
  result.null_threshold = threshold;
  // Checkpoint selection on F1 whose threshold was not tuned on the same
  // questions (issue 18, defect 7): best_f1 would reward a checkpoint for
  // the threshold's fit to this very set.
  result.main_metric = cross.f1;
  result.main_metric_name = "crossfit_f1";
  if (options.want_predictions) {
    result.predictions = nlohmann::json::object();
    for (const auto& [id, text] : final_preds) result.predictions[id] = text;
  }
  result.seconds = MsSince(started) / 1000.0;
  return result;
}

CrossFit CrossFitThreshold(const std::vector<SquadGold>& gold, const std::map<std::string, std::string>& spans,
                           const std::map<std::string, double>& na_probs) {
  CrossFit out;
  std::vector<SquadGold> folds[2];
  for (const auto& g : gold) folds[FoldOf(g.id)].push_back(g);
  for (int f = 0; f < 2; ++f) {
    if (!folds[f].empty()) out.thresholds[f] = ChooseNullThreshold(folds[f], spans, na_probs).first;
  }
  std::map<std::string, std::string> answered;  // each fold's questions under the other fold's threshold
  for (int f = 0; f < 2; ++f) {
    // A fold alone (tiny sets): its own threshold, as nothing else exists.
    const double t = out.thresholds[folds[1 - f].empty() ? f : 1 - f];
    for (const auto& g : folds[f]) {
      auto span = spans.find(g.id);
      auto na = na_probs.find(g.id);
      if (span == spans.end() || na == na_probs.end()) continue;
      answered[g.id] = na->second > t ? "" : span->second;
    }
  }
  const SquadScores scores = ScoreSquadV2(gold, answered);
  out.f1 = scores.f1;
  out.exact = scores.exact;
  return out;
}

int FoldOf(const std::string& id) {
  uint32_t h = 2166136261u;  // FNV-1a: stable across runs and machines
  for (unsigned char c : id) h = (h ^ c) * 16777619u;
  return static_cast<int>(h & 1u);
}

absl::StatusOr<EvalResult> EvaluateRerank(const RerankData& data, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const Predictor& predict,
                                          const EvalOptions& options) {
  EvalResult result;
  const auto started = Clock::now();
  const int max_length = MaxLength(config, options);
  std::vector<double> scores(data.examples.size(), 0.0);
  const size_t n = data.examples.size();
  const size_t bs = static_cast<size_t>(std::max(1, options.batch_size));
  size_t begin = 0;
  while (begin < n) {
    const auto t0 = Clock::now();
    std::vector<std::vector<int64_t>> rows, types;
    std::vector<size_t> owner;
    size_t end = begin;
    while (end < n && rows.size() < bs) {
      const RerankExample& ex = data.examples[end];
      auto chunks = tokenizer.EncodeQueryDocumentChunks(ex.query, ex.passage, max_length,
                                                        config.dserve.qa.doc_stride, /*clamp_stride=*/true);
      if (!chunks.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", ex.line, ": ", chunks.status().message()));
      for (const auto& w : *chunks) {
        rows.push_back(Widen(w.ids));
        types.push_back(Widen(w.type_ids));
        owner.push_back(end);
      }
      ++end;
    }
    ASSIGN_OR_RETURN(HeadOutputs out, RunRows(predict, config, tokenizer, rows, types));
    if (out.num_labels < 1) return absl::InvalidArgumentError("rerank model has no outputs");
    std::vector<std::vector<float>> chunk_logits(end - begin);
    for (size_t r = 0; r < owner.size(); ++r) {
      chunk_logits[owner[r] - begin].push_back(out.logits[r * static_cast<size_t>(out.num_labels)]);
    }
    RerankDecodeOptions decode;
    decode.raw_scores = true;
    decode.temperature = config.dserve.temperature;
    ASSIGN_OR_RETURN(auto ranked, DecodeRerank(chunk_logits, decode));
    for (const auto& r : ranked) scores[begin + r.index] = r.score;
    const double ms = MsSince(t0);
    for (size_t i = begin; i < end; ++i) result.item_latency_ms.push_back(ms);
    begin = end;
  }
  std::vector<std::vector<std::pair<double, int>>> groups(static_cast<size_t>(data.num_groups));
  for (size_t i = 0; i < n; ++i) {
    groups[static_cast<size_t>(data.examples[i].group)].emplace_back(scores[i], data.examples[i].label);
  }
  RankingScores ranking = ScoreRanking(groups);
  result.metrics = ranking.ToJson();
  result.main_metric = ranking.mrr_at_10;
  result.main_metric_name = "mrr@10";
  if (options.want_predictions) {
    result.predictions = nlohmann::json::array();
    for (size_t i = 0; i < n; ++i) {
      result.predictions.push_back({{"line", data.examples[i].line}, {"score", scores[i]}, {"label", data.examples[i].label}});
    }
  }
  result.seconds = MsSince(started) / 1000.0;
  return result;
}

absl::StatusOr<EvalResult> EvaluateFile(const std::string& path, const Tokenizer& tokenizer,
                                        const ModelConfig& config, const Predictor& predict,
                                        const EvalOptions& options) {
  switch (config.task()) {
    case Task::kClassify: {
      ASSIGN_OR_RETURN(ClassifyData data, ReadClassifyJsonl(path));
      return EvaluateClassify(data, tokenizer, config, predict, options);
    }
    case Task::kAnswer: {
      ASSIGN_OR_RETURN(SquadData data, ReadSquadJson(path));
      return EvaluateAnswer(data, tokenizer, config, predict, options);
    }
    case Task::kRerank: {
      ASSIGN_OR_RETURN(RerankData data, ReadRerankJsonl(path));
      return EvaluateRerank(data, tokenizer, config, predict, options);
    }
    default:
      return absl::UnimplementedError(absl::StrCat("eval: task '", TaskName(config.task()), "' is not supported here"));
  }
}

void AddCostMetrics(EvalResult* result) {
  const auto& lat = result->item_latency_ms;
  result->metrics["latency_p50_ms"] = Percentile(lat, 50);
  result->metrics["latency_p99_ms"] = Percentile(lat, 99);
  result->metrics["items"] = lat.size();
  result->metrics["items_per_s"] = result->seconds > 0 ? lat.size() / result->seconds : 0.0;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  result->metrics["peak_rss_bytes"] = static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace dserve
