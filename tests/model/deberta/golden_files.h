// Reading the Hugging Face goldens in ../shared/goldens (golden_test.cc,
// int8_test.cc): the folder of a golden, its golden.json, and a nested JSON
// array flattened in row-major order.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dserve::golden {

// "cls_factorized" -> goldens/model/cls_factorized; a name with a folder
// ("albert/albert_cls") is taken as it is (the ALBERT goldens share the layout).
inline std::string GoldenDir(const std::string& name) {
  const std::string folder = name.find('/') == std::string::npos ? "model/" : "";
  return std::string(DSERVE_SHARED_DIR) + "/goldens/" + folder + name;
}

inline nlohmann::json ReadGolden(const std::string& name) {
  std::ifstream in(GoldenDir(name) + "/golden.json");
  EXPECT_TRUE(in.good()) << "cannot read golden for " << name;
  return nlohmann::json::parse(in);
}

inline std::vector<float> Flatten(const nlohmann::json& j) {
  std::vector<float> out;
  if (j.is_array()) {
    for (const auto& x : j) {
      auto inner = Flatten(x);
      out.insert(out.end(), inner.begin(), inner.end());
    }
  } else {
    out.push_back(j.get<float>());
  }
  return out;
}

}  // namespace dserve::golden
