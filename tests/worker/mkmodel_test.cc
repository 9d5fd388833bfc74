// torchfarm-mkmodel --all writes five models; each loads and returns the shapes its --help
// documents, the weights are deterministic for a seed, and `slow` returns its input unchanged.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

class MkmodelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tf-mkmodel-test-" + std::to_string(::getpid())));
    std::string command = std::string(TORCHFARM_BIN_DIR) + "/torchfarm-mkmodel --all " +
                          dir_->string() + " > /dev/null";
    exit_status_ = std::system(command.c_str());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_EQ(exit_status_, 0) << "torchfarm-mkmodel --all failed"; }

  static std::vector<at::Tensor> Run(const std::string& name, std::vector<c10::IValue> inputs) {
    torch::jit::Module module = torch::jit::load((*dir_ / (name + ".pt")).string());
    module.eval();
    torch::NoGradGuard no_grad;
    c10::IValue output = module.forward(std::move(inputs));
    if (output.isTensor()) return {output.toTensor()};
    std::vector<at::Tensor> tensors;
    for (const c10::IValue& element : output.toTupleRef().elements()) {
      tensors.push_back(element.toTensor());
    }
    return tensors;
  }

  static inline std::filesystem::path* dir_ = nullptr;
  static inline int exit_status_ = -1;
};

TEST_F(MkmodelTest, IdentityReturnsItsInput) {
  at::Tensor x = torch::randn({3, 5});
  auto out = Run("identity", {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::equal(out[0], x));
}

TEST_F(MkmodelTest, MlpMaps256To128) {
  auto out = Run("mlp", {torch::randn({4, 256})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(out[0].scalar_type(), torch::kFloat32);
}

TEST_F(MkmodelTest, ConvnetMapsImagesToTenClasses) {
  auto out = Run("convnet", {torch::randn({2, 3, 32, 32})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes(), (std::vector<int64_t>{2, 10}));
}

TEST_F(MkmodelTest, SlowReturnsItsInputUnchanged) {
  at::Tensor x = torch::randn({3, 4});
  x.index_put_({0, 0}, 20.0);
  x.index_put_({1, 0}, -5.0);
  auto out = Run("slow", {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::equal(out[0], x));
  auto negative = Run("slow", {torch::full({2, 1}, -3.0)});
  EXPECT_TRUE(torch::equal(negative[0], torch::full({2, 1}, -3.0)));
}

TEST_F(MkmodelTest, PairReturnsSumAndProduct) {
  at::Tensor a = torch::randn({2, 3, 4});
  at::Tensor b = torch::randn({2, 3, 4});
  auto out = Run("pair", {a, b});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(torch::equal(out[0], a + b));
  EXPECT_TRUE(torch::equal(out[1], a * b));
}

TEST_F(MkmodelTest, Add2AddsTwiceItsSecondInput) {
  at::Tensor x = torch::randn({2, 3});
  at::Tensor y = torch::randn({2, 3});
  auto out = Run("add2", {x, y});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::equal(out[0], x + 2.0 * y));
}

TEST_F(MkmodelTest, SameSeedWritesSameWeights) {
  std::string again = (*dir_ / "mlp-again.pt").string();
  std::string command = std::string(TORCHFARM_BIN_DIR) +
                        "/torchfarm-mkmodel --model mlp --seed 0 --out " + again + " > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  torch::jit::Module first = torch::jit::load((*dir_ / "mlp.pt").string());
  torch::jit::Module second = torch::jit::load(again);
  at::Tensor x = torch::randn({2, 256});
  EXPECT_TRUE(torch::equal(first.forward({x}).toTensor(), second.forward({x}).toTensor()));
}

TEST_F(MkmodelTest, PipelineStagesForConvnetTakeAnImageAndGiveTheTopThree) {
  at::Tensor image = torch::randint(0, 255, {37, 53, 3}, torch::dtype(torch::kUInt8));
  auto pre = Run("jpeg_pre", {image});
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].sizes(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(pre[0].scalar_type(), torch::kFloat32);
  auto post = Run("topk_post", {torch::randn({4, 10})});
  ASSERT_EQ(post.size(), 2u);
  EXPECT_EQ(post[0].sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(post[1].scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::all(post[0].select(1, 0) >= post[0].select(1, 1)).item<bool>());
}

}  // namespace
