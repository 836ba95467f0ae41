// Reading a sample back from the Prometheus text exposition, for the
// server's tests.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dserve {

// Sum of the samples of `name` in `text` whose labels include every pair of
// `labels` (a sample's other labels are ignored).
inline double MetricValue(const std::string& text, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  double total = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{") && !absl::StartsWith(line, name + " ")) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match = match && absl::StrContains(line, absl::StrCat(k, "=\"", v, "\""));
    if (!match) continue;
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) << line;
    total += value;
  }
  return total;
}

}  // namespace dserve
