// Relative positions of DeBERTa's disentangled attention (REFERENCE §3).
// Torch-free: the encoder turns the tables into tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace dserve {

struct ModelConfig;

// Hugging Face's make_log_bucket_position for one relative position:
// exact for |rel| <= buckets/2, logarithmic beyond (no clamp).
int64_t LogBucketPosition(int64_t rel, int64_t buckets, int64_t max_position);

// Maps rel = i - j to a row of the relative table:
// clamp(bucket(rel) + span, 0, 2*span - 1), bucket(rel) = rel without buckets.
class RelativePositionMap {
 public:
  explicit RelativePositionMap(const ModelConfig& config);
  RelativePositionMap(int64_t position_buckets, int64_t max_relative, int64_t span);

  int64_t Bucket(int64_t rel) const;  // before the +span shift and clamp
  int64_t Index(int64_t rel) const;   // row of the relative table
  int64_t span() const { return span_; }

  // Row-major [query_length, key_length] table of Index(i - j), and the
  // smallest / largest row it uses (rows are monotonic in rel, so the rows a
  // sequence can reach form the contiguous range [min_row, max_row]).
  struct Table {
    int64_t query_length = 0;
    int64_t key_length = 0;
    std::vector<int64_t> index;
    // The same table as a Toeplitz vector: index[i, j] depends only on
    // i - j, so by_rel[i - j + key_length - 1] == index[i * key_length + j]
    // (query_length + key_length - 1 entries, non-decreasing). The fused
    // attention kernel reads this instead of the L x L table.
    std::vector<int64_t> by_rel;
    int64_t min_row = 0;
    int64_t max_row = 0;
  };
  Table Build(int64_t query_length, int64_t key_length) const;

 private:
  int64_t buckets_;
  int64_t max_relative_;
  int64_t span_;
};

}  // namespace dserve
