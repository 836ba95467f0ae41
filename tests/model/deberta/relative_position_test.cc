// Relative positions against Hugging Face's tables
// (shared/goldens/model/relative_position_buckets.json) and the debug trace.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint/model_config.h"
#include "model/deberta/relative_position.h"

namespace dserve {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(RelativePosition, MatchesHuggingFaceTables) {
  auto doc = ReadJson(std::string(DSERVE_SHARED_DIR) + "/goldens/model/relative_position_buckets.json");
  ASSERT_GE(doc["tables"].size(), 2u);
  for (const auto& t : doc["tables"]) {
    const int64_t buckets = t["position_buckets"], max_rel = t["max_relative_positions"], span = t["att_span"];
    RelativePositionMap map(buckets, max_rel, span);
    const auto rel = t["relative_pos"].get<std::vector<int64_t>>();
    ASSERT_FALSE(rel.empty());
    const auto& buckets_json = t["bucket"];
    const auto& index_json = t["c2p_index"];
    for (size_t i = 0; i < rel.size(); ++i) {
      EXPECT_EQ(map.Bucket(rel[i]), buckets_json[i].get<int64_t>()) << "rel " << rel[i] << " buckets " << buckets;
      EXPECT_EQ(map.Index(rel[i]), index_json[i].get<int64_t>()) << "rel " << rel[i] << " buckets " << buckets;
    }
  }
}

TEST(RelativePosition, DebugTraceIndicesOfEachGolden) {
  for (const std::string name : {"cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm"}) {
    const std::string dir = std::string(DSERVE_SHARED_DIR) + "/goldens/model/" + name;
    auto config = ModelConfig::FromFile(dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto trace = ReadJson(dir + "/golden.json")["debug_trace"];
    const int64_t L = trace["length"];
    EXPECT_EQ(trace["att_span"].get<int64_t>(), config->att_span()) << name;
    RelativePositionMap map(*config);
    auto table = map.Build(L, L);
    const nlohmann::json* rows = &trace["c2p_index"];  // [L][L]
    ASSERT_EQ(static_cast<int64_t>(rows->size()), L) << name;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j)
        ASSERT_EQ(table.index[i * L + j], (*rows)[i][j].get<int64_t>()) << name << " " << i << "," << j;
    EXPECT_LE(table.min_row, table.max_row);
  }
}

TEST(RelativePosition, ClampsWithoutBuckets) {
  RelativePositionMap map(/*position_buckets=*/-1, /*max_relative=*/48, /*span=*/48);
  EXPECT_EQ(map.Index(0), 48);
  EXPECT_EQ(map.Index(47), 95);
  EXPECT_EQ(map.Index(48), 95);    // 96 clamped to 2*span-1
  EXPECT_EQ(map.Index(-48), 0);
  EXPECT_EQ(map.Index(-1000), 0);
}

}  // namespace
}  // namespace dserve
