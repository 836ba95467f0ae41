// Shared helpers for the tokenizer tests: where the oracle lives and how to
// (re)generate it, JSONL reading.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dserve::testing {

inline std::string OracleDir() { return std::string(DSERVE_BINARY_DIR) + "/tokenizer_oracle"; }
inline std::string GoldenDir() { return std::string(DSERVE_SHARED_DIR) + "/goldens/tokenizer"; }

// The ctest fixture `tokenizer_oracle` runs gen_spm_oracle.py first; when a
// test binary is run by hand and the oracle is missing, generate it here.
inline void EnsureOracle() {
  const std::string dir = OracleDir();
  if (std::filesystem::exists(dir + "/DONE")) return;
  const std::string cmd = std::string("/usr/bin/python3 ") + DSERVE_SOURCE_DIR +
                          "/tests/model/tokenizer/gen_spm_oracle.py " + dir + " --corpus " +
                          GoldenDir() + "/corpus.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(std::filesystem::exists(dir + "/DONE"));
}

// The ALBERT text-rules oracle of gen_albert_oracle.py (ctest fixture
// `tokenizer_albert_oracle`), generated here when missing.
inline std::string AlbertOracleDir() {
  return std::string(DSERVE_BINARY_DIR) + "/tokenizer_albert_oracle";
}
inline void EnsureAlbertOracle() {
  const std::string dir = AlbertOracleDir();
  if (std::filesystem::exists(dir + "/DONE")) return;
  const std::string cmd = std::string("/usr/bin/python3 ") + DSERVE_SOURCE_DIR +
                          "/tests/model/tokenizer/gen_albert_oracle.py " + dir + " --corpus " +
                          GoldenDir() + "/corpus.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(std::filesystem::exists(dir + "/DONE"));
}

inline std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

inline std::vector<std::string> OracleStrings() {
  std::vector<std::string> out;
  for (const auto& row : ReadJsonl(OracleDir() + "/strings.jsonl")) {
    out.push_back(row.at("text").get<std::string>());
  }
  return out;
}

inline std::vector<std::string> OracleModels() {
  std::vector<std::string> names;
  std::ifstream in(OracleDir() + "/models.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

}  // namespace dserve::testing
