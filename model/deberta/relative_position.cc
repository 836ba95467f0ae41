#include "model/deberta/relative_position.h"

#include <algorithm>
#include <cmath>

#include "model/checkpoint/model_config.h"

namespace dserve {

int64_t LogBucketPosition(int64_t rel, int64_t buckets, int64_t max_position) {
  const int64_t mid = buckets / 2;
  const int64_t abs_pos = (rel < mid && rel > -mid) ? mid - 1 : (rel < 0 ? -rel : rel);
  if (abs_pos <= mid) return rel;
  // HF evaluates this in float32; float64 yields the same integers over every
  // range the goldens tabulate (tests/model/deberta check it).
  const double log_pos =
      std::ceil(std::log(static_cast<double>(abs_pos) / mid) /
                std::log(static_cast<double>(max_position - 1) / mid) * (mid - 1)) +
      mid;
  const int64_t magnitude = static_cast<int64_t>(log_pos);
  return rel < 0 ? -magnitude : magnitude;
}

RelativePositionMap::RelativePositionMap(const ModelConfig& config)
    : RelativePositionMap(config.position_buckets, config.max_relative(), config.att_span()) {}

RelativePositionMap::RelativePositionMap(int64_t position_buckets, int64_t max_relative,
                                         int64_t span)
    : buckets_(position_buckets), max_relative_(max_relative), span_(span) {}

int64_t RelativePositionMap::Bucket(int64_t rel) const {
  return buckets_ > 0 ? LogBucketPosition(rel, buckets_, max_relative_) : rel;
}

int64_t RelativePositionMap::Index(int64_t rel) const {
  return std::clamp<int64_t>(Bucket(rel) + span_, 0, 2 * span_ - 1);
}

RelativePositionMap::Table RelativePositionMap::Build(int64_t query_length,
                                                      int64_t key_length) const {
  Table table;
  table.query_length = query_length;
  table.key_length = key_length;
  table.index.resize(static_cast<size_t>(query_length * key_length));
  // One evaluation per distinct rel, then a fill.
  const int64_t rel_min = -(key_length - 1);
  std::vector<int64_t>& by_rel = table.by_rel;
  by_rel.resize(static_cast<size_t>(std::max<int64_t>(query_length + key_length - 1, 0)));
  for (size_t r = 0; r < by_rel.size(); ++r) by_rel[r] = Index(rel_min + static_cast<int64_t>(r));
  for (int64_t i = 0; i < query_length; ++i) {
    int64_t* row = table.index.data() + i * key_length;
    for (int64_t j = 0; j < key_length; ++j) row[j] = by_rel[static_cast<size_t>(i - j - rel_min)];
  }
  table.min_row = by_rel.empty() ? 0 : by_rel.front();
  table.max_row = by_rel.empty() ? 0 : by_rel.back();
  return table;
}

}  // namespace dserve
