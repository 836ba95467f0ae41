// Helpers for the training tests: run `dserve` as a subprocess, write tiny
// deterministic datasets and configs, read metrics.csv and safetensors names.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "model/checkpoint/safetensors.h"

namespace dserve::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline std::string DserveBinary() { return std::string(DSERVE_BINARY_DIR) + "/bin/dserve"; }
inline std::string SharedDir() { return DSERVE_SHARED_DIR; }
inline std::string GoldenSpm() { return SharedDir() + "/goldens/tokenizer/spm.model"; }

inline std::string ScratchDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dserve_train_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Starts dserve with `args`; stdout and stderr go to `log`.
inline pid_t StartDserve(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<std::string> all = {DserveBinary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline int WaitExit(pid_t pid, bool* signaled = nullptr) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (signaled) *signaled = WIFSIGNALED(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs dserve to completion; returns the exit code (log in `log`).
inline int RunDserve(const std::vector<std::string>& args, const std::string& log) {
  return WaitExit(StartDserve(args, log));
}

inline json ReadJson(const std::string& path) { return json::parse(ReadAll(path)); }

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc | std::ios::binary) << text;
}

// metrics.csv rows as column -> cell.
inline std::vector<std::map<std::string, std::string>> ReadCsv(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(ReadAll(path), '\n', absl::SkipEmpty());
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < header.size() && c < cells.size(); ++c) row[header[c]] = cells[c];
    rows.push_back(row);
  }
  return rows;
}

inline std::vector<double> Losses(const std::string& csv) {
  std::vector<double> out;
  for (auto& row : ReadCsv(csv)) out.push_back(std::stod(row.at("loss")));
  return out;
}

inline std::vector<std::string> TensorNames(const std::string& path) {
  std::vector<std::string> names;
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return names;
  for (const auto& t : (*file)->tensors()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

// A golden config with small sizes (same architecture flags, so the same
// tensor names): vocab 320 (the toy spm.model has 300 pieces + [MASK]).
inline json SmallConfig(const std::string& golden, int hidden, int heads, double dropout) {
  json c = ReadJson(SharedDir() + "/goldens/model/" + golden + "/config.json");
  c["vocab_size"] = 320;
  c["hidden_size"] = hidden;
  c["pooler_hidden_size"] = hidden;
  c["num_attention_heads"] = heads;
  c["intermediate_size"] = 2 * hidden;
  if (c.contains("embedding_size")) c["embedding_size"] = hidden / 2;
  c["hidden_dropout_prob"] = dropout;
  c["attention_probs_dropout_prob"] = dropout;
  c.erase("id2label");
  c.erase("label2id");
  return c;
}

// Four intents, each carried by keywords, in 6 x 6 phrasings; deterministic.
// `variant` 0 = train (324 lines), 1 = dev (108 lines): the held-out
// (prefix, suffix) combinations. Lines with no suffix are tagged "short".
inline std::string ToyIntents(int variant) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> intents = {
      {"billing", {"invoice", "bill", "charge"}},
      {"shipping", {"package", "delivery", "parcel"}},
      {"password", {"password", "login", "account"}},
      {"refund", {"refund", "money", "return"}}};
  const std::vector<std::string> prefixes = {"I have a question about my", "Please look at the",
                                             "Something is wrong with the", "Can you help with my",
                                             "Tell me about the", "What happened to my"};
  const std::vector<std::string> suffixes = {"", " today", " please", " right now", " again", " this morning"};
  std::string out;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    for (size_t j = 0; j < suffixes.size(); ++j) {
      if (((i + j) % 4 == 0) != (variant == 1)) continue;
      for (const auto& [label, words] : intents) {
        for (const auto& w : words) {
          json line = {{"text", prefixes[i] + " " + w + suffixes[j]}, {"label", label}};
          if (suffixes[j].empty()) line["tags"] = {"short"};
          out += line.dump() + "\n";
        }
      }
    }
  }
  return out;
}

// A SQuAD v2 file: item prices and colours, plus unanswerable questions.
inline std::string ToySquad(int variant) {
  const std::vector<std::string> items = variant == 0 ? std::vector<std::string>{"lamp", "chair", "table", "river", "stone", "door", "mill", "window"}
                                                      : std::vector<std::string>{"boat", "bridge"};
  const std::vector<std::string> colours = {"red", "green", "blue", "white"};
  json paragraphs = json::array();
  int id = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string colour = colours[i % colours.size()];
    const std::string number = std::to_string(3 + i);
    const std::string context = "The " + items[i] + " is " + colour + ". It costs " + number + " pounds in the village.";
    auto start_of = [&](const std::string& s) { return static_cast<int>(context.find(s)); };
    json qas = json::array();
    qas.push_back({{"id", "q" + std::to_string(id++)}, {"question", "What colour is the " + items[i] + "?"},
                   {"answers", {{{"text", colour}, {"answer_start", start_of(colour)}}}}, {"is_impossible", false}});
    qas.push_back({{"id", "q" + std::to_string(id++)}, {"question", "How much does it cost?"},
                   {"answers", {{{"text", number + " pounds"}, {"answer_start", start_of(number + " pounds")}}}},
                   {"is_impossible", false}});
    qas.push_back({{"id", "q" + std::to_string(id++)}, {"question", "Who built the " + items[i] + "?"},
                   {"answers", json::array()}, {"is_impossible", true}});
    paragraphs.push_back({{"context", context}, {"qas", qas}});
  }
  json root = {{"version", "v2.0"}, {"data", {{{"title", "toy"}, {"paragraphs", paragraphs}}}}};
  return root.dump();
}

// Rerank pairs: per query, its topic's passage (relevant), another topic's
// passage and two off-topic distractors (not relevant).
inline std::string ToyRerank(int variant) {
  const std::vector<std::pair<std::string, std::string>> topics = {
      {"mill", "The old mill opens its doors every morning."},
      {"river", "The river runs past the village and the bank."},
      {"stones", "Children throw flat stones that skip on the water."},
      {"light", "In the afternoon the light turns golden."},
      {"years", "The mill has been there for two hundred years."},
      {"doors", "The miller opens the doors at six."}};
  const std::vector<std::string> distractors = {"Nobody knows.", "It is what it is.", "Maybe later, maybe not.",
                                                "That was all, thanks."};
  std::string out;
  const size_t n = topics.size();
  for (size_t q = 0; q < n; ++q) {
    const std::string query = (variant == 0 ? "Tell me about the " : "What about the ") + topics[q].first + "?";
    out += json({{"query", query}, {"passage", topics[q].second}, {"label", 1}}).dump() + "\n";
    out += json({{"query", query}, {"passage", topics[(q + 1) % n].second}, {"label", 0}}).dump() + "\n";
    for (size_t k = 0; k < 2; ++k) {
      out += json({{"query", query}, {"passage", distractors[(q + k) % distractors.size()]}, {"label", 0}}).dump() + "\n";
    }
  }
  return out;
}

}  // namespace dserve::testing
