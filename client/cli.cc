#include "client/cli.h"

#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/dserve_client.h"
#include "client/load_generator.h"
#include "client/load_input.h"
#include "client/proto_json.h"

namespace dserve {
namespace {

constexpr int kExitCallFailed = 1;
constexpr int kExitUsage = 2;

struct GlobalFlags {
  std::string target = "localhost:5001";
  std::string lb;
  std::string tls_ca;
  std::string token_file;
  int64_t timeout_ms = 30000;
  int max_attempts = 0;  // 0 = 3 for single calls, 1 for load
  bool json = false;
};

struct CallFlags {
  std::string model;
  std::vector<std::string> texts;  // classify texts, or rerank documents
  std::string question;            // answer question, or rerank query
  std::vector<std::string> contexts;
  uint32_t top = 0;  // top_k / top_n
  bool raw_scores = false;
  bool return_documents = false;
  std::string service;  // health
};

struct LoadFlags {
  std::string model;
  std::string task;
  std::string input;
  std::string protocol = "dserve";
  LoadOptions options;
  bool progress = false;
};

// The failure of a call: code name and message on stderr; JSON on stdout.
int ReportError(const absl::Status& status, bool json) {
  const std::string code = std::string(StatusCodeName(static_cast<grpc::StatusCode>(status.code())));
  std::cerr << "dserve-client: " << code << ": " << status.message() << "\n";
  if (json) {
    nlohmann::json error = {{"error", {{"code", code}, {"message", std::string(status.message())}}}};
    std::cout << error.dump() << "\n";
  }
  return kExitCallFailed;
}

int LocalError(const absl::Status& status) {
  std::cerr << "dserve-client: " << status.message() << "\n";
  return kExitUsage;
}

absl::StatusOr<ClientOptions> MakeClientOptions(const GlobalFlags& g, int default_attempts) {
  ClientOptions o;
  o.target = g.target;
  o.lb_policy = g.lb;
  o.tls_ca_file = g.tls_ca;
  o.timeout_ms = g.timeout_ms;
  o.retry.max_attempts = g.max_attempts > 0 ? g.max_attempts : default_attempts;
  if (!g.token_file.empty()) {
    auto token = ReadTokenFile(g.token_file);
    if (!token.ok()) return token.status();
    o.token = *std::move(token);
  }
  return o;
}

void PrintClassify(const v1::ClassifyRequest& request, const v1::ClassifyResponse& response) {
  for (int i = 0; i < response.results_size(); ++i) {
    std::vector<std::string> labels;
    for (const auto& l : response.results(i).labels()) {
      labels.push_back(absl::StrFormat("%s %.4f", l.label(), l.score()));
    }
    std::cout << absl::StrFormat("[%d] %s\t%s\n", i, absl::StrJoin(labels, ", "),
                                 i < request.texts_size() ? request.texts(i) : "");
  }
}

void PrintAnswer(const v1::AnswerResponse& response) {
  for (int i = 0; i < response.answers_size(); ++i) {
    const auto& a = response.answers(i);
    std::cout << absl::StrFormat("%d. \"%s\"  score %.4f  (context %d, chars %d-%d)\n", i + 1,
                                 a.text(), a.score(), a.context_index(), a.start_char(),
                                 a.end_char());
  }
  std::cout << absl::StrFormat("no_answer: %s (null score %.4f)\n",
                               response.no_answer() ? "true" : "false", response.no_answer_score());
}

void PrintRerank(const v1::RerankRequest& request, const v1::RerankResponse& response) {
  for (int i = 0; i < response.results_size(); ++i) {
    const auto& r = response.results(i);
    const std::string& doc = r.index() < static_cast<uint32_t>(request.documents_size())
                                 ? request.documents(static_cast<int>(r.index()))
                                 : r.document();
    std::cout << absl::StrFormat("%d. [%d] %.4f\t%s\n", i + 1, r.index(), r.score(), doc);
  }
}

void PrintModels(const v1::ListModelsResponse& response) {
  for (const auto& m : response.models()) {
    std::cout << absl::StrFormat("%s\t%s\t%s\t%s\tmax_length=%d\t%s\n", m.name(), m.task(),
                                 m.device(), m.dtype(), m.max_length(),
                                 absl::StrJoin(m.labels(), ","));
  }
}

template <typename Response, typename Print>
int Finish(const absl::StatusOr<Response>& response, bool json, Print print) {
  if (!response.ok()) return ReportError(response.status(), json);
  if (json) {
    std::cout << ProtoToJson(*response).dump() << "\n";
  } else {
    print(*response);
  }
  return 0;
}

int RunCall(const std::string& command, const GlobalFlags& g, const CallFlags& f) {
  auto options = MakeClientOptions(g, /*default_attempts=*/3);
  if (!options.ok()) return LocalError(options.status());
  auto client = Client::Create(*options);
  if (!client.ok()) return LocalError(client.status());
  if (command == "classify") {
    v1::ClassifyRequest request;
    request.set_model(f.model);
    for (const auto& t : f.texts) request.add_texts(t);
    request.set_top_k(f.top);
    request.set_raw_scores(f.raw_scores);
    return Finish((*client)->Classify(request), g.json,
                  [&](const auto& r) { PrintClassify(request, r); });
  }
  if (command == "answer") {
    v1::AnswerRequest request;
    request.set_model(f.model);
    request.set_question(f.question);
    for (const auto& c : f.contexts) request.add_contexts(c);
    request.set_top_k(f.top);
    return Finish((*client)->Answer(request), g.json, [](const auto& r) { PrintAnswer(r); });
  }
  if (command == "rerank") {
    v1::RerankRequest request;
    request.set_model(f.model);
    request.set_query(f.question);
    for (const auto& d : f.texts) request.add_documents(d);
    request.set_top_n(f.top);
    request.set_raw_scores(f.raw_scores);
    request.set_return_documents(f.return_documents);
    return Finish((*client)->Rerank(request), g.json,
                  [&](const auto& r) { PrintRerank(request, r); });
  }
  if (command == "models") {
    return Finish((*client)->ListModels(), g.json, [](const auto& r) { PrintModels(r); });
  }
  // health
  auto status = (*client)->Health(f.service);
  if (!status.ok()) return ReportError(status.status(), g.json);
  if (g.json) {
    std::cout << nlohmann::json{{"service", f.service}, {"status", *status}}.dump() << "\n";
  } else {
    std::cout << *status << "\n";
  }
  return *status == "SERVING" ? 0 : kExitCallFailed;
}

nlohmann::json LoadConfigJson(const GlobalFlags& g, const LoadFlags& f, const LoadOptions& o) {
  return {{"target", g.target},
          {"lb", g.lb},
          {"model", f.model},
          {"task", f.task},
          {"input", f.input},
          {"loop", o.rps > 0 ? "open" : "closed"},
          {"concurrency", o.concurrency},
          {"rps", o.rps},
          {"requests", o.requests},
          {"duration_s", o.duration_s},
          {"warmup_s", o.warmup_s},
          {"channels", o.channels},
          {"protocol", f.protocol}};
}

int RunLoadCommand(const GlobalFlags& g, LoadFlags f) {
  auto task = ParseLoadTask(f.task);
  if (!task.ok()) return LocalError(task.status());
  LoadOptions& o = f.options;
  if (o.concurrency == 0 && o.rps == 0) o.concurrency = 1;
  o.protocol = f.protocol == "oip" ? LoadOptions::Protocol::kOip : LoadOptions::Protocol::kDserve;
  if (absl::Status s = ValidateLoadOptions(o); !s.ok()) return LocalError(s);
  auto inputs = ReadLoadInputFile(*task, f.model, f.input);
  if (!inputs.ok()) return LocalError(inputs.status());
  auto options = MakeClientOptions(g, /*default_attempts=*/1);
  if (!options.ok()) return LocalError(options.status());
  const bool tty = isatty(STDERR_FILENO) == 1;
  if (tty || f.progress) {
    o.progress = &std::cerr;
    o.progress_tty = tty;
  }
  auto report = RunLoad(*options, o, *std::move(inputs));
  if (!report.ok()) return ReportError(report.status(), g.json);
  if (g.json) {
    nlohmann::json out = ReportToJson(*report);
    out["config"] = LoadConfigJson(g, f, o);
    std::cout << out.dump() << "\n";
  } else {
    std::cout << LoadConfigJson(g, f, o).dump() << "\n" << FormatReport(*report);
  }
  return 0;
}

void AddGlobalFlags(CLI::App& app, GlobalFlags* g) {
  app.add_option("--target", g->target,
                 "Server: host:port or a gRPC target such as ipv4:127.0.0.1:5001,127.0.0.1:5002")
      ->capture_default_str();
  app.add_option("--lb", g->lb, "Load-balancing policy over the target's addresses (default: round_robin, through the default service config)")
      ->check(CLI::IsMember({"round_robin", "pick_first"}));
  app.add_option("--tls-ca", g->tls_ca, "PEM CA of the server certificate (enables TLS)")
      ->check(CLI::ExistingFile);
  app.add_option("--token-file", g->token_file, "File whose first line is the bearer token")
      ->check(CLI::ExistingFile);
  app.add_option("--timeout-ms", g->timeout_ms, "Deadline of each call, retries included; 0 = none")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-attempts", g->max_attempts,
                 "Attempts per call, retrying UNAVAILABLE/RESOURCE_EXHAUSTED with backoff "
                 "(default 3; 1 for load, which reports raw outcomes)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", g->json, "Print one JSON object (proto field names)");
}

void AddCallCommands(CLI::App& app, CallFlags* f) {
  auto* classify = app.add_subcommand("classify", "Classify one or more texts");
  classify->add_option("--model", f->model, "Model name")->required();
  classify->add_option("--top-k", f->top, "Labels per text; 0 = all");
  classify->add_flag("--raw-scores", f->raw_scores, "Logits instead of probabilities");
  classify->add_option("text", f->texts, "Texts to classify")->required();

  auto* answer = app.add_subcommand("answer", "Extractive question answering");
  answer->add_option("--model", f->model, "Model name")->required();
  answer->add_option("--question", f->question, "The question")->required();
  answer->add_option("--context", f->contexts, "One or more contexts")->required();
  answer->add_option("--top-k", f->top, "Answers to return; 0 = 1");

  auto* rerank = app.add_subcommand("rerank", "Rerank documents against a query");
  rerank->add_option("--model", f->model, "Model name")->required();
  rerank->add_option("--query", f->question, "The query")->required();
  rerank->add_option("--top-n", f->top, "Documents to return; 0 = all");
  rerank->add_flag("--raw-scores", f->raw_scores, "Logits instead of sigmoid scores");
  rerank->add_flag("--return-documents", f->return_documents, "Echo documents in the reply");
  rerank->add_option("document", f->texts, "Documents to rank")->required();

  app.add_subcommand("models", "List the served models");
  auto* health = app.add_subcommand("health", "gRPC health check (exit 0 when SERVING)");
  health->add_option("--service", f->service, "Service or model name; empty = whole server");
}

void AddLoadCommand(CLI::App& app, LoadFlags* f) {
  auto* load = app.add_subcommand("load", "Load generator (closed loop or open loop)");
  load->add_option("--model", f->model, "Model name")->required();
  load->add_option("--task", f->task, "classify | answer | rerank")
      ->required()
      ->check(CLI::IsMember({"classify", "answer", "rerank"}));
  load->add_option("--input", f->input, "JSONL inputs, cycled through")
      ->required()
      ->check(CLI::ExistingFile);
  auto* requests = load->add_option("--requests", f->options.requests, "Counted calls");
  auto* duration = load->add_option("--duration-s", f->options.duration_s, "Seconds of counted load");
  requests->excludes(duration);
  auto* concurrency =
      load->add_option("--concurrency", f->options.concurrency, "Closed loop: calls in flight (default 1)");
  auto* rps = load->add_option("--rps", f->options.rps, "Open loop: calls per second, on a fixed schedule");
  concurrency->excludes(rps);
  load->add_option("--warmup-s", f->options.warmup_s, "Uncounted seconds first")->capture_default_str();
  load->add_option("--channels", f->options.channels, "Connections to spread calls over")
      ->capture_default_str();
  load->add_flag("--progress", f->progress, "Progress line on stderr even when it is not a tty");
  load->add_option("--protocol", f->protocol,
                   "dserve: dserve.v1 Classify/Answer/Rerank; oip: the Open Inference Protocol's ModelInfer "
                   "(inference.GRPCInferenceService) with the same inputs as tensors")
      ->check(CLI::IsMember({"dserve", "oip"}))
      ->capture_default_str();
}

}  // namespace

int RunClientCli(int argc, char** argv) {
  CLI::App app{"dserve-client: call a dserve server, or load it"};
  app.require_subcommand(1);
  app.fallthrough();
  GlobalFlags global;
  CallFlags call;
  LoadFlags load;
  AddGlobalFlags(app, &global);
  AddCallCommands(app, &call);
  AddLoadCommand(app, &load);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  const std::string command = app.get_subcommands().front()->get_name();
  if (command == "load") return RunLoadCommand(global, load);
  return RunCall(command, global, call);
}

}  // namespace dserve
