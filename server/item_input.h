// ItemInput: what a worker needs to run one item (a text, a QA window or a
// rerank chunk). Its own header so that request validation, which produces
// items, stays free of torch and of the worker pool.
#pragma once

#include <cstdint>
#include <vector>

namespace dserve {

// Token ids of one item (specials included).
struct ItemInput {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;  // empty = all zero
};

}  // namespace dserve
