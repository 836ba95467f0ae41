#include "model/util/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace dserve {
namespace {
std::mutex& LoggerMutex() {
  static std::mutex mu;
  return mu;
}
spdlog::level::level_enum& DefaultLevel() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}
}  // namespace

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  std::lock_guard<std::mutex> lock(LoggerMutex());
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_level(DefaultLevel());
  return logger;
}

void SetLogLevel(const std::string& level) {
  std::lock_guard<std::mutex> lock(LoggerMutex());
  DefaultLevel() = spdlog::level::from_str(level);
  spdlog::set_level(DefaultLevel());
}

}  // namespace dserve
