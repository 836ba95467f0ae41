// `dserve serve` settings: flags, --config files and the per-model settings
// they may carry (issue 16), with the errors a user sees for bad ones.
#include "server/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dserve {
namespace {

using ::testing::HasSubstr;

class OptionsTest : public ::testing::Test {
 protected:
  // Parses `args` (after "serve") and applies `config` (YAML) when given,
  // as `dserve serve` does.
  absl::Status Parse(std::vector<std::string> args, const std::string& config = "") {
    CLI::App app;
    AddServeFlags(&app, &options_);
    if (!config.empty()) {
      path_ = ::testing::TempDir() + "/options_test_" + std::to_string(getpid()) + ".yaml";
      std::ofstream(path_) << config;
      args.push_back("--config");
      args.push_back(path_);
    }
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
    } catch (const CLI::Error& e) {
      return absl::InvalidArgumentError(e.what());
    }
    if (!options_.config_file.empty()) {
      if (absl::Status s = ApplyConfigFile(&app, options_.config_file, &options_); !s.ok()) return s;
    }
    return ValidateServeOptions(options_);
  }

  ServeOptions options_;
  std::string path_;
};

TEST_F(OptionsTest, GlobalFlagsReachEveryModel) {
  ASSERT_TRUE(Parse({"--model", "a=/m/a", "--model", "b=/m/b", "--max-batch-size", "16", "--max-queue-time-ms",
                     "250", "--default-priority", "2"})
                  .ok());
  auto specs = ResolveModelSpecs(options_);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  for (const ModelSpec& spec : *specs) {
    EXPECT_EQ(spec.settings.max_batch_size, 16);
    EXPECT_EQ(spec.settings.max_queue_time_ms, 250);
    EXPECT_EQ(spec.settings.priority, 2);
    EXPECT_EQ(spec.settings.max_queue_items, 1024);  // default
  }
}

TEST_F(OptionsTest, PerModelSettingsOverrideTheFlagsForThatModelOnly) {
  const std::string config = R"(
max_batch_size: 32
models:
  intents:
    dir: /m/intents
    max_batch_size: 8
    max_queue_delay_us: 2000
    priority: 3
    max_queue_time_ms: 500
    packing: false
  qa: /m/qa
)";
  ASSERT_TRUE(Parse({}, config).ok());
  auto specs = ResolveModelSpecs(options_);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  const ModelSpec* intents = (*specs)[0].name == "intents" ? &(*specs)[0] : &(*specs)[1];
  const ModelSpec* qa = intents == &(*specs)[0] ? &(*specs)[1] : &(*specs)[0];
  EXPECT_EQ(intents->name, "intents");
  EXPECT_EQ(intents->dir, "/m/intents");
  EXPECT_EQ(intents->settings.max_batch_size, 8);
  EXPECT_EQ(intents->settings.max_queue_delay_us, 2000);
  EXPECT_EQ(intents->settings.priority, 3);
  EXPECT_EQ(intents->settings.max_queue_time_ms, 500);
  EXPECT_FALSE(intents->settings.packing);
  EXPECT_EQ(qa->name, "qa");
  EXPECT_EQ(qa->settings.max_batch_size, 32);
  EXPECT_EQ(qa->settings.max_queue_delay_us, 0);
  EXPECT_TRUE(qa->settings.packing);
}

TEST_F(OptionsTest, BadPerModelSettingsNameTheModelAndTheSetting) {
  absl::Status unknown = Parse({}, "models:\n  a:\n    dir: /m/a\n    max_batch: 4\n");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("model 'a': unknown per-model setting 'max_batch'"));

  options_ = ServeOptions();
  absl::Status bad_value = Parse({}, "models:\n  a:\n    dir: /m/a\n    max_batch_size: many\n");
  EXPECT_THAT(std::string(bad_value.message()), HasSubstr("model 'a': max_batch_size: bad value 'many'"));

  options_ = ServeOptions();
  absl::Status range = Parse({}, "models:\n  a:\n    dir: /m/a\n    max_batch_size: 0\n");
  EXPECT_THAT(std::string(range.message()), HasSubstr("model 'a': --max-batch-size must be > 0 (got 0)"));

  options_ = ServeOptions();
  absl::Status no_dir = Parse({}, "models:\n  a:\n    max_batch_size: 4\n");
  EXPECT_THAT(std::string(no_dir.message()), HasSubstr("models: a: `dir`"));
}

TEST_F(OptionsTest, NewFlagsAreRangeChecked) {
  EXPECT_THAT(std::string(Parse({"--model", "a=/m", "--completion-threads", "0"}).message()),
              HasSubstr("--completion-threads must be between 1 and 256"));
  options_ = ServeOptions();
  EXPECT_THAT(std::string(Parse({"--model", "a=/m", "--max-queue-time-ms", "-1"}).message()),
              HasSubstr("--max-queue-time-ms must be >= 0"));
  options_ = ServeOptions();
  EXPECT_THAT(std::string(Parse({"--model", "a=/m", "--priority-aging-ms", "0"}).message()),
              HasSubstr("--priority-aging-ms must be > 0"));
}

TEST_F(OptionsTest, CommandLineWinsOverTheConfigFile) {
  ASSERT_TRUE(Parse({"--max-batch-size", "4"}, "max_batch_size: 64\nmodels:\n  a: /m/a\n").ok());
  EXPECT_EQ(options_.max_batch_size, 4);
  auto specs = ResolveModelSpecs(options_);
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].settings.max_batch_size, 4);
}

// Issue 27: --dtype defaults to auto, may be set per model in --config, and
// a value outside auto|fp32|bf16|fp16|int8 is refused before any model loads.
TEST_F(OptionsTest, DtypeIsAutoByDefaultPerModelAndChecked) {
  ASSERT_TRUE(Parse({"--model", "a=/m/a"}).ok());
  EXPECT_EQ(options_.dtype, "auto");
  auto specs = ResolveModelSpecs(options_);
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].settings.dtype, "auto");

  options_ = ServeOptions();
  ASSERT_TRUE(Parse({"--dtype", "bf16"}, "models:\n  a: /m/a\n  b:\n    dir: /m/b\n    dtype: int8\n").ok());
  specs = ResolveModelSpecs(options_);
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].settings.dtype, "bf16");
  EXPECT_EQ((*specs)[1].settings.dtype, "int8");

  options_ = ServeOptions();
  EXPECT_THAT(std::string(Parse({"--model", "a=/m", "--dtype", "float32"}).message()),
              HasSubstr("--dtype must be auto, fp32, bf16, fp16 or int8 (got 'float32')"));
  options_ = ServeOptions();
  EXPECT_THAT(std::string(Parse({}, "models:\n  a:\n    dir: /m/a\n    dtype: fp64\n").message()),
              HasSubstr("model 'a': --dtype must be auto"));
}

}  // namespace
}  // namespace dserve
