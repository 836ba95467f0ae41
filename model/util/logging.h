// Named spdlog loggers. Each subsystem logs through its own logger so that
// levels can be tuned per area ("model", "tokenizer", "server", "train").
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace dserve {

// Returns the logger called `name`, creating it (stderr, colour when a tty)
// on first use. Thread-safe.
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

// Sets the level of every existing and future logger ("debug", "info", ...).
void SetLogLevel(const std::string& level);

}  // namespace dserve
