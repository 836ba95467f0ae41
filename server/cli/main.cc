// `dserve`: server, trainer and tools as subcommands (DESIGN §3).
#include <iostream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "model/tools/bench_command.h"
#include "model/tools/convert_command.h"
#include "model/tools/forward_command.h"
#ifdef DSERVE_HAVE_TOKENIZER
#include "model/tools/tokenize_command.h"
#include "model/tools/eval_command.h"
#include "model/tools/train_command.h"
#include "model/tools/train_tokenizer_command.h"
#endif
#include "model/util/logging.h"
#include "model/util/process.h"
#include "server/cli/commands.h"

int main(int argc, char** argv) {
  // Long-running commands share the cores with other threads (gRPC,
  // tokenization, data loading): OpenMP workers must sleep, not spin.
  // forward and bench keep the default, which is faster on an idle machine.
  if (argc > 1) {
    const std::string command = argv[1];
    if (command == "serve" || command == "train" || command == "eval") dserve::EnsurePassiveOpenMpWait(argv);
  }
  dserve::TuneMalloc();
  CLI::App app{"dserve: DeBERTa inference server, trainer and tools"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();

  // forward
  dserve::ForwardCommandOptions forward;
  auto* fwd = app.add_subcommand("forward", "Run a checkpoint on tokenized JSONL (stdin) and print raw head outputs");
  fwd->add_option("--model", forward.model_dir, "checkpoint directory")->required();
  fwd->add_option("--batch-size", forward.batch_size, "lines padded and run together")->capture_default_str();
  fwd->add_option("--dtype", forward.dtype, "fp32|bf16|fp16|int8")->capture_default_str();
  fwd->add_option("--device", forward.device, "auto|cpu|cuda|cuda:N")->capture_default_str();
  fwd->add_flag("--hidden", forward.hidden, "also print last_hidden_state");

  // convert
  dserve::ConvertCommandOptions convert;
  auto* conv = app.add_subcommand(
      "convert", "Write a safetensors checkpoint directory from a checkpoint (pytorch_model.bin, shards, ...)");
  conv->add_option("--model", convert.model_dir, "checkpoint directory to read")->required();
  conv->add_option("--out", convert.out_dir, "new directory: model.safetensors, config and tokenizer files copied")
      ->required();

  // tokenize
  std::string tokenize_model;
  auto* tok = app.add_subcommand("tokenize", "Tokenize JSONL {\"text\", \"text_pair\"?} from stdin");
  tok->add_option("--model", tokenize_model, "directory with spm.model or tokenizer.json")->required();

#ifdef DSERVE_HAVE_TOKENIZER
  // train-tokenizer (runs Debian's spm_train; DeBERTa layout)
  dserve::TrainTokenizerOptions train_tokenizer;
  auto* train_tok = app.add_subcommand(
      "train-tokenizer", "Train a DeBERTa-layout SentencePiece Unigram spm.model with spm_train");
  train_tok->add_option("--input", train_tokenizer.inputs, "UTF-8 text files, one sentence per line")
      ->required();
  train_tok->add_option("--vocab-size", train_tokenizer.vocab_size, "all ids, [PAD] [CLS] [SEP] [UNK] [MASK] included")
      ->required();
  train_tok->add_option("--out", train_tokenizer.out_dir, "directory for spm.model and spm.vocab")->required();
  train_tok->add_option("--model-type", train_tokenizer.model_type, "unigram (the only type dserve reads)")
      ->capture_default_str();
  train_tok->add_option("--character-coverage", train_tokenizer.character_coverage)->capture_default_str();
  train_tok->add_flag("--byte-fallback", train_tokenizer.byte_fallback, "unknown characters become UTF-8 byte pieces");
  train_tok->add_option("--max-sentences", train_tokenizer.max_sentences, "sample this many lines (0 = all)")
      ->capture_default_str();
  train_tok->add_option("--threads", train_tokenizer.threads, "spm_train threads (the model depends on it)")
      ->capture_default_str();
  train_tok->add_option("--seed", train_tokenizer.seed)->capture_default_str();
  train_tok->add_option("--spm-train", train_tokenizer.spm_train, "spm_train program (default: $DSERVE_SPM_TRAIN or PATH)");
  train_tok->add_flag("--verbose", train_tokenizer.verbose, "stream spm_train's log to stderr");
#endif

#ifdef DSERVE_HAVE_TOKENIZER
  // train / eval (model/tools/train_command.h, eval_command.h)
  dserve::TrainCommandOptions train_options;
  train_options.argv.assign(argv, argv + argc);
  auto* train_cmd = dserve::AddTrainCommand(app, &train_options);
  dserve::EvalCommandOptions eval_options;
  auto* eval_cmd = dserve::AddEvalCommand(app, &eval_options);
#endif

  // bench
  auto* bench = app.add_subcommand("bench", "Performance harness");
  bench->require_subcommand(1);
  dserve::EncoderBenchOptions encoder_bench;
  auto* bench_encoder = bench->add_subcommand("encoder", "Encoder throughput vs the machine's matmul peak");
  bench_encoder->add_option("--shape", encoder_bench.shape, "v3-xsmall|v3-small|v3-base|v3-large|deberta-base|deberta-large|albert-base|config.json")
      ->capture_default_str();
  bench_encoder->add_option("--batch-size", encoder_bench.batch_size)->capture_default_str();
  bench_encoder->add_option("--length", encoder_bench.length)->capture_default_str();
  bench_encoder->add_option("--profile", encoder_bench.profile,
                            "also profile one forward per dtype: Chrome trace to PROFILE.<dtype>.json");
  bench_encoder->add_flag("--compare-unfused", encoder_bench.compare_unfused,
                          "also time each dtype with torch ops instead of the fused CPU kernels (rows <dtype>-unfused)");
  bench_encoder->add_flag("--ablate-kernels", encoder_bench.ablate_kernels,
                          "also time each dtype with one fused CPU kernel off at a time, and with all off");
  bench_encoder->add_option("--repeats", encoder_bench.repeats)->capture_default_str();
  bench_encoder->add_option("--warmup", encoder_bench.warmup, "untimed forwards before the timed ones, per row")
      ->capture_default_str();
  bench_encoder->add_option("--threads", encoder_bench.threads, "0 = all cores")->capture_default_str();
  bench_encoder->add_option("--dtypes", encoder_bench.dtypes, "comma-separated: fp32, bf16, fp16, int8")->delimiter(',')->capture_default_str();
  bench_encoder->add_option("--device", encoder_bench.device, "cpu|cuda|cuda:N")->capture_default_str();
  bench_encoder->add_flag("--json", encoder_bench.json, "print one JSON object");

  dserve::RegisterServerCommands(app);

  CLI11_PARSE(app, argc, argv);
  dserve::SetLogLevel(log_level);

  if (fwd->parsed()) return dserve::RunForwardCommand(forward, std::cin, std::cout, std::cerr);
  if (conv->parsed()) return dserve::RunConvertCommand(convert, std::cout, std::cerr);
  if (tok->parsed()) {
#ifdef DSERVE_HAVE_TOKENIZER
    return dserve::RunTokenizeCommand(tokenize_model, std::cin, std::cout, std::cerr);
#else
    std::cerr << "dserve tokenize: this build has no tokenizer (DSERVE_WITH_TOKENIZER=OFF)\n";
    return 2;
#endif
  }
#ifdef DSERVE_HAVE_TOKENIZER
  if (train_tok->parsed()) return dserve::RunTrainTokenizerCommand(train_tokenizer, std::cout, std::cerr);
#endif
#ifdef DSERVE_HAVE_TOKENIZER
  if (train_cmd->parsed()) return dserve::RunTrainCommand(train_options, std::cerr);
  if (eval_cmd->parsed()) return dserve::RunEvalCommand(eval_options, std::cout, std::cerr);
#endif
  if (bench_encoder->parsed()) return dserve::RunEncoderBench(encoder_bench, std::cout, std::cerr);
  return dserve::RunServerCommands(app);
}
