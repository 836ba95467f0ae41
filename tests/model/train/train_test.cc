// End-to-end training runs of `dserve train` / `dserve eval` on tiny
// deterministic datasets and models (label: slow).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint/safetensors.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/util/cpu_info.h"
#include "tests/model/train/train_test_util.h"

namespace dserve::testing {
namespace {

struct Workdir {
  std::string dir;
  std::string config;
  std::string train, dev;
};

Workdir Prepare(const std::string& name, const json& config, const std::string& train, const std::string& dev,
            const std::string& ext) {
  Workdir r;
  r.dir = ScratchDir(name);
  r.config = r.dir + "/config.json";
  WriteText(r.config, config.dump(2));
  r.train = r.dir + "/train." + ext;
  r.dev = r.dir + "/dev." + ext;
  WriteText(r.train, train);
  WriteText(r.dev, dev);
  return r;
}

std::vector<std::string> TrainArgs(const Workdir& r, const std::string& task, const std::string& out,
                                   std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--task", task, "--train", r.train, "--config", r.config,
                                   "--tokenizer", GoldenSpm(), "--out", out, "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

// Loads `dir` as the server does and runs one tokenized text through it.
void ExpectServable(const std::string& dir, Task task) {
  auto model = DebertaModel::Load(dir, ModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->task(), task);
  auto tok = Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto enc = (*tok)->EncodePair("Where is my package?", "The river runs past the mill.", EncodeOptions());
  ASSERT_TRUE(enc.ok());
  std::vector<std::vector<int64_t>> types;
  if ((*model)->config().type_vocab_size > 0) types.emplace_back(enc->type_ids.begin(), enc->type_ids.end());
  TokenBatch batch = TokenBatch::Pad({std::vector<int64_t>(enc->ids.begin(), enc->ids.end())}, types, 0);
  auto out = (*model)->Run(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  if (task == Task::kAnswer) {
    EXPECT_EQ(out->start_logits.size(), enc->ids.size());
  } else {
    EXPECT_EQ(out->logits.size(), static_cast<size_t>((*model)->config().num_labels()));
  }
}

// Tensor names and architecture as Hugging Face's golden checkpoint of the same architecture.
void ExpectHfLayout(const std::string& dir, const std::string& golden) {
  const std::string gdir = SharedDir() + "/goldens/model/" + golden;
  EXPECT_EQ(TensorNames(dir + "/model.safetensors"), TensorNames(gdir + "/model.safetensors"));
  json ours = ReadJson(dir + "/config.json"), theirs = ReadJson(gdir + "/config.json");
  EXPECT_EQ(ours["architectures"], theirs["architectures"]);
  EXPECT_EQ(ours["model_type"], "deberta-v2");
  EXPECT_TRUE(ours.contains("id2label"));
  EXPECT_TRUE(ours.contains("label2id"));
  EXPECT_TRUE(fs::exists(dir + "/spm.model"));
  EXPECT_TRUE(ours["dserve"].contains("training"));
}

TEST(TrainClassify, FromScratchReachesAccuracyAndServes) {
  Workdir r = Prepare("classify", SmallConfig("cls_factorized", 48, 6, 0.1), ToyIntents(0), ToyIntents(1), "jsonl");
  // This tiny model sometimes sits on a plateau for the whole run (two
  // pairs of intents told apart, loss ~ln 2): measured with the portable data
  // order (issue 18), seeds 1, 7 and 8 of 1-9 plateau at this lr; the order
  // of a seed is now the same on every machine, so the seeds below are
  // fixed, and two of three must reach the target (float differences between
  // CPUs may still move one). The first that does is checked in full.
  std::string out;
  int reached = 0;
  for (const char* seed : {"2", "3", "4"}) {
    const std::string dir = r.dir + "/out" + seed;
    ASSERT_EQ(RunDserve(TrainArgs(r, "classify", dir,
                                  {"--eval", r.dev, "--epochs", "8", "--batch-size", "16", "--lr", "1e-3",
                                   "--warmup-ratio", "0.1", "--seed", seed, "--max-length", "32"}),
                        dir + ".log"),
              0)
        << ReadAll(dir + ".log");
    const double accuracy = ReadJson(dir + "/best/config.json")["dserve"]["eval_metrics"]["accuracy"].get<double>();
    std::cerr << "classify dev accuracy (held-out prefix/suffix combinations), seed " << seed << ": " << accuracy
              << "\n";
    if (accuracy >= 0.9) {
      ++reached;
      if (out.empty()) out = dir;
    }
  }
  EXPECT_GE(reached, 2) << "of 3 seeds reached dev accuracy 0.9";
  ASSERT_FALSE(out.empty());
  json config = ReadJson(out + "/best/config.json");
  const double accuracy = config["dserve"]["eval_metrics"]["accuracy"].get<double>();
  EXPECT_EQ(config["id2label"]["0"], "billing");  // sorted labels from the train file
  EXPECT_EQ(config["label2id"]["refund"], 2);  // billing, password, refund, shipping
  EXPECT_EQ(config["problem_type"], "single_label_classification");
  ExpectHfLayout(out + "/best", "cls_factorized");
  ExpectServable(out + "/best", Task::kClassify);

  // metrics.csv: one row per step, eval columns filled on eval steps.
  auto rows = ReadCsv(out + "/metrics.csv");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().at("step"), "1");
  int evals = 0;
  for (auto& row : rows) evals += row.at("eval_accuracy").empty() ? 0 : 1;
  EXPECT_EQ(evals, 8);  // every epoch
  auto losses = Losses(out + "/metrics.csv");
  EXPECT_LT(Mean(losses, losses.size() - 5, losses.size()), 0.5 * Mean(losses, 0, 5));

  // dserve eval through the server's loading path agrees with the trainer's eval.
  ASSERT_EQ(RunDserve({"eval", "--model", out + "/best", "--data", r.dev}, r.dir + "/eval.json"), 0)
      << ReadAll(r.dir + "/eval.json");
  json metrics = json::parse(ReadAll(r.dir + "/eval.json"));
  EXPECT_DOUBLE_EQ(metrics["accuracy"].get<double>(), accuracy);
  for (const char* k : {"macro_f1", "per_label", "per_tag", "latency_p50_ms", "latency_p99_ms", "items_per_s",
                        "peak_rss_bytes"}) {
    EXPECT_TRUE(metrics.contains(k)) << k;
  }
  EXPECT_TRUE(metrics["per_label"].contains("shipping"));
  EXPECT_EQ(metrics["per_tag"]["short"]["count"], 24);  // prefixes 0 and 4 with no suffix, 12 keywords each
}

TEST(TrainAnswer, ReducesLossChoosesThresholdAndLoads) {
  Workdir r = Prepare("answer", SmallConfig("qa_c2p_only", 32, 4, 0.0), ToySquad(0), ToySquad(0), "json");
  const std::string out = r.dir + "/out";
  ASSERT_EQ(RunDserve(TrainArgs(r, "answer", out,
                                {"--eval", r.dev, "--test", r.dev, "--epochs", "30", "--batch-size", "8", "--lr",
                                 "3e-3", "--seed", "1", "--max-length", "64", "--doc-stride", "16", "--eval-every",
                                 "30"}),
                      r.dir + "/train.log"),
            0)
      << ReadAll(r.dir + "/train.log");
  auto losses = Losses(out + "/metrics.csv");
  ASSERT_GE(losses.size(), 20u);
  EXPECT_LT(Mean(losses, losses.size() - 3, losses.size()), 0.5 * Mean(losses, 0, 3));
  ExpectHfLayout(out + "/best", "qa_c2p_only");
  ExpectServable(out + "/best", Task::kAnswer);
  json config = ReadJson(out + "/best/config.json");
  json em = config["dserve"]["eval_metrics"];
  std::cerr << "answer eval (train set): " << em.dump() << "\n";
  // The stored threshold is the F1-maximising one found on the eval set.
  EXPECT_DOUBLE_EQ(config["dserve"]["qa"]["null_score_diff_threshold"].get<double>(),
                   em["chosen_null_threshold"].get<double>());
  EXPECT_EQ(config["dserve"]["qa"]["doc_stride"], 16);
  // dserve eval with the stored threshold reaches the chosen F1.
  ASSERT_EQ(RunDserve({"eval", "--model", out + "/best", "--data", r.dev, "--predictions", r.dir + "/pred.json"},
                      r.dir + "/eval.json"),
            0)
      << ReadAll(r.dir + "/eval.json");
  json metrics = json::parse(ReadAll(r.dir + "/eval.json"));
  for (const char* k : {"exact", "f1", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
                        "NoAns_total", "best_f1", "best_f1_thresh", "latency_p50_ms", "peak_rss_bytes"}) {
    EXPECT_TRUE(metrics.contains(k)) << k;
  }
  EXPECT_NEAR(metrics["f1"].get<double>(), em["chosen_null_threshold_f1"].get<double>(), 1e-6);
  // Selection by the cross-fitted F1 (defect 7): never above the in-sample optimum.
  EXPECT_LE(em["crossfit_f1"].get<double>(), em["chosen_null_threshold_f1"].get<double>() + 1e-9);
  // --test: OUT/best as saved, scored once at the end (here on the same file, so it equals dserve eval).
  json test = ReadJson(out + "/test_metrics.json");
  EXPECT_NEAR(test["f1"].get<double>(), metrics["f1"].get<double>(), 1e-9);
  EXPECT_EQ(test["step"], config["dserve"]["training"]["step"]);
  EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/train.log"), "test set " + r.dev)) << ReadAll(r.dir + "/train.log");
  EXPECT_EQ(metrics["HasAns_total"], 16);
  EXPECT_EQ(metrics["NoAns_total"], 8);
  json pred = ReadJson(r.dir + "/pred.json");
  EXPECT_EQ(pred.size(), 24u);
  EXPECT_TRUE(pred.contains("q0"));
}

TEST(TrainRerank, PointwiseAndListwiseReduceLossAndLoad) {
  Workdir r = Prepare("rerank", SmallConfig("rerank_p2c_nonorm", 32, 4, 0.0), ToyRerank(0), ToyRerank(1), "jsonl");
  for (const bool listwise : {false, true}) {
    const std::string out = r.dir + (listwise ? "/listwise" : "/pointwise");
    std::vector<std::string> extra = {"--eval", r.dev, "--epochs", listwise ? "30" : "40", "--batch-size",
                                      listwise ? "2" : "8", "--lr", "3e-3", "--seed", "2", "--max-length", "48"};
    if (listwise) extra.push_back("--listwise");
    ASSERT_EQ(RunDserve(TrainArgs(r, "rerank", out, extra), r.dir + "/train.log"), 0) << ReadAll(r.dir + "/train.log");
    auto losses = Losses(out + "/metrics.csv");
    ASSERT_GE(losses.size(), 20u);
    EXPECT_LT(Mean(losses, losses.size() - 3, losses.size()), 0.7 * Mean(losses, 0, 3)) << "listwise " << listwise;
    ExpectHfLayout(out + "/best", "rerank_p2c_nonorm");
    ExpectServable(out + "/best", Task::kRerank);
    ASSERT_EQ(RunDserve({"eval", "--model", out + "/best", "--data", r.dev}, r.dir + "/eval.json"), 0)
        << ReadAll(r.dir + "/eval.json");
    json metrics = json::parse(ReadAll(r.dir + "/eval.json"));
    std::cerr << "rerank (" << (listwise ? "listwise" : "pointwise") << ") dev: " << metrics.dump() << "\n";
    EXPECT_EQ(metrics["queries"], 6);
    EXPECT_GT(metrics["mrr@10"].get<double>(), 0.0);
    EXPECT_TRUE(metrics.contains("ndcg@10"));
    EXPECT_TRUE(metrics.contains("map"));
  }
}

TEST(TrainResume, SigkillThenResumeMatchesUninterruptedRun) {
  // Dropout on: the resumed run must redraw the same masks.
  Workdir r = Prepare("resume", SmallConfig("cls_factorized", 48, 6, 0.1), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::vector<std::string> common = {"--epochs", "100", "--max-steps", "60", "--batch-size", "16",
                                           "--lr", "2e-3", "--seed", "11", "--save-every", "10",
                                           "--warmup-ratio", "0.2", "--grad-accum", "2"};
  const std::string a = r.dir + "/a", b = r.dir + "/b";
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", a, common), r.dir + "/a.log"), 0) << ReadAll(r.dir + "/a.log");
  const auto reference = Losses(a + "/metrics.csv");
  ASSERT_EQ(reference.size(), 60u);

  pid_t pid = StartDserve(TrainArgs(r, "classify", b, common), r.dir + "/b1.log");
  int64_t saved = 0;
  for (int i = 0; i < 60000 && saved < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::ifstream in(b + "/trainer_state/state.json");
    if (!in) continue;
    json s = json::parse(in, nullptr, false);
    if (!s.is_discarded()) saved = s.value("step", 0);
  }
  kill(pid, SIGKILL);
  bool signaled = false;
  WaitExit(pid, &signaled);
  ASSERT_TRUE(signaled) << "the run finished before it could be killed; " << ReadAll(r.dir + "/b1.log");
  const int64_t at_kill = ReadJson(b + "/trainer_state/state.json")["step"].get<int64_t>();
  EXPECT_GE(at_kill, 10);
  EXPECT_LT(at_kill, 60);

  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", b, [&] {
                        auto v = common;
                        v.push_back("--resume");
                        return v;
                      }()),
                      r.dir + "/b2.log"),
            0)
      << ReadAll(r.dir + "/b2.log");
  EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/b2.log"), "at step " + std::to_string(at_kill)))
      << ReadAll(r.dir + "/b2.log");
  auto rows = ReadCsv(b + "/metrics.csv");
  ASSERT_EQ(rows.size(), 60u);  // rows of the lost steps were dropped, each step once
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(std::stoll(rows[i].at("step")), static_cast<int64_t>(i + 1));
    EXPECT_NEAR(std::stod(rows[i].at("loss")), reference[i], 1e-5) << "step " << i + 1;
    EXPECT_NEAR(std::stod(rows[i].at("lr")), std::stod(ReadCsv(a + "/metrics.csv")[i].at("lr")), 1e-12);
  }
}

TEST(TrainDistributed, TwoGlooRanksMatchOneProcess) {
  Workdir r = Prepare("ddp", SmallConfig("cls_factorized", 48, 6, 0.0), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::vector<std::string> common = {"--epochs", "100", "--max-steps", "12", "--lr", "2e-3", "--seed", "5"};
  auto with = [&](std::vector<std::string> extra) {
    auto v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  const std::string one = r.dir + "/one", two = r.dir + "/two";
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", one, with({"--batch-size", "16"})), r.dir + "/one.log"), 0)
      << ReadAll(r.dir + "/one.log");
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", two, with({"--batch-size", "8", "--nproc", "2"})), r.dir + "/two.log"), 0)
      << ReadAll(r.dir + "/two.log");
  json d = ReadJson(two + "/distributed.json");
  EXPECT_EQ(d["world_size"], 2);
  EXPECT_EQ(d["max_weight_diff_across_ranks"].get<double>(), 0.0);
  auto l1 = Losses(one + "/metrics.csv"), l2 = Losses(two + "/metrics.csv");
  ASSERT_EQ(l1.size(), 12u);
  ASSERT_EQ(l2.size(), 12u);
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-4) << "step " << i + 1;
  // Only rank 0 writes.
  EXPECT_TRUE(fs::exists(two + "/best/model.safetensors"));
}

TEST(TrainMlm, PretrainWithEmdAndSopThenFineTune) {
  // The toy corpus, four sentences per document.
  std::vector<std::string> lines = absl::StrSplit(ReadAll(SharedDir() + "/goldens/tokenizer/corpus.txt"), '\n',
                                                  absl::SkipEmpty());
  std::string corpus, dev;
  for (size_t i = 2; i < lines.size(); ++i) {
    corpus += lines[i] + "\n" + ((i - 1) % 4 == 0 ? "\n" : "");
    if (i < 22) dev += lines[i] + "\n" + ((i - 1) % 4 == 0 ? "\n" : "");
  }
  Workdir r = Prepare("mlm", SmallConfig("cls_factorized", 48, 6, 0.0), corpus, dev, "txt");
  const std::string out = r.dir + "/out", noemd = r.dir + "/noemd";
  const std::vector<std::string> common = {"--eval", r.dev, "--epochs", "10", "--batch-size", "8", "--lr", "2e-3",
                                           "--seed", "1", "--max-length", "64", "--objective", "sop"};
  ASSERT_EQ(RunDserve(TrainArgs(r, "mlm", out, common), r.dir + "/mlm.log"), 0) << ReadAll(r.dir + "/mlm.log");
  auto rows = ReadCsv(out + "/metrics.csv");
  std::vector<double> eval_loss;
  for (auto& row : rows) {
    if (!row.at("eval_loss").empty()) eval_loss.push_back(std::stod(row.at("eval_loss")));
  }
  ASSERT_EQ(eval_loss.size(), 10u);
  EXPECT_LT(eval_loss.back(), eval_loss.front() - 0.5);
  json config = ReadJson(out + "/best/config.json");
  EXPECT_EQ(config["architectures"], json::array({"DebertaV2ForMaskedLM"}));
  auto names = TensorNames(out + "/best/model.safetensors");
  for (const char* n : {"cls.predictions.transform.dense.weight", "cls.predictions.bias",
                        "cls.predictions.decoder.weight", "deberta.embeddings.position_embeddings.weight",
                        "dserve_sop.classifier.weight"}) {
    EXPECT_TRUE(std::count(names.begin(), names.end(), n)) << n;
  }
  ASSERT_EQ(RunDserve({"eval", "--model", out + "/best", "--data", r.dev}, r.dir + "/eval.json"), 0)
      << ReadAll(r.dir + "/eval.json");
  json metrics = json::parse(ReadAll(r.dir + "/eval.json"));
  for (const char* k : {"loss", "perplexity", "accuracy", "sop_accuracy", "latency_p50_ms", "peak_rss_bytes"}) {
    EXPECT_TRUE(metrics.contains(k)) << k;
  }
  EXPECT_NEAR(metrics["perplexity"].get<double>(), std::exp(metrics["loss"].get<double>()), 1e-6);

  // --no-emd changes the computation (same seed, different losses).
  auto v = common;
  v.insert(v.end(), {"--no-emd", "--max-steps", "5"});
  ASSERT_EQ(RunDserve(TrainArgs(r, "mlm", noemd, v), r.dir + "/noemd.log"), 0) << ReadAll(r.dir + "/noemd.log");
  auto with_emd = Losses(out + "/metrics.csv"), without = Losses(noemd + "/metrics.csv");
  ASSERT_EQ(without.size(), 5u);
  EXPECT_NE(with_emd[2], without[2]);

  // Fine-tuning from the pretrained encoder: the classifier head is new, the rest loads.
  const std::string ft = r.dir + "/ft", data = r.dir + "/intents.jsonl";
  WriteText(data, ToyIntents(1));
  ASSERT_EQ(RunDserve({"train", "--task", "classify", "--train", data, "--init", out + "/best", "--out", ft,
                       "--max-steps", "3", "--threads", "1"},
                      r.dir + "/ft.log"),
            0)
      << ReadAll(r.dir + "/ft.log");
  EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/ft.log"), "head initialised"));
  ExpectHfLayout(ft + "/best", "cls_factorized");
  ExpectServable(ft + "/best", Task::kClassify);
}

// The MLM corpus of TrainMlm: the toy corpus, four sentences per document.
std::string ToyCorpus(size_t first_line, size_t end_line) {
  std::vector<std::string> lines = absl::StrSplit(ReadAll(SharedDir() + "/goldens/tokenizer/corpus.txt"), '\n',
                                                  absl::SkipEmpty());
  std::string corpus;
  for (size_t i = first_line; i < std::min(end_line, lines.size()); ++i) {
    corpus += lines[i] + "\n" + ((i - 1) % 4 == 0 ? "\n" : "");
  }
  return corpus;
}

// Issue 18, defect 1: a step's loss (and so its gradient) is the mean over
// the whole step's examples -- for MLM over its masked tokens, plus the SOP
// mean -- however the step is split into micro-batches (--grad-accum) and
// ranks (--nproc). Same global batch of 8, dropout off: per-step losses of
// 8x1, 4x2 (grad-accum) and 2 ranks x 2 x 2 agree. Before the fix the MLM
// step loss was the unweighted mean of micro-batch means, over masks that
// depended on the split.
TEST(TrainGradAccum, EveryTaskStepLossIsTheWholeStepMean) {
  struct Case {
    std::string task, golden, train, ext;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"classify", "cls_factorized", ToyIntents(0), "jsonl", {"--max-length", "32"}},
      {"answer", "qa_c2p_only", ToySquad(0), "json", {"--max-length", "64", "--doc-stride", "16"}},
      {"rerank", "rerank_p2c_nonorm", ToyRerank(0), "jsonl", {"--max-length", "48"}},
      {"mlm", "cls_factorized", ToyCorpus(2, 60), "txt", {"--max-length", "64", "--objective", "sop"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.task);
    Workdir r = Prepare("accum_" + c.task, SmallConfig(c.golden, 32, 4, 0.0), c.train, c.train, c.ext);
    auto run = [&](const std::string& name, std::vector<std::string> split) {
      std::vector<std::string> extra = {"--epochs", "100", "--max-steps", "4", "--lr", "2e-3", "--seed", "3"};
      extra.insert(extra.end(), c.extra.begin(), c.extra.end());
      extra.insert(extra.end(), split.begin(), split.end());
      const std::string out = r.dir + "/" + name;
      EXPECT_EQ(RunDserve(TrainArgs(r, c.task, out, extra), out + ".log"), 0) << ReadAll(out + ".log");
      return Losses(out + "/metrics.csv");
    };
    const auto whole = run("whole", {"--batch-size", "8"});
    const auto accum = run("accum", {"--batch-size", "4", "--grad-accum", "2"});
    const auto ranks = run("ranks", {"--batch-size", "2", "--grad-accum", "2", "--nproc", "2"});
    ASSERT_EQ(whole.size(), 4u);
    ASSERT_EQ(accum.size(), 4u);
    ASSERT_EQ(ranks.size(), 4u);
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_NEAR(accum[i], whole[i], 1e-5) << "step " << i + 1;
      EXPECT_NEAR(ranks[i], whole[i], 1e-4) << "step " << i + 1;
    }
  }
}

// Issue 18, defect 8: a non-finite gradient (finite loss; the test hook
// poisons step 3's gradients) is caught without clipping too: the update is
// skipped, the run goes on, and the skip is counted in the progress line and
// metrics.csv. Before the fix, without --max-grad-norm, NaN reached AdamW
// and every later weight.
TEST(TrainNonFinite, NanGradientSkipsTheUpdateAndIsCounted) {
  Workdir r = Prepare("nan_grad", SmallConfig("cls_factorized", 32, 4, 0.0), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::vector<std::string> extra = {"--epochs", "100", "--max-steps", "6", "--lr", "2e-3", "--seed", "3",
                                          "--max-length", "32", "--batch-size", "8", "--max-grad-norm", "0"};
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", r.dir + "/clean", extra), r.dir + "/clean.log"), 0)
      << ReadAll(r.dir + "/clean.log");
  ::setenv("DSERVE_TEST_NAN_GRADIENT_STEPS", "3", 1);
  const int rc = RunDserve(TrainArgs(r, "classify", r.dir + "/poisoned", extra), r.dir + "/poisoned.log");
  ::unsetenv("DSERVE_TEST_NAN_GRADIENT_STEPS");
  const std::string log = ReadAll(r.dir + "/poisoned.log");
  ASSERT_EQ(rc, 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "step 3: gradient norm is nan; update skipped")) << log;
  EXPECT_TRUE(absl::StrContains(log, "skipped 1 ETA")) << log;  // the progress line
  auto rows = ReadCsv(r.dir + "/poisoned/metrics.csv");
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].at("skipped_steps"), i < 2 ? "0" : "1") << i;
  EXPECT_EQ(ReadJson(r.dir + "/poisoned/trainer_state/state.json")["skipped_steps"], 1);
  const auto clean = Losses(r.dir + "/clean/metrics.csv"), poisoned = Losses(r.dir + "/poisoned/metrics.csv");
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(poisoned[i], clean[i]) << "step " << i + 1;  // before the skip
  EXPECT_NE(poisoned[3], clean[3]);  // step 3's update never happened
  for (double loss : poisoned) EXPECT_TRUE(std::isfinite(loss));
  ExpectServable(r.dir + "/poisoned/best", Task::kClassify);  // finite weights
}

// Issue 18, defect 2: --task mlm (--objective sop) from a checkpoint without
// the MLM and SOP heads says which heads it drew fresh. Before the fix a
// string comparison never matched and nothing was said.
TEST(TrainMlm, InitWithoutTheHeadsSaysWhichHeadsItInitialised) {
  Workdir r = Prepare("mlm_heads", SmallConfig("cls_factorized", 32, 4, 0.0), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::string cls = r.dir + "/cls";
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", cls, {"--max-steps", "1", "--max-length", "32"}), cls + ".log"), 0)
      << ReadAll(cls + ".log");
  WriteText(r.dir + "/corpus.txt", ToyCorpus(2, 40));
  const std::string log = r.dir + "/mlm.log";
  ASSERT_EQ(RunDserve({"train", "--task", "mlm", "--train", r.dir + "/corpus.txt", "--init", cls + "/best", "--out",
                       r.dir + "/mlm", "--objective", "sop", "--max-steps", "1", "--max-length", "64", "--threads",
                       "1"},
                      log),
            0)
      << ReadAll(log);
  const std::string text = ReadAll(log);
  EXPECT_TRUE(absl::StrContains(text, "MLM head initialised (no MLM head tensors in the checkpoint)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "SOP head initialised (no dserve_sop.* tensors in the checkpoint)")) << text;
  // The run records its data order's generator (defect 4).
  EXPECT_EQ(ReadJson(r.dir + "/mlm/trainer_state/state.json")["data_order"],
            "mt19937_64, Fisher-Yates from the back, rejection-sampled indices");
}

// Issue 18, defect 3: --resume with ranks that do not share OUT (here: rank
// 1's --out has no trainer_state) is refused on every rank with a message
// naming the cause, instead of ranks resuming from different steps (a hang
// or diverged weights before the fix).
TEST(TrainDistributed, ResumeWithoutASharedOutIsRefused) {
  Workdir r = Prepare("ddp_resume", SmallConfig("cls_factorized", 32, 4, 0.0), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::string shared = r.dir + "/rank0", other = r.dir + "/rank1";
  const std::vector<std::string> common = {"--epochs", "100", "--batch-size", "4", "--seed", "5", "--max-length", "32",
                                           "--save-every", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", shared, with({"--max-steps", "2", "--nproc", "2"})), r.dir + "/a.log"),
            0)
      << ReadAll(r.dir + "/a.log");
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    auto args = TrainArgs(r, "classify", rank == 0 ? shared : other,
                          with({"--max-steps", "4", "--resume", "--world-size", "2", "--rank", std::to_string(rank),
                                "--master-addr", "127.0.0.1", "--master-port", std::to_string(port)}));
    pids.push_back(StartDserve(args, r.dir + "/resume" + std::to_string(rank) + ".log"));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = ReadAll(r.dir + "/resume" + std::to_string(rank) + ".log");
    EXPECT_NE(WaitExit(pids[static_cast<size_t>(rank)]), 0) << log;
    const std::string text = ReadAll(r.dir + "/resume" + std::to_string(rank) + ".log");
    EXPECT_TRUE(absl::StrContains(text, "--resume: the ranks disagree on where to resume")) << text;
    EXPECT_TRUE(absl::StrContains(text, rank == 0 ? "this rank 0: trainer_state at step 2; others: no trainer_state"
                                                  : "this rank 1: no trainer_state; others: trainer_state at step 2"))
        << text;
  }
  EXPECT_EQ(Losses(shared + "/metrics.csv").size(), 2u);  // nothing trained past the refusal
}

// Issue 18, defect 9: a dserve.share_layers model is written the way
// Hugging Face's DebertaV2 (which has no sharing) reads it: every layer's
// names, each holding the shared layer's values, with the sharing kept in
// config.json. Read as HF would (share_layers off: each layer by its own
// names) it computes exactly what we compute. Before the fix only
// layer 0's tensors were written.
TEST(TrainShareLayers, CheckpointIsExpandedForHuggingFace) {
  json config = SmallConfig("cls_factorized", 32, 4, 0.0);
  config["dserve"] = {{"share_layers", true}};
  ASSERT_GE(config["num_hidden_layers"].get<int>(), 2);
  Workdir r = Prepare("share_layers", config, ToyIntents(0), ToyIntents(1), "jsonl");
  const std::string out = r.dir + "/out";
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", out, {"--max-steps", "3", "--max-length", "32", "--lr", "2e-3"}),
                      r.dir + "/train.log"),
            0)
      << ReadAll(r.dir + "/train.log");
  const std::string best = out + "/best";
  ExpectHfLayout(best, "cls_factorized");  // the golden's names, every layer
  EXPECT_TRUE(ReadJson(best + "/config.json")["dserve"]["share_layers"].get<bool>());
  auto file = SafetensorsFile::Open(best + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  int compared = 0;
  for (const auto& t : (*file)->tensors()) {
    const std::string prefix = "deberta.encoder.layer.";
    if (t.name.rfind(prefix, 0) != 0 || t.name.rfind(prefix + "0.", 0) == 0) continue;
    const std::string rest = t.name.substr(t.name.find('.', prefix.size()) + 1);
    const TensorView* first = (*file)->Find(prefix + "0." + rest);
    ASSERT_NE(first, nullptr) << t.name;
    ASSERT_EQ(first->num_bytes, t.num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(first->data, t.data, t.num_bytes), 0) << t.name << " differs from layer 0's";
    ++compared;
  }
  EXPECT_GT(compared, 10);
  // Read as HF reads it: the same directory with share_layers off.
  const std::string hf = r.dir + "/as_hf";
  fs::create_directories(hf);
  for (const char* f : {"model.safetensors", "spm.model"}) fs::copy_file(best + "/" + f, hf + "/" + f);
  json hf_config = ReadJson(best + "/config.json");
  hf_config["dserve"]["share_layers"] = false;
  WriteText(hf + "/config.json", hf_config.dump(2));
  auto ours = DebertaModel::Load(best, ModelOptions());
  auto theirs = DebertaModel::Load(hf, ModelOptions());
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  TokenBatch batch = TokenBatch::Pad({{1, 17, 42, 99, 2}, {1, 5, 2}}, {}, 0);
  auto a = (*ours)->Run(batch), b = (*theirs)->Run(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->logits.size(), b->logits.size());
  for (size_t i = 0; i < a->logits.size(); ++i) EXPECT_NEAR(a->logits[i], b->logits[i], 1e-6) << i;
}

// Issue 18 recipes: --select-metric picks OUT/best by the named eval metric
// (the first evaluation reaching its maximum), and the recipe flags refuse
// bad values by name.
TEST(TrainRecipes, SelectMetricPicksBestByThatMetric) {
  Workdir r = Prepare("select", SmallConfig("cls_factorized", 48, 6, 0.1), ToyIntents(0), ToyIntents(1), "jsonl");
  const std::string out = r.dir + "/out";
  ASSERT_EQ(RunDserve(TrainArgs(r, "classify", out,
                                {"--eval", r.dev, "--epochs", "3", "--batch-size", "16", "--lr", "1e-3",
                                 "--eval-every", "2", "--seed", "2", "--max-length", "32", "--select-metric",
                                 "macro_f1", "--layer-lr-decay", "0.9"}),
                      out + ".log"),
            0)
      << ReadAll(out + ".log");
  double best_f1 = -1;
  int64_t best_step = -1;
  int evals = 0;
  for (auto& row : ReadCsv(out + "/metrics.csv")) {
    if (row.at("eval_macro_f1").empty()) continue;
    ++evals;
    const double f1 = std::stod(row.at("eval_macro_f1"));
    if (f1 > best_f1 + 1e-9) {
      best_f1 = f1;
      best_step = std::stoll(row.at("step"));
    }
  }
  ASSERT_GE(evals, 3);
  json config = ReadJson(out + "/best/config.json");
  EXPECT_EQ(config["dserve"]["training"]["step"].get<int64_t>(), best_step);
  EXPECT_NEAR(config["dserve"]["eval_metrics"]["macro_f1"].get<double>(), best_f1, 1e-5);
  EXPECT_EQ(config["dserve"]["training"]["select_metric"], "macro_f1");
  EXPECT_DOUBLE_EQ(config["dserve"]["training"]["layer_lr_decay"].get<double>(), 0.9);
  EXPECT_TRUE(absl::StrContains(ReadAll(out + ".log"), "macro_f1")) << ReadAll(out + ".log");

  // Bad values: exit 2, naming the flag (and the valid metric names).
  EXPECT_EQ(RunDserve(TrainArgs(r, "classify", r.dir + "/o2", {"--select-metric", "mrr@10"}), r.dir + "/2.log"), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/2.log"), "accuracy, macro_f1")) << ReadAll(r.dir + "/2.log");
  for (const char* bad : {"0", "1.5"}) {
    EXPECT_EQ(RunDserve(TrainArgs(r, "classify", r.dir + "/o3", {"--layer-lr-decay", bad}), r.dir + "/3.log"), 2);
    EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/3.log"), "--layer-lr-decay")) << ReadAll(r.dir + "/3.log");
  }
  // A model whose layers share weights has no per-layer depth.
  json shared = SmallConfig("cls_factorized", 48, 6, 0.1);
  shared["dserve"] = {{"share_layers", true}};
  WriteText(r.dir + "/shared.json", shared.dump());
  std::vector<std::string> args = TrainArgs(r, "classify", r.dir + "/o4", {"--layer-lr-decay", "0.8"});
  *std::find(args.begin(), args.end(), r.config) = r.dir + "/shared.json";
  EXPECT_EQ(RunDserve(args, r.dir + "/4.log"), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(r.dir + "/4.log"), "shares its encoder layers")) << ReadAll(r.dir + "/4.log");
}

TEST(TrainCli, OptionErrorsExitTwo) {
  const std::string dir = ScratchDir("cli");
  WriteText(dir + "/t.jsonl", ToyIntents(1));
  // Neither --init nor --config.
  EXPECT_EQ(RunDserve({"train", "--task", "classify", "--train", dir + "/t.jsonl", "--out", dir + "/o"}, dir + "/1.log"), 2);
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/1.log"), "--init")) << ReadAll(dir + "/1.log");
  EXPECT_EQ(RunDserve({"train", "--task", "poetry", "--train", dir + "/t.jsonl", "--out", dir + "/o"}, dir + "/2.log"), 2);
  // A bad training file names the line.
  WriteText(dir + "/bad.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": 1}\n");
  WriteText(dir + "/config.json", SmallConfig("cls_factorized", 48, 6, 0.1).dump());
  EXPECT_EQ(RunDserve({"train", "--task", "classify", "--train", dir + "/bad.jsonl", "--config", dir + "/config.json",
                       "--tokenizer", GoldenSpm(), "--out", dir + "/o"},
                      dir + "/3.log"),
            2);
  EXPECT_TRUE(absl::StrContains(ReadAll(dir + "/3.log"), "bad.jsonl:2")) << ReadAll(dir + "/3.log");
  // eval on a missing checkpoint: exit 2.
  EXPECT_EQ(RunDserve({"eval", "--model", dir + "/nothing", "--data", dir + "/t.jsonl"}, dir + "/4.log"), 2);
}

// --gradient-checkpointing recomputes each layer in backward under the
// forward's dropout masks and autocast state: the same training, step for
// step (with dropout on, so a recomputation that drew new masks would show),
// for classify and for MLM with the EMD, in fp32 and with --bf16.
TEST(TrainRecipes, GradientCheckpointingTrainsTheSame) {
  struct Case {
    std::string task, data, ext;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"classify", ToyIntents(0), "jsonl", {"--max-length", "32"}},
      {"classify", ToyIntents(0), "jsonl", {"--max-length", "32", "--bf16"}},
      {"mlm", ToyCorpus(2, 40), "txt", {"--max-length", "48"}},
  };
  int index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.task + (c.extra.size() > 2 ? " --bf16" : ""));
    Workdir r = Prepare("checkpointing" + std::to_string(index++), SmallConfig("cls_factorized", 48, 6, 0.1), c.data,
                        c.data, c.ext);
    std::vector<std::string> common = {"--max-steps", "6", "--batch-size", "8", "--lr", "2e-3", "--seed", "5"};
    common.insert(common.end(), c.extra.begin(), c.extra.end());
    std::vector<std::string> with = common;
    with.push_back("--gradient-checkpointing");
    ASSERT_EQ(RunDserve(TrainArgs(r, c.task, r.dir + "/plain", common), r.dir + "/plain.log"), 0)
        << ReadAll(r.dir + "/plain.log");
    ASSERT_EQ(RunDserve(TrainArgs(r, c.task, r.dir + "/ckpt", with), r.dir + "/ckpt.log"), 0)
        << ReadAll(r.dir + "/ckpt.log");
    const std::vector<double> plain = Losses(r.dir + "/plain/metrics.csv");
    const std::vector<double> ckpt = Losses(r.dir + "/ckpt/metrics.csv");
    ASSERT_EQ(plain.size(), 6u);
    ASSERT_EQ(ckpt.size(), plain.size());
    // fp32: the same ops on the same values, equal up to the order in which
    // a weight's gradient contributions are summed (1e-5 relative, 100x what
    // that order can do). bf16: the first step's loss agrees to 1e-5 (same
    // forward), later ones drift by up to 6e-5 (measured) as bf16-rounded
    // gradients are summed in another grouping in the recomputation's own
    // backward pass. A recomputation that draws other dropout masks (the
    // generator state not replayed) is off by 1e-4 to 6.7e-4 from step 1 on
    // (measured), so the fp32 cases catch it by 10x and the bf16 one at most
    // steps.
    // On a CPU with no native bf16 (no avx512_bf16: LibTorch's bf16 matmuls
    // take its reference kernels, not oneDNN's) even the first step's
    // forward is not bit-stable between the two runs: 2.0e-5 relative on an
    // AMD EPYC Zen 3 (AVX2 only). There the bf16 case gets 2e-4 from step 0;
    // the fp32 cases still catch the redrawn masks by 10x.
    const bool bf16 = c.extra.size() > 2;
    const bool native_bf16 = CpuHasFlag("avx512_bf16");
    for (size_t i = 0; i < plain.size(); ++i) {
      const double tolerance = (bf16 && (i > 0 || !native_bf16) ? 2e-4 : 1e-5) * std::max(1.0, plain[i]);
      EXPECT_NEAR(ckpt[i], plain[i], tolerance) << i;
    }
    EXPECT_NE(plain.front(), plain.back());  // it trained
    EXPECT_EQ(ReadJson(r.dir + "/ckpt/best/config.json")["dserve"]["training"]["gradient_checkpointing"], true);
  }
}

}  // namespace
}  // namespace dserve::testing
