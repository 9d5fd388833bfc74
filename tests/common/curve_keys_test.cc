// Key files as `torchfarm keygen` writes them and as the supervisor and clients read them.
#include "common/curve_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace torchfarm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CurveKeysTest : public ::testing::Test {
 protected:
  CurveKeysTest() : dir_("/tmp/tf-keys-" + std::to_string(::getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~CurveKeysTest() override { fs::remove_all(dir_); }

  static unsigned Mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  std::string dir_;
};

TEST_F(CurveKeysTest, WriteThenReadRoundTrips) {
  CurveKeyPair pair;
  ASSERT_TRUE(GenerateCurveKeyPair(&pair).ok());
  EXPECT_TRUE(IsCurveKey(pair.public_key));
  EXPECT_TRUE(IsCurveKey(pair.secret_key));
  ASSERT_TRUE(WriteCurveKeyPair(dir_ + "/alice", pair).ok());
  EXPECT_EQ(Mode(dir_ + "/alice.key_secret"), 0600u);
  EXPECT_EQ(Mode(dir_ + "/alice.key"), 0644u);

  std::string public_key;
  ASSERT_TRUE(ReadCurveKeyFile(dir_ + "/alice.key", &public_key).ok());
  EXPECT_EQ(public_key, pair.public_key);
  CurveKeyPair read;
  Status s = ReadCurveSecretKeyFile(dir_ + "/alice.key_secret", &read);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(read.secret_key, pair.secret_key);
  EXPECT_EQ(read.public_key, pair.public_key) << "the public key is derived from the secret";
}

TEST_F(CurveKeysTest, SecretKeyIsNeverReplaced) {
  CurveKeyPair pair;
  ASSERT_TRUE(GenerateCurveKeyPair(&pair).ok());
  ASSERT_TRUE(WriteCurveKeyPair(dir_ + "/bob", pair).ok());
  Status s = WriteCurveKeyPair(dir_ + "/bob", pair);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("refusing to replace an existing secret key"));
}

TEST_F(CurveKeysTest, ReadableSecretKeyIsRefused) {
  CurveKeyPair pair;
  ASSERT_TRUE(GenerateCurveKeyPair(&pair).ok());
  ASSERT_TRUE(WriteCurveKeyPair(dir_ + "/carol", pair).ok());
  ::chmod((dir_ + "/carol.key_secret").c_str(), 0640);
  CurveKeyPair read;
  Status s = ReadCurveSecretKeyFile(dir_ + "/carol.key_secret", &read);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has mode 0640; group and others must not read it"));
}

TEST_F(CurveKeysTest, AuthorizedFolderSkipsWhatIsNotAKey) {
  CurveKeyPair a, b;
  ASSERT_TRUE(GenerateCurveKeyPair(&a).ok());
  ASSERT_TRUE(GenerateCurveKeyPair(&b).ok());
  ASSERT_TRUE(WriteCurveKeyPair(dir_ + "/a", a).ok());
  std::ofstream(dir_ + "/b.key") << "\n# b's laptop\n  " << b.public_key << "  \n";
  std::ofstream(dir_ + "/broken.key") << "not a key\n";
  std::ofstream(dir_ + "/README") << "ignored: not *.key\n";
  std::set<std::string> keys;
  std::vector<std::string> skipped;
  ASSERT_TRUE(LoadAuthorizedKeys(dir_, &keys, &skipped).ok());
  EXPECT_EQ(keys, (std::set<std::string>{a.public_key, b.public_key}))
      << "a.key_secret is not a public key file";
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("broken.key"));

  EXPECT_EQ(LoadAuthorizedKeys(dir_ + "/missing", &keys, &skipped).code(), StatusCode::kNotFound);
}

TEST_F(CurveKeysTest, MalformedKeys) {
  EXPECT_FALSE(IsCurveKey(""));
  EXPECT_FALSE(IsCurveKey(std::string(39, 'a')));
  EXPECT_FALSE(IsCurveKey(std::string(40, '"')));  // '"' is not a Z85 digit
  std::string ignored;
  EXPECT_FALSE(CurvePublicKey("short", &ignored).ok());
}

}  // namespace
}  // namespace torchfarm
