// TokenAuth and ConstantTimeEquals (server/auth.h).
#include "server/auth.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(ConstantTimeEquals, EqualityOnly) {
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("s3creT", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));     // prefix of the secret
  EXPECT_FALSE(ConstantTimeEquals("s3cretX", "s3cret"));   // secret is a prefix
  EXPECT_FALSE(ConstantTimeEquals("", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", ""));
  // Bytes past the secret's end and zero bytes still count.
  EXPECT_FALSE(ConstantTimeEquals(std::string("s3cret\0", 7), "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("\0\0", 2), std::string("\0", 1)));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
}

TEST(TokenAuth, BearerSchemeAndToken) {
  TokenAuth auth("s3cret-token");
  EXPECT_TRUE(auth.Check("Bearer s3cret-token"));
  EXPECT_TRUE(auth.Check("bearer s3cret-token"));     // scheme is case-insensitive
  EXPECT_TRUE(auth.Check("BEARER   s3cret-token  "));  // surrounding spaces ignored
  EXPECT_FALSE(auth.Check("Bearer S3cret-token"));     // the token is not
  EXPECT_FALSE(auth.Check("Bearer s3cret-tokenx"));
  EXPECT_FALSE(auth.Check("Bearer s3cret-toke"));
  EXPECT_FALSE(auth.Check("Basic s3cret-token"));
  EXPECT_FALSE(auth.Check("s3cret-token"));
  EXPECT_FALSE(auth.Check("Bearer"));
  EXPECT_FALSE(auth.Check("Bearer "));
  EXPECT_FALSE(auth.Check(""));
}

TEST(TokenAuth, FromFileReadsTheFirstLineAndNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/dserve_auth_test_token";
  {
    std::ofstream(path) << "  tok-en \nsecond line ignored\n";
  }
  auto auth = TokenAuth::FromFile(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->Check("Bearer tok-en"));
  EXPECT_FALSE(auth->Check("Bearer second line ignored"));
  {
    std::ofstream(path) << "\n";
  }
  auto empty = TokenAuth::FromFile(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(std::string(empty.status().message()).find(path), std::string::npos);
  auto missing = TokenAuth::FromFile(path + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("--auth-token-file"), std::string::npos);
  std::remove(path.c_str());
}

TEST(TokenAuth, FromFileChecksThePermissions) {
  const std::string path = ::testing::TempDir() + "/dserve_auth_test_token_mode";
  {
    std::ofstream(path) << "tok\n";
  }
  std::string warning;
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  auto auth = TokenAuth::FromFile(path, &warning);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(warning, "");
  // Readable by everyone: loads, with a warning naming the file and mode.
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auth = TokenAuth::FromFile(path, &warning);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_THAT(warning, ::testing::HasSubstr(path));
  EXPECT_THAT(warning, ::testing::HasSubstr("0644"));
  // Writable by others: refused, whoever could write it could change the token.
  for (unsigned mode : {0620u, 0602u}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    auth = TokenAuth::FromFile(path);
    ASSERT_FALSE(auth.ok());
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(auth.status().message()), ::testing::HasSubstr("writable by group or other users"));
  }
  std::remove(path.c_str());
  // A directory is not a token file.
  auth = TokenAuth::FromFile(::testing::TempDir());
  ASSERT_FALSE(auth.ok());
  EXPECT_THAT(std::string(auth.status().message()), ::testing::HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace dserve
