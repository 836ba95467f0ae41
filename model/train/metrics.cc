#include "model/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "model/tokenizer/utf8.h"

namespace dserve {
namespace {

char32_t LowerCodepoint(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;                 // Latin-1
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149) {  // Latin Extended-A
    const bool odd_block = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_block) return (c % 2 == 1) ? c + 1 : c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;  // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                // Cyrillic
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsAsciiPunct(char32_t c) { return c < 0x80 && std::strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", static_cast<char>(c)) && c != 0; }

// Python's str.split() whitespace.
bool IsSpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Approximates Python's \w for the article rule.
bool IsWordChar(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (c <= 0xBF) return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA;
  if (c == 0xD7 || c == 0xF7) return false;
  if (c >= 0x2000 && c <= 0x206F) return false;
  if (c >= 0x3000 && c <= 0x303F) return false;
  return !IsSpace(c);
}

std::vector<char32_t> Decode(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int n = DecodeUtf8(s, i, &cp);
    if (n <= 0) {  // invalid byte: keep it as a code point of its own
      cp = static_cast<unsigned char>(s[i]);
      n = 1;
    }
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string Encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

double Mean(double sum, int n) { return n == 0 ? 0.0 : 100.0 * sum / n; }

std::vector<std::string> GoldTexts(const std::vector<std::string>& answers) {
  std::vector<std::string> golds;
  for (const auto& a : answers) {
    if (!NormalizeAnswer(a).empty()) golds.push_back(a);
  }
  if (golds.empty()) golds.push_back("");
  return golds;
}

}  // namespace

std::string NormalizeAnswer(const std::string& s) {
  std::vector<char32_t> cps;
  for (char32_t c : Decode(s)) {
    c = LowerCodepoint(c);
    if (!IsAsciiPunct(c)) cps.push_back(c);
  }
  // Articles: a maximal run of word characters equal to a / an / the.
  std::vector<char32_t> no_articles;
  for (size_t i = 0; i < cps.size();) {
    if (!IsWordChar(cps[i])) {
      no_articles.push_back(cps[i++]);
      continue;
    }
    size_t j = i;
    while (j < cps.size() && IsWordChar(cps[j])) ++j;
    const std::u32string word(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j));
    if (word == U"a" || word == U"an" || word == U"the") {
      no_articles.push_back(' ');
    } else {
      no_articles.insert(no_articles.end(), word.begin(), word.end());
    }
    i = j;
  }
  // Collapse whitespace.
  std::vector<char32_t> out;
  bool pending_space = false;
  for (char32_t c : no_articles) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return Encode(out);
}

std::vector<std::string> AnswerTokens(const std::string& s) {
  std::vector<std::string> tokens;
  const std::string norm = NormalizeAnswer(s);
  size_t start = 0;
  while (start < norm.size()) {
    size_t end = norm.find(' ', start);
    if (end == std::string::npos) end = norm.size();
    if (end > start) tokens.push_back(norm.substr(start, end - start));
    start = end + 1;
  }
  return tokens;
}

int ExactMatch(const std::string& prediction, const std::string& gold) {
  return NormalizeAnswer(prediction) == NormalizeAnswer(gold) ? 1 : 0;
}

double TokenF1(const std::string& prediction, const std::string& gold) {
  const auto pred = AnswerTokens(prediction);
  const auto ref = AnswerTokens(gold);
  if (pred.empty() || ref.empty()) return pred.empty() && ref.empty() ? 1.0 : 0.0;
  std::unordered_map<std::string, int> counts;
  for (const auto& t : ref) ++counts[t];
  int common = 0;
  for (const auto& t : pred) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / pred.size();
  const double recall = static_cast<double>(common) / ref.size();
  return 2 * precision * recall / (precision + recall);
}

nlohmann::json SquadScores::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  j["exact"] = exact;
  j["f1"] = f1;
  j["total"] = total;
  j["HasAns_exact"] = has_ans_exact;
  j["HasAns_f1"] = has_ans_f1;
  j["HasAns_total"] = has_ans_total;
  j["NoAns_exact"] = no_ans_exact;
  j["NoAns_f1"] = no_ans_f1;
  j["NoAns_total"] = no_ans_total;
  if (best_exact) j["best_exact"] = *best_exact;
  if (best_exact_thresh) j["best_exact_thresh"] = *best_exact_thresh;
  if (best_f1) j["best_f1"] = *best_f1;
  if (best_f1_thresh) j["best_f1_thresh"] = *best_f1_thresh;
  return j;
}

namespace {

// evaluate-v2.0.py find_best_thresh.
std::pair<double, double> FindBestThresh(const std::vector<const SquadGold*>& scored,
                                         const std::map<std::string, std::string>& predictions,
                                         const std::map<std::string, double>& raw,
                                         const std::map<std::string, double>& na_probs) {
  int num_no_ans = 0;
  for (const SquadGold* g : scored) num_no_ans += g->answers.empty() ? 1 : 0;
  double cur = num_no_ans, best = cur, best_thresh = 0.0;
  std::vector<const SquadGold*> order;
  for (const SquadGold* g : scored) {
    if (na_probs.count(g->id)) order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](const SquadGold* a, const SquadGold* b) {
    return na_probs.at(a->id) < na_probs.at(b->id);
  });
  for (const SquadGold* g : order) {
    double diff;
    if (!g->answers.empty()) {
      diff = raw.at(g->id);
    } else {
      diff = predictions.at(g->id).empty() ? 0 : -1;
    }
    cur += diff;
    if (cur > best) {
      best = cur;
      best_thresh = na_probs.at(g->id);
    }
  }
  return {scored.empty() ? 0.0 : 100.0 * best / scored.size(), best_thresh};
}

}  // namespace

SquadScores ScoreSquadV2(const std::vector<SquadGold>& gold,
                         const std::map<std::string, std::string>& predictions,
                         const std::map<std::string, double>* na_probs) {
  SquadScores s;
  std::map<std::string, double> exact_raw, f1_raw;
  std::vector<const SquadGold*> scored;
  double has_e = 0, has_f = 0, no_e = 0, no_f = 0, all_e = 0, all_f = 0;
  for (const auto& g : gold) {
    auto it = predictions.find(g.id);
    if (it == predictions.end()) continue;
    double e = 0, f = 0;
    for (const auto& a : GoldTexts(g.answers)) {
      e = std::max<double>(e, ExactMatch(it->second, a));
      f = std::max(f, TokenF1(it->second, a));
    }
    exact_raw[g.id] = e;
    f1_raw[g.id] = f;
    scored.push_back(&g);
    all_e += e;
    all_f += f;
    if (!g.answers.empty()) {
      has_e += e;
      has_f += f;
      ++s.has_ans_total;
    } else {
      no_e += e;
      no_f += f;
      ++s.no_ans_total;
    }
  }
  s.total = static_cast<int>(scored.size());
  s.exact = Mean(all_e, s.total);
  s.f1 = Mean(all_f, s.total);
  s.has_ans_exact = Mean(has_e, s.has_ans_total);
  s.has_ans_f1 = Mean(has_f, s.has_ans_total);
  s.no_ans_exact = Mean(no_e, s.no_ans_total);
  s.no_ans_f1 = Mean(no_f, s.no_ans_total);
  if (na_probs != nullptr) {
    auto [be, bet] = FindBestThresh(scored, predictions, exact_raw, *na_probs);
    auto [bf, bft] = FindBestThresh(scored, predictions, f1_raw, *na_probs);
    s.best_exact = be;
    s.best_exact_thresh = bet;
    s.best_f1 = bf;
    s.best_f1_thresh = bft;
  }
  return s;
}

std::pair<double, double> ChooseNullThreshold(const std::vector<SquadGold>& gold,
                                              const std::map<std::string, std::string>& predictions,
                                              const std::map<std::string, double>& na_probs) {
  struct Item {
    double na;
    double gain;  // F1 change when this question is answered instead of ""
  };
  std::vector<Item> items;
  double base = 0;  // F1 sum when every question is answered ""
  for (const auto& g : gold) {
    auto p = predictions.find(g.id);
    auto n = na_probs.find(g.id);
    if (p == predictions.end() || n == na_probs.end()) continue;
    double f_pred = 0, f_empty = 0;
    for (const auto& a : GoldTexts(g.answers)) {
      f_pred = std::max(f_pred, TokenF1(p->second, a));
      f_empty = std::max(f_empty, TokenF1("", a));
    }
    base += f_empty;
    if (std::isfinite(n->second)) items.push_back({n->second, f_pred - f_empty});
  }
  size_t total = 0;
  for (const auto& g : gold) total += predictions.count(g.id) && na_probs.count(g.id) ? 1 : 0;
  if (total == 0) return {0.0, 0.0};
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.na < b.na; });
  double cur = base, best = base;
  double best_thresh = items.empty() ? 0.0 : items.front().na - 1.0;
  for (size_t i = 0; i < items.size();) {
    size_t j = i;
    while (j < items.size() && items[j].na == items[i].na) cur += items[j++].gain;
    if (cur > best + 1e-12) {
      best = cur;
      best_thresh = items[i].na;
    }
    i = j;
  }
  return {best_thresh, 100.0 * best / total};
}

nlohmann::json ClassifyScores::ToJson(bool with_per_label) const {
  nlohmann::json j = nlohmann::json::object();
  j["accuracy"] = accuracy;
  j["macro_f1"] = macro_f1;
  j["count"] = count;
  if (with_per_label) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [label, st] : per_label) {
      labels[label] = {{"precision", st.precision}, {"recall", st.recall}, {"f1", st.f1}, {"support", st.support}};
    }
    j["per_label"] = labels;
  }
  return j;
}

ClassifyScores ScoreClassification(const std::vector<std::vector<std::string>>& gold,
                                   const std::vector<std::vector<std::string>>& predicted) {
  ClassifyScores s;
  s.count = static_cast<int>(gold.size());
  std::map<std::string, int> tp;
  int correct = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    std::vector<std::string> g = gold[i], p = i < predicted.size() ? predicted[i] : std::vector<std::string>();
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    if (g == p) ++correct;
    for (const auto& l : g) ++s.per_label[l].support;
    for (const auto& l : p) {
      ++s.per_label[l].predicted;
      if (std::binary_search(g.begin(), g.end(), l)) ++tp[l];
    }
  }
  s.accuracy = s.count == 0 ? 0.0 : static_cast<double>(correct) / s.count;
  double f1_sum = 0;
  for (auto& [label, st] : s.per_label) {
    const int t = tp[label];
    st.precision = st.predicted == 0 ? 0.0 : static_cast<double>(t) / st.predicted;
    st.recall = st.support == 0 ? 0.0 : static_cast<double>(t) / st.support;
    st.f1 = st.precision + st.recall == 0 ? 0.0 : 2 * st.precision * st.recall / (st.precision + st.recall);
    f1_sum += st.f1;
  }
  s.macro_f1 = s.per_label.empty() ? 0.0 : f1_sum / s.per_label.size();
  return s;
}

nlohmann::json RankingScores::ToJson() const {
  return {{"mrr@10", mrr_at_10}, {"ndcg@10", ndcg_at_10}, {"map", map}, {"queries", queries},
          {"queries_without_relevant", queries_without_relevant}};
}

RankingScores ScoreRanking(const std::vector<std::vector<std::pair<double, int>>>& groups) {
  RankingScores s;
  double mrr = 0, ndcg = 0, ap_sum = 0;
  for (const auto& group : groups) {
    std::vector<size_t> order(group.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return group[a].first > group[b].first; });
    int relevant = 0;
    for (const auto& c : group) relevant += c.second > 0 ? 1 : 0;
    if (relevant == 0) {
      ++s.queries_without_relevant;
      continue;
    }
    ++s.queries;
    double rr = 0, dcg = 0, ap = 0;
    int hits = 0;
    for (size_t r = 0; r < order.size(); ++r) {
      const int grade = group[order[r]].second;
      if (grade > 0) {
        if (rr == 0 && r < 10) rr = 1.0 / (r + 1);
        ++hits;
        ap += static_cast<double>(hits) / (r + 1);
      }
      if (r < 10) dcg += (std::pow(2.0, grade) - 1) / std::log2(r + 2.0);
    }
    std::vector<int> ideal;
    for (const auto& c : group) ideal.push_back(c.second);
    std::sort(ideal.rbegin(), ideal.rend());
    double idcg = 0;
    for (size_t r = 0; r < ideal.size() && r < 10; ++r) idcg += (std::pow(2.0, ideal[r]) - 1) / std::log2(r + 2.0);
    mrr += rr;
    ndcg += idcg > 0 ? dcg / idcg : 0;
    ap_sum += ap / relevant;
  }
  if (s.queries > 0) {
    s.mrr_at_10 = mrr / s.queries;
    s.ndcg_at_10 = ndcg / s.queries;
    s.map = ap_sum / s.queries;
  }
  return s;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * values.size());
  const size_t index = rank < 1 ? 0 : std::min(values.size() - 1, static_cast<size_t>(rank) - 1);
  return values[index];
}

}  // namespace dserve
