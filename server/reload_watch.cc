#include "server/reload_watch.h"

#include <utility>

namespace dserve {

ReloadWatch::ReloadWatch(std::string loaded_fingerprint) : loaded_(std::move(loaded_fingerprint)) {}

bool ReloadWatch::ShouldLoad(const std::string& fingerprint, bool forced) {
  const bool stable = has_previous_ && previous_ == fingerprint;
  previous_ = fingerprint;
  has_previous_ = true;
  if (fingerprint == loaded_) return false;
  if (forced) return true;
  if (fingerprint == failed_) return false;
  return stable;
}

void ReloadWatch::Loaded(const std::string& fingerprint) {
  loaded_ = fingerprint;
  failed_.clear();
}

void ReloadWatch::Failed(const std::string& fingerprint) { failed_ = fingerprint; }

void ReloadWatch::ChangedDuringLoad() { has_previous_ = false; }

}  // namespace dserve
