// When to reload a served model's checkpoint directory (`dserve serve
// --watch`, SIGHUP). Pure decision logic, no I/O: the caller polls the
// directory's fingerprint (CheckpointFingerprint), asks ShouldLoad, loads,
// and reports the outcome.
//
// Rules:
//  - a fingerprint equal to the loaded one: nothing to do;
//  - a new fingerprint is loaded only once it is stable, i.e. identical on
//    two consecutive polls (a checkpoint being copied in place changes from
//    poll to poll; our writer's atomic directory swap is stable at once);
//  - a fingerprint whose load failed is not retried until it changes, so a
//    broken checkpoint is reported once, not every poll;
//  - `forced` (SIGHUP: the operator says the directory is ready) loads any
//    fingerprint other than the loaded one at once, a failed one included.
// An unreadable directory is a fingerprint too ("!" + the error): when it
// stays that way, the load fails with the loader's message and is reported.
//
// Thread-compatible: used by the registry's one watcher thread.
#pragma once

#include <string>

namespace dserve {

class ReloadWatch {
 public:
  explicit ReloadWatch(std::string loaded_fingerprint);

  // One poll of the directory; true when the caller should load it now.
  bool ShouldLoad(const std::string& fingerprint, bool forced);
  // The load of `fingerprint` succeeded and is served now.
  void Loaded(const std::string& fingerprint);
  // The load of `fingerprint` failed; the old model keeps serving.
  void Failed(const std::string& fingerprint);
  // The directory changed while it was being loaded: the load was
  // discarded and the new content must become stable again.
  void ChangedDuringLoad();

  const std::string& loaded() const { return loaded_; }

 private:
  std::string loaded_;
  std::string failed_;
  std::string previous_;  // fingerprint seen by the last poll
  bool has_previous_ = false;
};

}  // namespace dserve
