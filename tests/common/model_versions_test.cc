// Model versions in the config (common/model_versions.h, common/model_config.cc): "versions" lists,
// model_repository folders, version policies, their limits, and version routing.
#include "config_test_support.h"
#include "common/model_versions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config.h"

namespace torchfarm {
namespace {

using ::torchfarm::testing::ParseError;

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

json Entry() {
  return json::parse(R"({"name": "m", "inputs": [{"dtype": "float32", "shape": [-1, 4]}]})");
}

json WithModels(json models) { return json{{"models", std::move(models)}}; }

std::vector<std::string> Loaded(const FarmConfig& c) {
  std::vector<std::string> out;
  for (const ModelConfig& m : c.models) out.push_back(m.name + "@" + m.version + "=" + m.path);
  return out;
}

TEST(ModelVersionsTest, VersionStringsAndOrder) {
  EXPECT_TRUE(ValidVersion("1"));
  EXPECT_TRUE(ValidVersion("v2.1-rc_3"));
  EXPECT_TRUE(ValidVersion(std::string(32, 'a')));
  EXPECT_FALSE(ValidVersion(std::string(33, 'a')));
  EXPECT_FALSE(ValidVersion(""));
  EXPECT_FALSE(ValidVersion("a/b"));
  EXPECT_FALSE(ValidVersion("a b"));
  EXPECT_TRUE(VersionLess("9", "10")) << "integers order as numbers";
  EXPECT_FALSE(VersionLess("10", "9"));
  EXPECT_TRUE(VersionLess("99999999999999999999999", "100000000000000000000000"))
      << "beyond 64 bits too";
  EXPECT_TRUE(VersionLess("10", "9a")) << "else string order";
  EXPECT_TRUE(VersionLess("a", "b"));
  EXPECT_FALSE(VersionLess("1", "1"));
}

TEST(ModelVersionsTest, EntryWithoutVersionsIsVersionOne) {
  json e = Entry();
  e["path"] = "m.pt";
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(WithModels({e}), "/base", &c).ok());
  EXPECT_EQ(Loaded(c), std::vector<std::string>({"m@1=/base/m.pt"}));
}

TEST(ModelVersionsTest, VersionsListLoadsTheLatestByDefault) {
  json e = Entry();
  e["versions"] = json::parse(R"([{"version": "10", "path": "ten.pt"},
                                  {"version": "9", "path": "/abs/nine.pt"}])");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(WithModels({e}), "/base", &c).ok());
  EXPECT_EQ(Loaded(c), std::vector<std::string>({"m@10=/base/ten.pt"}));
}

TEST(ModelVersionsTest, PoliciesPickVersions) {
  json e = Entry();
  e["path"] = "shared.pt";
  e["versions"] = json::parse(R"([{"version": "1"}, {"version": "2", "path": "two.pt"},
                                  {"version": "3", "path": "three.pt"}])");
  auto loaded = [&](json policy) {
    json entry = e;
    entry["version_policy"] = std::move(policy);
    FarmConfig c;
    Status s = ParseConfig(WithModels({entry}), "/base", &c);
    EXPECT_TRUE(s.ok()) << s.message();
    return Loaded(c);
  };
  EXPECT_EQ(loaded("all"), std::vector<std::string>(
                               {"m@1=/base/shared.pt", "m@2=/base/two.pt", "m@3=/base/three.pt"}));
  EXPECT_EQ(loaded({{"latest", 2}}),
            std::vector<std::string>({"m@2=/base/two.pt", "m@3=/base/three.pt"}));
  EXPECT_EQ(loaded({{"latest", 64}}).size(), 3u) << "more than there are: all of them";
  EXPECT_EQ(loaded({{"specific", {"3", "1"}}}),
            std::vector<std::string>({"m@1=/base/shared.pt", "m@3=/base/three.pt"}));
}

TEST(ModelVersionsTest, VersionErrorsNameThePathAndTheLimit) {
  json e = Entry();
  auto error = [&](json versions, json policy = nullptr) {
    json entry = e;
    entry["versions"] = std::move(versions);
    if (!policy.is_null()) entry["version_policy"] = std::move(policy);
    return ParseError(WithModels({entry}));
  };
  const json one = json::parse(R"([{"version": "1", "path": "a.pt"}])");
  EXPECT_THAT(error(json::array()),
              HasSubstr("config.models[0].versions: expected an array of 1..64"));
  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back({{"version", std::to_string(i)}, {"path", "a.pt"}});
  EXPECT_THAT(error(many), HasSubstr("1..64"));
  many.erase(many.end() - 1);
  {
    json entry = e;
    entry["versions"] = many;
    entry["version_policy"] = "all";
    FarmConfig c;
    ASSERT_TRUE(ParseConfig(WithModels({entry}), "/base", &c).ok()) << "64 is the limit";
    EXPECT_EQ(c.models.size(), 64u);
  }
  EXPECT_THAT(error(json::parse(R"([{"version": "", "path": "a.pt"}])")),
              HasSubstr("versions[0].version: expected a non-empty string"));
  EXPECT_THAT(error(json::array({{{"version", std::string(33, '1')}, {"path", "a.pt"}}})),
              HasSubstr("versions[0].version: expected 1..32"));
  EXPECT_THAT(error(json::parse(R"([{"version": "a/b", "path": "a.pt"}])")),
              HasSubstr("versions[0].version"));
  EXPECT_THAT(
      error(json::parse(R"([{"version": "1", "path": "a.pt"}, {"version": "1", "path": "b.pt"}])")),
      HasSubstr("versions[1].version: version \"1\" is listed twice"));
  EXPECT_THAT(error(json::parse(R"([{"version": "1"}])")),
              HasSubstr("versions[0].path: required string is missing"));
  EXPECT_THAT(error(json::parse(R"([{"version": "1", "path": "a.pt", "instances": []}])")),
              HasSubstr("unknown key 'instances'"));
  EXPECT_THAT(error(one, {{"latest", 0}}),
              HasSubstr("version_policy.latest: expected an integer in 1..64"));
  EXPECT_THAT(error(one, {{"latest", 65}}), HasSubstr("1..64"));
  EXPECT_THAT(error(one, "newest"), HasSubstr("version_policy: expected {\"latest\": N}"));
  EXPECT_THAT(error(one, {{"latest", 1}, {"specific", {"1"}}}), HasSubstr("version_policy"));
  EXPECT_THAT(
      error(one, {{"specific", {"2"}}}),
      HasSubstr("version_policy.specific: version \"2\" is not among the model's versions (1)"));
  EXPECT_THAT(error(one, {{"specific", json::array()}}), HasSubstr("specific: expected an array"));
  EXPECT_THAT(error(one, {{"specific", {"1", "1"}}}), HasSubstr("listed twice"));
}

TEST(ModelVersionsTest, ModelNameStillUniqueAcrossEntries) {
  json e = Entry();
  e["path"] = "a.pt";
  EXPECT_THAT(ParseError(WithModels({e, e})), HasSubstr("\"m\" is declared twice"));
}

// A repository in a fresh temp folder, removed at the end.
class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tf_repo_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const fs::path& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  void Model(
      const std::string& name, const std::vector<std::string>& versions,
      const std::string& config = R"({"inputs": [{"dtype": "float32", "shape": [-1, 4]}]})") {
    Write(fs::path(name) / "config.json", config);
    for (const auto& v : versions) Write(fs::path(name) / v / "model.pt", "weights");
  }
  Status Parse(FarmConfig* c, json extra = json::object()) {
    json j = {{"model_repository", root_.string()}};
    j.update(extra);
    return ParseConfig(j, "/base", c);
  }
  std::string At(const std::string& name, const std::string& version) {
    return (root_ / name / version / "model.pt").string();
  }
  fs::path root_;
};

TEST_F(RepositoryTest, FoldersBecomeModelsAndVersions) {
  Model("b", {"1", "2", "10"});
  Model("a", {"3"}, R"({"inputs": [{"dtype": "float32", "shape": [-1, 4]}],
                        "version_policy": "all", "max_batch_size": 8})");
  Write(".hidden/x", "ignored");
  FarmConfig c;
  Status s = Parse(&c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Loaded(c), std::vector<std::string>({"a@3=" + At("a", "3"), "b@10=" + At("b", "10")}));
  EXPECT_EQ(c.models[0].max_batch_size, 8);
  EXPECT_EQ(c.model_repository, root_.string());
}

TEST_F(RepositoryTest, PolicyAndModelsListTogether) {
  Model("r", {"1", "2", "3"}, R"({"inputs": [{"dtype": "float32", "shape": [-1, 4]}],
                                  "version_policy": {"specific": ["1", "3"]}})");
  json listed = Entry();
  listed["name"] = "listed";
  listed["path"] = "l.pt";
  FarmConfig c;
  ASSERT_TRUE(Parse(&c, {{"models", {listed}}}).ok());
  EXPECT_EQ(Loaded(c), std::vector<std::string>(
                           {"listed@1=/base/l.pt", "r@1=" + At("r", "1"), "r@3=" + At("r", "3")}));
}

TEST_F(RepositoryTest, RelativeRepositoryResolvesAgainstTheConfigFolder) {
  FarmConfig c;
  json j = {{"model_repository", "repo"}};
  EXPECT_THAT(ParseError(j), HasSubstr("'/base/repo' is not a folder"));
}

TEST_F(RepositoryTest, ErrorsNameTheFileAtFault) {
  auto error = [&]() {
    FarmConfig c;
    Status s = Parse(&c);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  EXPECT_THAT(error(), HasSubstr("holds no model"));
  Write("m/1/model.pt", "w");
  EXPECT_THAT(error(), HasSubstr("config.json"));
  Write("m/config.json", "[1]");
  EXPECT_THAT(error(), HasSubstr("is not a JSON object"));
  Write("m/config.json", R"({"path": "x.pt", "inputs": [{"dtype": "float32", "shape": [4]}]})");
  EXPECT_THAT(error(), HasSubstr("unexpected key 'path'"));
  Write("m/config.json", R"({"name": "other", "inputs": [{"dtype": "float32", "shape": [4]}]})");
  EXPECT_THAT(error(), HasSubstr("expected the folder's name \"m\""));
  Write("m/config.json", R"({"inputs": [{"dtype": "float32", "shape": [4]}]})");
  fs::create_directories(root_ / "m" / "2");
  EXPECT_THAT(error(), HasSubstr("has no model.pt"));
  fs::remove_all(root_ / "m" / "2");
  fs::create_directories(root_ / "m" / "bad version");
  EXPECT_THAT(error(), HasSubstr("expected a version of 1..32"));
  fs::remove_all(root_ / "m" / "bad version");
  Write("m/notes.txt", "x");
  EXPECT_THAT(error(), HasSubstr("neither config.json nor a version folder"));
  fs::remove(root_ / "m" / "notes.txt");
  FarmConfig c;
  ASSERT_TRUE(Parse(&c).ok());
  json listed = Entry();
  listed["path"] = "m.pt";
  EXPECT_THAT(ParseError({{"model_repository", root_.string()}, {"models", {listed}}}),
              HasSubstr("model \"m\" is also declared in config.models"));
}

TEST(ModelVersionsTest, SelectServedVersionPinsOrTakesTheLatestLoaded) {
  std::vector<ModelConfig> models(4);
  models[0].name = "m", models[0].version = "1";
  models[1].name = "m", models[1].version = "10";
  models[2].name = "m", models[2].version = "9";
  models[3].name = "x", models[3].version = "1";
  size_t index = 99;
  ASSERT_TRUE(SelectServedVersion(models, "m", "9", {}, &index).ok());
  EXPECT_EQ(index, 2u);
  ASSERT_TRUE(SelectServedVersion(models, "m", "", {}, &index).ok());
  EXPECT_EQ(index, 1u) << "10 is the latest";
  auto only_nine = [](size_t i) { return i == 2; };
  ASSERT_TRUE(SelectServedVersion(models, "m", "", only_nine, &index).ok());
  EXPECT_EQ(index, 2u) << "the latest loaded wins over a later one still loading";
  auto none = [](size_t) { return false; };
  ASSERT_TRUE(SelectServedVersion(models, "m", "", none, &index).ok());
  EXPECT_EQ(index, 1u) << "none loaded: the latest";
  Status s = SelectServedVersion(models, "m", "3", {}, &index);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model 'm' has no version '3' (loaded versions: 1, 9, 10)"));
  s = SelectServedVersion(models, "nope", "", {}, &index);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model 'nope' is not served here (served: m, x)"));
}

}  // namespace
}  // namespace torchfarm
