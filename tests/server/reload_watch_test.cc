// ReloadWatch: when `dserve serve --watch` / SIGHUP loads a checkpoint.
#include "server/reload_watch.h"

#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(ReloadWatch, UnchangedDirectoryIsNeverLoaded) {
  ReloadWatch w("v1");
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(w.ShouldLoad("v1", /*forced=*/false));
  EXPECT_FALSE(w.ShouldLoad("v1", /*forced=*/true));
}

TEST(ReloadWatch, NewContentLoadsOnceStableOnTwoPolls) {
  ReloadWatch w("v1");
  EXPECT_FALSE(w.ShouldLoad("v2", false));  // first sighting
  EXPECT_TRUE(w.ShouldLoad("v2", false));   // same on the next poll
  w.Loaded("v2");
  EXPECT_EQ(w.loaded(), "v2");
  EXPECT_FALSE(w.ShouldLoad("v2", false));
}

TEST(ReloadWatch, ContentStillBeingWrittenWaits) {
  // A copy in place changes size/hash from poll to poll: never loaded mid-way.
  ReloadWatch w("v1");
  EXPECT_FALSE(w.ShouldLoad("partial-1", false));
  EXPECT_FALSE(w.ShouldLoad("partial-2", false));
  EXPECT_FALSE(w.ShouldLoad("partial-3", false));
  EXPECT_FALSE(w.ShouldLoad("v2", false));
  EXPECT_TRUE(w.ShouldLoad("v2", false));
}

TEST(ReloadWatch, FailedVersionIsReportedOnceUntilItChanges) {
  ReloadWatch w("v1");
  EXPECT_FALSE(w.ShouldLoad("bad", false));
  EXPECT_TRUE(w.ShouldLoad("bad", false));
  w.Failed("bad");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(w.ShouldLoad("bad", false));
  EXPECT_EQ(w.loaded(), "v1");
  // Fixed: loads after it is stable.
  EXPECT_FALSE(w.ShouldLoad("v2", false));
  EXPECT_TRUE(w.ShouldLoad("v2", false));
}

TEST(ReloadWatch, ForcedLoadsAtOnceAndRetriesAFailedVersion) {
  ReloadWatch w("v1");
  EXPECT_TRUE(w.ShouldLoad("v2", /*forced=*/true));  // no stability wait
  w.Failed("v2");
  EXPECT_FALSE(w.ShouldLoad("v2", false));
  EXPECT_TRUE(w.ShouldLoad("v2", /*forced=*/true));
}

TEST(ReloadWatch, UnreadableDirectoryCountsAsAFingerprint) {
  // A directory mid-swap (rename aside, then in) is seen once and skipped;
  // one that stays broken is loaded (and the load reports why).
  ReloadWatch w("v1");
  EXPECT_FALSE(w.ShouldLoad("!config.json is missing", false));
  EXPECT_FALSE(w.ShouldLoad("v1", false));
  EXPECT_FALSE(w.ShouldLoad("!config.json is missing", false));
  EXPECT_TRUE(w.ShouldLoad("!config.json is missing", false));
}

TEST(ReloadWatch, ChangeDuringLoadWaitsForStabilityAgain) {
  ReloadWatch w("v1");
  EXPECT_FALSE(w.ShouldLoad("v2", false));
  EXPECT_TRUE(w.ShouldLoad("v2", false));
  w.ChangedDuringLoad();  // the directory became v3 meanwhile
  EXPECT_FALSE(w.ShouldLoad("v3", false));
  EXPECT_TRUE(w.ShouldLoad("v3", false));
  w.Loaded("v3");
  EXPECT_FALSE(w.ShouldLoad("v3", false));
}

}  // namespace
}  // namespace dserve
