// Settings of `dserve serve`: flags, and the same settings from a YAML or
// JSON --config file (flags override the file). Torch- and gRPC-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace dserve {

// The serving settings that may differ per model: each starts from the
// global flag of the same name and may be overridden for one model in
// --config (`models: {NAME: {dir: DIR, max_batch_size: 8, ...}}`).
struct ModelServeSettings {
  std::string dtype = "auto";         // --dtype
  int workers = 0;                    // --workers
  int threads_per_worker = 0;         // --threads-per-worker
  int64_t max_batch_size = 32;        // --max-batch-size
  int64_t max_batch_tokens = 8192;    // --max-batch-tokens
  int64_t max_queue_delay_us = 0;     // --max-queue-delay-us
  int64_t max_queue_items = 1024;     // --max-queue-items
  bool packing = true;                // --packing
  double max_padding_ratio = 1.15;    // --max-padding-ratio
  int priority = 0;                   // --default-priority
  int64_t max_queue_time_ms = 0;      // --max-queue-time-ms
  int64_t priority_aging_ms = 100;    // --priority-aging-ms
};

struct ModelSpec {
  std::string name;
  std::string dir;
  ModelServeSettings settings;  // the globals with this model's overrides
};

struct ServeOptions {
  // YAML or JSON file with any of the settings below (flags override it).
  std::string config_file;
  // NAME=DIR per model served. Required, at least one.
  std::vector<std::string> models;
  // gRPC listen address. Default 0.0.0.0:5001.
  std::string listen = "0.0.0.0:5001";
  // Prometheus /metrics address; empty = no metrics endpoint. Default 0.0.0.0:9090.
  std::string metrics_listen = "0.0.0.0:9090";
  // HTTP/JSON API address (server/doors/http/: TEI/Cohere-compatible routes,
  // /v1/*, /openapi.json, the try-it page); empty = off, the default (the
  // HTTP door is opt-in so an upgrade opens no new port). May equal
  // metrics_listen: one server then serves both (and /metrics gets the
  // HTTP door's TLS).
  std::string http_listen;
  // Model used by the TEI routes (/predict, /rerank, /tokenize, /info) when
  // the request names none (?model=NAME); empty = the only model of the
  // route's task (two or more: the request must name one). Default empty.
  std::string http_default_model;
  // Most HTTP server threads, each serving one connection at a time (the
  // library is synchronous; a thread waits while its request is computed, and
  // an idle keep-alive connection holds its thread for up to 5 s), so this
  // caps the HTTP clients served at once; more wait to be accepted. Threads
  // start only when connections need them. Default 512 (idle keep-alive
  // clients of a few hundred callers never keep a new one waiting; a thread
  // costs its stack only while it exists).
  int http_threads = 512;
  // auto | cpu | cuda | cuda:N. Default auto (CUDA when LibTorch has it).
  std::string device = "auto";
  // auto | fp32 | bf16 | fp16 | int8; per model in --config too. Default
  // auto: at load, a few forwards in fp32 and in bf16 (up to 8 x 128 tokens,
  // the workers' thread count; server/dtype_choice.h) and bf16 served when it is
  // at least 5% faster and keeps fp32's argmax on the probe inputs, else
  // fp32. bf16 is tried only on CUDA and on CPUs with native bf16 (AVX512-BF16,
  // AMX): it is ~1.7x fp32 on an AMD EPYC with AVX512-BF16, yet 0.78x on an
  // Intel Xeon with the same flags (issue 27), hence timing, not flags. A
  // reload keeps the dtype chosen at start-up. An explicit bf16 is timed
  // against fp32 once at start-up and warns when slower.
  std::string dtype = "auto";
  // Worker threads per model, each pulling batches; 0 = auto: on CPU one
  // single-threaded worker per core of the model's share of the usable cores
  // (affinity and cgroup quota), at most 4; 2 on CUDA (one worker's host-side
  // work - padding, copies, decode hand-off - overlaps the other's kernels;
  // both use the device's default stream, so their GPU work does not overlap).
  int workers = 0;
  // Intra-op (torch) threads per worker on CPU; 0 = cores / (workers x models).
  int threads_per_worker = 0;
  // Batching (see server/batching/batch_policy.h for the trade-offs).
  int64_t max_batch_size = 32;         // items per batch
  int64_t max_batch_tokens = 8192;     // padded tokens per batch
  // How long an idle worker lets the oldest item wait for companions before
  // a batch smaller than the size/token limits goes, microseconds (Triton's
  // max_queue_delay_microseconds). Default 0: dispatch at once (lowest
  // latency; on CPU fuller batches buy little, docs/operations.md).
  int64_t max_queue_delay_us = 0;
  // Bounded queue: a request is admitted while fewer items are queued
  // (whatever its size); when full -> RESOURCE_EXHAUSTED; a request with
  // more items than this -> INVALID_ARGUMENT (it could never be admitted).
  int64_t max_queue_items = 1024;
  bool packing = true;                 // length-aware packing
  double max_padding_ratio = 1.15;     // packed batches: padded <= ratio x real tokens; 0 = no bound
  // Graceful drain on SIGTERM/SIGINT: in-flight calls get this long, seconds. Default 30.
  // The drain sends GOAWAY at once (clients stop sending here and reconnect
  // elsewhere) while accepted calls finish.
  int drain_timeout_s = 30;
  // Connections older than this get a GOAWAY (gRPC's max_connection_age,
  // +-10% jitter), seconds, so clients re-resolve and round-robin load
  // balancing spreads long-lived channels over new replicas; 0 = never.
  // Default 300 (the connection is re-made every ~5 minutes; calls are not
  // disturbed: new calls go to the new connection).
  double max_connection_age_s = 300;
  // After that GOAWAY, calls still running on the old connection get this
  // long before it is closed, seconds (max_connection_age_grace). Default 30.
  double max_connection_age_grace_s = 30;
  // Requests parsed and tokenized at the same time (on gRPC threads); one
  // more gets RESOURCE_EXHAUSTED at once, before it is parsed (the client
  // retries with backoff; a gRPC thread never waits). 0 = auto: 2 x the
  // usable cores, at least 4 (tokenization is CPU-bound: more only adds
  // contention and memory).
  int max_concurrent_preprocess = 0;
  // Threads that decode finished calls and build their replies (softmax,
  // span search, sorting, serialisation), so inference workers go straight
  // back to the queue. Default 1: decode is ~1% of a forward on CPU; raise
  // it on a GPU serving many small batches.
  int completion_threads = 1;
  // Scheduling priority of a request that sets none (a request's `priority`
  // field overrides it; higher is batched first). Default 0.
  int default_priority = 0;
  // Ageing, so low priorities never starve: every this many milliseconds an
  // item waits raises its priority by one for batch selection. Default 100:
  // a priority-0 item waits at most ~100 ms per level of the traffic above it.
  int64_t priority_aging_ms = 100;
  // Server-side queue timeout, milliseconds: an item that waited this long
  // before compute gets DEADLINE_EXCEEDED even when the client set no
  // deadline (sheds load that would only be answered too late). 0 = none (the
  // default: only the client's deadline applies).
  int64_t max_queue_time_ms = 0;
  // Per-model overrides of the settings of ModelServeSettings, from
  // --config: model name -> {setting (underscores) -> value}.
  std::map<std::string, std::map<std::string, std::string>> model_settings;
  // Hot reload: poll each model directory every this many seconds and load
  // a new checkpoint once it is stable (identical on two polls); 0 = no
  // polling (SIGHUP still checks at once). `--watch` alone = 2 s.
  double watch_s = 0;
  // TLS: server certificate and key (PEM); with tls_client_ca, clients must
  // present a certificate signed by it (mTLS). All empty = plaintext.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // File whose first line is the bearer token clients must send
  // (`authorization: Bearer TOKEN`); empty = no auth. Health stays open.
  std::string auth_token_file;
  // Largest request message, bytes. Default 4 MiB (gRPC's default).
  int64_t max_message_bytes = 4 << 20;
  // Request limits (INVALID_ARGUMENT beyond them, naming the limit).
  int64_t max_texts_per_request = 256;     // Classify texts
  int64_t max_documents_per_request = 256; // Rerank documents
  int64_t max_contexts_per_request = 16;   // Answer contexts
  // Answer windows / Rerank chunks of all texts of one request together,
  // counted before any is built (a long text with a long question can need
  // one window per token). At most --max-queue-items to be servable.
  int64_t max_windows_per_request = 256;
  int64_t max_text_bytes = 1 << 20;        // any single text, bytes (1 MiB)
  // Log level: trace|debug|info|warn|error.
  std::string log_level = "info";
};

// Adds the serve flags to `app` (a subcommand), writing into `options`, and
// `--config FILE` (YAML or JSON with the same keys, dashes or underscores;
// `model` may be a list of NAME=DIR or a map NAME: DIR), which the caller
// applies with ApplyConfigFile after parsing.
void AddServeFlags(CLI::App* app, ServeOptions* options);

// Applies the settings of a YAML/JSON file to the flags of `app` that the
// command line did not set, and its per-model settings (a `models` entry
// whose value is a map: `dir` plus any setting of ModelServeSettings) to
// `options->model_settings`. Unknown settings and bad values are errors
// naming the file and the setting.
absl::Status ApplyConfigFile(CLI::App* app, const std::string& path, ServeOptions* options);

// Splits and checks the parsed options; errors name the flag.
absl::Status ValidateServeOptions(const ServeOptions& options);
absl::StatusOr<std::vector<ModelSpec>> ParseModelSpecs(const std::vector<std::string>& specs);
// ParseModelSpecs(options.models), each with its settings: the global flags
// overridden by options.model_settings[name]. Errors name the model and the
// setting (unknown, bad value, out of range, or a name that is not served).
absl::StatusOr<std::vector<ModelSpec>> ResolveModelSpecs(const ServeOptions& options);

}  // namespace dserve
