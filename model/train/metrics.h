// Scorers for `dserve eval` and for evaluation during training (DESIGN §4
// metric names). Torch-free, pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dserve {

// ---------------------------------------------------------------- SQuAD v2 --
// Official evaluate-v2.0.py semantics.

// lowercase -> delete ASCII punctuation (string.punctuation) -> replace the
// words a/an/the with a space -> collapse whitespace. Lowercasing covers
// ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (Python's str.lower
// covers all of Unicode); word characters for the article rule are ASCII
// letters, digits, '_' and every non-ASCII code point outside the common
// punctuation/space blocks (U+0080-U+00BF, U+2000-U+206F, U+3000-U+303F).
std::string NormalizeAnswer(const std::string& s);
// Whitespace tokens of NormalizeAnswer(s).
std::vector<std::string> AnswerTokens(const std::string& s);
// 1 if the normalised strings are equal, else 0.
int ExactMatch(const std::string& prediction, const std::string& gold);
// Token F1 (empty on either side: 1 when both are empty, else 0).
double TokenF1(const std::string& prediction, const std::string& gold);

struct SquadGold {
  std::string id;
  std::vector<std::string> answers;  // raw answer texts (may be empty = no answer)
};

struct SquadScores {
  double exact = 0, f1 = 0;
  int total = 0;
  double has_ans_exact = 0, has_ans_f1 = 0;
  int has_ans_total = 0;
  double no_ans_exact = 0, no_ans_f1 = 0;
  int no_ans_total = 0;
  // Only when na_probs were given: find_best_thresh on F1.
  std::optional<double> best_f1;
  std::optional<double> best_f1_thresh;
  std::optional<double> best_exact;
  std::optional<double> best_exact_thresh;
  // The official names: exact, f1, total, HasAns_exact, HasAns_f1,
  // HasAns_total, NoAns_exact, NoAns_f1, NoAns_total, best_exact,
  // best_exact_thresh, best_f1, best_f1_thresh. HasAns_*/NoAns_* are always
  // written (0 with a total of 0 when there are no such questions; the
  // official script omits them then).
  nlohmann::json ToJson() const;
};

// Scores `predictions` (qid -> text; a missing qid is skipped, as the
// official script does). `na_probs` (qid -> no-answer score; higher = more
// likely no answer), when given, enables find_best_thresh: questions whose
// score is above a threshold are answered "" and the others keep their
// prediction. Official semantics: has_ans = the gold answer list is
// non-empty; gold texts that normalise to "" are dropped and an empty list
// becomes [""]; exact/F1 are the max over golds; scores are percentages.
SquadScores ScoreSquadV2(const std::vector<SquadGold>& gold,
                         const std::map<std::string, std::string>& predictions,
                         const std::map<std::string, double>* na_probs = nullptr);

// The no-answer threshold t that maximises F1 when every question with
// na_prob > t is answered "" and the others get `predictions[qid]` (give the
// best non-empty span here, not the thresholded answer). Unlike the
// official best_f1_thresh, ties are resolved as a threshold would: equal
// scores are answered together; the "answer nothing" optimum returns a
// threshold below every score. Returns (threshold, best F1 in percent).
std::pair<double, double> ChooseNullThreshold(const std::vector<SquadGold>& gold,
                                              const std::map<std::string, std::string>& predictions,
                                              const std::map<std::string, double>& na_probs);

// ---------------------------------------------------------------- classify --
struct LabelStats {
  double precision = 0, recall = 0, f1 = 0;
  int support = 0;    // gold occurrences
  int predicted = 0;  // predicted occurrences
};

struct ClassifyScores {
  double accuracy = 0;  // single label: correct / n; multi-label: exact set match
  double macro_f1 = 0;  // mean F1 over labels that occur in gold or predictions
  int count = 0;
  std::map<std::string, LabelStats> per_label;  // labels occurring in gold or predictions
  nlohmann::json ToJson(bool with_per_label) const;
};

// gold[i] and predicted[i] are the label sets of example i (one label each
// for single-label data). Precision (recall) of a label with no predictions
// (no support) is 0, as scikit-learn's zero_division=0.
ClassifyScores ScoreClassification(const std::vector<std::vector<std::string>>& gold,
                                   const std::vector<std::vector<std::string>>& predicted);

// ---------------------------------------------------------------- ranking --
struct RankingScores {
  double mrr_at_10 = 0, ndcg_at_10 = 0, map = 0;
  int queries = 0;                   // queries scored (with >= 1 relevant passage)
  int queries_without_relevant = 0;  // skipped
  nlohmann::json ToJson() const;     // "mrr@10", "ndcg@10", "map", "queries", ...
};

// groups[q] = (score, relevance grade) of query q's candidates. Each list is
// ranked by score descending, ties by input order. MRR@10: 1/rank of the
// first relevant (grade > 0) in the top 10, else 0. nDCG@10 with gain
// 2^grade - 1 and discount log2(rank + 1). MAP: mean over relevant passages
// of precision at their rank. Queries without a relevant passage are
// skipped (as trec_eval skips queries absent from the qrels) and counted.
RankingScores ScoreRanking(const std::vector<std::vector<std::pair<double, int>>>& groups);

// ---------------------------------------------------------------- latency --
// Nearest-rank percentile (p in [0, 100]) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

}  // namespace dserve
