#include "server/options.h"

#include <algorithm>
#include <istream>
#include <sstream>
#include <set>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace dserve {
namespace {

struct ConfigItem {
  std::string name;  // flag name without dashes, underscores turned to dashes
  std::vector<std::string> values;
};

// Top-level scalars and sequences become flag values; `model(s)` may also
// be a map NAME: DIR or NAME: {dir: DIR, SETTING: VALUE...}, whose settings
// go to `*model_settings`.
absl::StatusOr<std::vector<ConfigItem>> ReadConfigFile(
    const std::string& path, std::map<std::string, std::map<std::string, std::string>>* model_settings) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("--config: cannot read ", path));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--config: ", path, " is not valid YAML/JSON: ", e.what()));
  }
  std::vector<ConfigItem> items;
  if (!root || root.IsNull()) return items;
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat("--config: ", path, ": top level must map settings to values"));
  try {
    for (const auto& entry : root) {
      ConfigItem item;
      item.name = absl::StrReplaceAll(entry.first.as<std::string>(), {{"_", "-"}});
      if (item.name == "models") item.name = "model";
      const YAML::Node& value = entry.second;
      if (value.IsSequence()) {
        for (const auto& v : value) item.values.push_back(v.as<std::string>());
      } else if (value.IsMap()) {
        for (const auto& kv : value) {
          const std::string name = kv.first.as<std::string>();
          if (item.name != "model" || !kv.second.IsMap()) {
            item.values.push_back(absl::StrCat(name, "=", kv.second.as<std::string>()));
            continue;
          }
          std::string dir;
          for (const auto& setting : kv.second) {
            const std::string key = absl::StrReplaceAll(setting.first.as<std::string>(), {{"-", "_"}});
            if (key == "dir") {
              dir = setting.second.as<std::string>();
            } else {
              (*model_settings)[name][key] = setting.second.as<std::string>();
            }
          }
          if (dir.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat("--config: ", path, ": models: ", name, ": `dir` (the checkpoint directory) is required"));
          }
          item.values.push_back(absl::StrCat(name, "=", dir));
        }
      } else {
        item.values.push_back(value.as<std::string>());
      }
      items.push_back(std::move(item));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--config: ", path, ": ", e.what()));
  }
  return items;
}

// The groups of `dserve serve --help`; docs/serving.md has one section per
// group under exactly these names (ctest docs.serve_flags checks both).
constexpr char kGroupModels[] = "Models and listeners";
constexpr char kGroupHttp[] = "HTTP";
constexpr char kGroupDevices[] = "Devices and precision";
constexpr char kGroupBatching[] = "Batching and queues";
constexpr char kGroupLimits[] = "Limits";
constexpr char kGroupSecurity[] = "Security";
constexpr char kGroupLifecycle[] = "Lifecycle and reload";

}  // namespace

void AddServeFlags(CLI::App* app, ServeOptions* o) {
  // Models and listeners
  app->add_option("--config", o->config_file, "YAML or JSON file with the same settings (flags override it)")
      ->group(kGroupModels);
  app->add_option("--model", o->models, "NAME=DIR of a checkpoint to serve (repeatable)")->group(kGroupModels);
  app->add_option("--listen", o->listen, "gRPC address HOST:PORT")->capture_default_str()->group(kGroupModels);
  app->add_option("--metrics-listen", o->metrics_listen, "Prometheus /metrics address; empty disables")
      ->capture_default_str()
      ->group(kGroupModels);

  // HTTP
  app->add_option("--http-listen", o->http_listen, "HTTP/JSON API address (HOST:PORT); empty = off")
      ->capture_default_str()
      ->group(kGroupHttp);
  app->add_option("--http-default-model", o->http_default_model,
                  "model of the TEI routes when a request names none; empty = the only model of the task")
      ->group(kGroupHttp);
  app->add_option("--http-threads", o->http_threads, "HTTP server threads (keep-alive connections served at once)")
      ->capture_default_str()
      ->group(kGroupHttp);

  // Devices and precision
  app->add_option("--device", o->device, "auto|cpu|cuda|cuda:N")->capture_default_str()->group(kGroupDevices);
  app->add_option("--dtype", o->dtype,
                  "auto|fp32|bf16|fp16|int8 (auto: time fp32 and bf16 at load, serve bf16 when it is faster and keeps "
                  "fp32's argmax, else fp32; int8: dense layers quantized, CPU only; docs/serving.md); per model in "
                  "--config")
      ->capture_default_str()
      ->group(kGroupDevices);
  app->add_option("--workers", o->workers, "worker threads per model (0 = auto)")
      ->capture_default_str()
      ->group(kGroupDevices);
  app->add_option("--threads-per-worker", o->threads_per_worker, "intra-op threads per worker (0 = auto)")
      ->capture_default_str()
      ->group(kGroupDevices);
  app->add_option("--completion-threads", o->completion_threads,
                  "threads that decode finished calls and build replies, off the inference workers")
      ->capture_default_str()
      ->group(kGroupDevices);

  // Batching and queues
  app->add_option("--max-batch-size", o->max_batch_size, "items per batch")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--max-batch-tokens", o->max_batch_tokens, "padded tokens per batch")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--max-queue-delay-us", o->max_queue_delay_us,
                  "an idle worker waits this long, microseconds, for a batch to fill (size or tokens) before it takes "
                  "what is there; 0 = at once")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--max-queue-items", o->max_queue_items,
                  "queued items per model: requests are refused (RESOURCE_EXHAUSTED) while this many wait; a "
                  "request with more items is INVALID_ARGUMENT")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--packing", o->packing, "length-aware packing (true|false)")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--max-padding-ratio", o->max_padding_ratio,
                  "with --packing: a batch's padded tokens at most this x its real tokens (0 = no bound)")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--default-priority", o->default_priority,
                  "priority of requests that set none (higher is batched first); per model in --config")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--priority-aging-ms", o->priority_aging_ms,
                  "each this many ms an item waits raises its priority by one, so low priorities never starve")
      ->capture_default_str()
      ->group(kGroupBatching);
  app->add_option("--max-queue-time-ms", o->max_queue_time_ms,
                  "an item queued this long gets DEADLINE_EXCEEDED even without a client deadline; 0 = none")
      ->capture_default_str()
      ->group(kGroupBatching);

  // Limits
  app->add_option("--max-message-bytes", o->max_message_bytes, "largest request message, bytes")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-texts-per-request", o->max_texts_per_request, "Classify texts of one request")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-documents-per-request", o->max_documents_per_request, "Rerank documents of one request")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-contexts-per-request", o->max_contexts_per_request, "Answer contexts of one request")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-windows-per-request", o->max_windows_per_request,
                  "Answer windows / Rerank chunks of one request, all texts together")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-text-bytes", o->max_text_bytes, "largest single text, bytes")
      ->capture_default_str()
      ->group(kGroupLimits);
  app->add_option("--max-concurrent-preprocess", o->max_concurrent_preprocess,
                  "requests parsed and tokenized at once; more get RESOURCE_EXHAUSTED (0 = auto: 2 x cores, >= 4)")
      ->capture_default_str()
      ->group(kGroupLimits);

  // Security
  app->add_option("--tls-cert", o->tls_cert, "server certificate (PEM)")->group(kGroupSecurity);
  app->add_option("--tls-key", o->tls_key, "server private key (PEM)")->group(kGroupSecurity);
  app->add_option("--tls-client-ca", o->tls_client_ca, "CA for client certificates (mTLS)")->group(kGroupSecurity);
  app->add_option("--auth-token-file", o->auth_token_file, "file holding the bearer token clients must send")
      ->group(kGroupSecurity);

  // Lifecycle and reload
  app->add_option("--drain-timeout-s", o->drain_timeout_s, "seconds in-flight calls get on SIGTERM")
      ->capture_default_str()
      ->group(kGroupLifecycle);
  app->add_option("--max-connection-age-s", o->max_connection_age_s,
                  "GOAWAY on connections older than this, seconds (+-10%), so clients rebalance; 0 = never")
      ->capture_default_str()
      ->group(kGroupLifecycle);
  app->add_option("--max-connection-age-grace-s", o->max_connection_age_grace_s,
                  "calls on a connection past its age get this long, seconds, before it is closed")
      ->capture_default_str()
      ->group(kGroupLifecycle);
  app->add_option("--watch", o->watch_s,
                  "hot reload: poll the model directories every SECONDS (alone: 2; default off); SIGHUP checks at once")
      ->expected(0, 1)
      ->default_str("2")
      ->group(kGroupLifecycle);
}

absl::Status ApplyConfigFile(CLI::App* app, const std::string& path, ServeOptions* options) {
  auto items = ReadConfigFile(path, &options->model_settings);
  if (!items.ok()) return items.status();
  for (const ConfigItem& item : *items) {
    CLI::Option* option = app->get_option_no_throw("--" + item.name);
    if (option == nullptr || item.name == "config") {
      return absl::InvalidArgumentError(absl::StrCat("--config: ", path, ": unknown setting '", item.name, "'"));
    }
    if (option->count() > 0) continue;  // the command line wins
    try {
      option->add_result(item.values);
      option->run_callback();
    } catch (const CLI::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat("--config: ", path, ": ", item.name, ": ", e.what()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelSpec>> ParseModelSpecs(const std::vector<std::string>& specs) {
  if (specs.empty()) return absl::InvalidArgumentError("--model: at least one NAME=DIR is required");
  std::vector<ModelSpec> out;
  std::set<std::string> names;
  for (const auto& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--model: '", spec, "' is not NAME=DIR"));
    }
    ModelSpec m{spec.substr(0, eq), spec.substr(eq + 1)};
    if (!names.insert(m.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("--model: name '", m.name, "' given twice"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

ModelServeSettings GlobalSettings(const ServeOptions& o) {
  ModelServeSettings s;
  s.dtype = o.dtype;
  s.workers = o.workers;
  s.threads_per_worker = o.threads_per_worker;
  s.max_batch_size = o.max_batch_size;
  s.max_batch_tokens = o.max_batch_tokens;
  s.max_queue_delay_us = o.max_queue_delay_us;
  s.max_queue_items = o.max_queue_items;
  s.packing = o.packing;
  s.max_padding_ratio = o.max_padding_ratio;
  s.priority = o.default_priority;
  s.max_queue_time_ms = o.max_queue_time_ms;
  s.priority_aging_ms = o.priority_aging_ms;
  return s;
}

template <typename T>
bool ParseSetting(const std::string& text, T* out) {
  std::istringstream in(text);
  in >> std::boolalpha >> *out;
  return !in.fail() && (in >> std::ws).eof();
}

// One per-model setting (`key`, underscores) onto `s`.
absl::Status ApplySetting(const std::string& model, const std::string& key, const std::string& value,
                          ModelServeSettings* s) {
  bool ok = false;
  if (key == "dtype") {
    s->dtype = value;  // checked by ValidateSettings
    ok = true;
  } else if (key == "workers") ok = ParseSetting(value, &s->workers);
  else if (key == "threads_per_worker") ok = ParseSetting(value, &s->threads_per_worker);
  else if (key == "max_batch_size") ok = ParseSetting(value, &s->max_batch_size);
  else if (key == "max_batch_tokens") ok = ParseSetting(value, &s->max_batch_tokens);
  else if (key == "max_queue_delay_us") ok = ParseSetting(value, &s->max_queue_delay_us);
  else if (key == "max_queue_items") ok = ParseSetting(value, &s->max_queue_items);
  else if (key == "packing") ok = ParseSetting(value, &s->packing);
  else if (key == "max_padding_ratio") ok = ParseSetting(value, &s->max_padding_ratio);
  else if (key == "priority" || key == "default_priority") ok = ParseSetting(value, &s->priority);
  else if (key == "max_queue_time_ms") ok = ParseSetting(value, &s->max_queue_time_ms);
  else if (key == "priority_aging_ms") ok = ParseSetting(value, &s->priority_aging_ms);
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model, "': unknown per-model setting '", key,
        "' (known: dir, dtype, workers, threads_per_worker, max_batch_size, max_batch_tokens, max_queue_delay_us, "
        "max_queue_items, packing, max_padding_ratio, priority, max_queue_time_ms, priority_aging_ms)"));
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("model '", model, "': ", key, ": bad value '", value, "'"));
  return absl::OkStatus();
}

// Range checks of one model's settings; `where` prefixes the message
// ("" for the global flags, "model 'x': " for overrides).
absl::Status ValidateSettings(const std::string& where, const ModelServeSettings& s) {
  if (s.dtype != "auto" && s.dtype != "fp32" && s.dtype != "bf16" && s.dtype != "fp16" && s.dtype != "int8") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "--dtype must be auto, fp32, bf16, fp16 or int8 (got '", s.dtype, "')"));
  }
  for (auto [flag, value] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"max-batch-size", s.max_batch_size},
           {"max-batch-tokens", s.max_batch_tokens},
           {"max-queue-items", s.max_queue_items},
           {"priority-aging-ms", s.priority_aging_ms}}) {
    if (value <= 0) return absl::InvalidArgumentError(absl::StrCat(where, "--", flag, " must be > 0 (got ", value, ")"));
  }
  for (auto [flag, value] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"max-queue-delay-us", s.max_queue_delay_us},
           {"max-queue-time-ms", s.max_queue_time_ms},
           {"workers", s.workers},
           {"threads-per-worker", s.threads_per_worker}}) {
    if (value < 0) return absl::InvalidArgumentError(absl::StrCat(where, "--", flag, " must be >= 0 (got ", value, ")"));
  }
  if (s.max_padding_ratio != 0 && !(s.max_padding_ratio >= 1.0 && s.max_padding_ratio <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "--max-padding-ratio must be 0 (no bound) or between 1 and 1e6 (got ", s.max_padding_ratio, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ModelSpec>> ResolveModelSpecs(const ServeOptions& options) {
  auto specs = ParseModelSpecs(options.models);
  if (!specs.ok()) return specs.status();
  for (const auto& [name, settings] : options.model_settings) {
    if (std::none_of(specs->begin(), specs->end(), [&](const ModelSpec& m) { return m.name == name; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("per-model settings for '", name, "', which is not a served model (--model)"));
    }
  }
  for (ModelSpec& spec : *specs) {
    spec.settings = GlobalSettings(options);
    auto it = options.model_settings.find(spec.name);
    if (it == options.model_settings.end()) continue;
    for (const auto& [key, value] : it->second) {
      if (auto s = ApplySetting(spec.name, key, value, &spec.settings); !s.ok()) return s;
    }
    if (auto s = ValidateSettings(absl::StrCat("model '", spec.name, "': "), spec.settings); !s.ok()) return s;
  }
  return specs;
}

absl::Status ValidateServeOptions(const ServeOptions& o) {
  auto positive = [](const char* flag, int64_t v) -> absl::Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0 (got ", v, ")"));
    return absl::OkStatus();
  };
  if (auto s = ValidateSettings("", GlobalSettings(o)); !s.ok()) return s;
  if (o.completion_threads < 1 || o.completion_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--completion-threads must be between 1 and 256 (got ", o.completion_threads, ")"));
  }
  for (auto [flag, value] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"--max-message-bytes", o.max_message_bytes},
           {"--max-texts-per-request", o.max_texts_per_request},
           {"--max-documents-per-request", o.max_documents_per_request},
           {"--max-contexts-per-request", o.max_contexts_per_request},
           {"--max-windows-per-request", o.max_windows_per_request},
           {"--max-text-bytes", o.max_text_bytes}}) {
    if (auto s = positive(flag, value); !s.ok()) return s;
  }
  if (!(o.watch_s >= 0) || o.watch_s > 86400) {
    return absl::InvalidArgumentError(absl::StrCat("--watch must be between 0 and 86400 seconds (got ", o.watch_s, ")"));
  }
  if (o.workers < 0 || o.threads_per_worker < 0 || o.drain_timeout_s < 0 || o.max_concurrent_preprocess < 0) {
    return absl::InvalidArgumentError(
        "--workers, --threads-per-worker, --drain-timeout-s and --max-concurrent-preprocess must be >= 0");
  }
  for (auto [flag, value] : std::initializer_list<std::pair<const char*, double>>{
           {"--max-connection-age-s", o.max_connection_age_s},
           {"--max-connection-age-grace-s", o.max_connection_age_grace_s}}) {
    // gRPC takes milliseconds as an int.
    if (!(value >= 0) || value > 86400 * 24) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be between 0 and ", 86400 * 24, " (got ", value, ")"));
    }
  }
  if (o.max_connection_age_s > 0 && o.max_connection_age_s < 0.001) {
    return absl::InvalidArgumentError("--max-connection-age-s must be 0 (never) or at least 0.001");
  }
  if (o.http_threads < 1 || o.http_threads > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-threads must be between 1 and 4096 (got ", o.http_threads, ")"));
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (!o.tls_client_ca.empty() && o.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  return ResolveModelSpecs(o).status();
}

}  // namespace dserve
