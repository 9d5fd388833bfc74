// worker/model_runner.h against real files written by .venv's torch (tools/export_model.py, ctest
// fixture venv_models): an AOTInductor mlp with a dynamic batch and one compiled for 4 rows, a
// TorchScript nn.TransformerEncoder saved by torch 2.15, each against the eager reference the
// export wrote; and hostile packages (not a zip, truncated, no "model" inside, compiled for cuda,
// compiled by another torch), each refused with what was expected and what the file holds. A
// -DTORCHFARM_TORCH=debian build has no such files: there .pt2 must be refused with the reason.
#include "worker/model_runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>

#include "common/npy.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

namespace fs = std::filesystem;

const std::string kDir = TORCHFARM_PY_MODEL_DIR;

at::Tensor ReadTensor(const std::string& path) {
  TensorSpec spec;
  std::string data;
  Status status = ReadNpy(path, &spec, &data);
  EXPECT_TRUE(status.ok()) << status.ToString();
  at::Tensor t = at::empty(spec.shape, at::kFloat);
  EXPECT_EQ(data.size(), static_cast<size_t>(t.numel()) * 4);
  std::memcpy(t.data_ptr(), data.data(), std::min(data.size(), static_cast<size_t>(t.numel()) * 4));
  return t;
}

Status Open(const std::string& path, std::unique_ptr<ModelRunner>* out,
            const std::string& format = "auto") {
  return OpenModelRunner({path, format, c10::Device(c10::kCPU)}, out);
}

at::Tensor Forward1(ModelRunner& runner, const at::Tensor& x) {
  InferenceModeGuard guard;
  return runner.Forward({x}).toTensor();
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = (fs::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool VenvBuild() { return TORCHFARM_VENV_MODELS != 0; }

#define SKIP_WITHOUT_VENV()                                                                \
  if (!VenvBuild())                                                                        \
  GTEST_SKIP() << "built with -DTORCHFARM_TORCH=debian: no .venv models (export_model.py " \
                  "needs torch.export); the default build runs this"

TEST(ModelRunner, FormatFollowsThePathUnlessSaid) {
  ModelFormat format;
  ASSERT_TRUE(ResolveModelFormat("/m/a.pt2", "auto", &format).ok());
  EXPECT_EQ(format, ModelFormat::kAoti);
  ASSERT_TRUE(ResolveModelFormat("/m/a.pt", "", &format).ok());
  EXPECT_EQ(format, ModelFormat::kTorchScript);
  ASSERT_TRUE(ResolveModelFormat("/m/a.bin", "aoti", &format).ok());
  EXPECT_EQ(format, ModelFormat::kAoti);
  ASSERT_TRUE(ResolveModelFormat("/m/a.pt2", "torchscript", &format).ok());
  EXPECT_EQ(format, ModelFormat::kTorchScript);
  Status bad = ResolveModelFormat("/m/a.pt2", "onnx", &format);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("expected auto, torchscript or aoti, got 'onnx'"),
            std::string::npos);
}

TEST(ModelRunner, DebianBuildRefusesPackagesWithTheReason) {
  if (VenvBuild()) GTEST_SKIP() << "this LibTorch has the AOTInductor loader (see the tests below)";
  const std::string path = WriteFile("torchfarm-any.pt2", "PK\3\4 whatever");
  std::unique_ptr<ModelRunner> runner;
  Status status = Open(path, &runner);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("need a worker built against LibTorch >= 2.6"), std::string::npos)
      << status.message();
  fs::remove(path);
}

TEST(ModelRunner, AotiDynamicBatchEqualsEagerAt1_3And17Rows) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  Status status = Open(kDir + "/mlp.pt2", &runner);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(runner->format(), ModelFormat::kAoti);
  EXPECT_EQ(runner->Describe(), "aoti batch 1..256, compiled by torch 2.15.0");
  ASSERT_EQ(runner->declared_inputs().size(), 1u);
  EXPECT_EQ(runner->declared_inputs()[0].shape, (std::vector<int64_t>{-1, 256}));
  EXPECT_EQ(runner->declared_outputs()[0].shape, (std::vector<int64_t>{-1, 128}));
  for (int rows : {1, 3, 17}) {
    const std::string ref = kDir + "/mlp.ref" + std::to_string(rows);
    at::Tensor x = ReadTensor(ref + ".in.npy");
    at::Tensor want = ReadTensor(ref + ".out.npy");
    ASSERT_TRUE(runner->CheckInputs({x}).ok());
    at::Tensor got = Forward1(*runner, x);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5))
        << rows << " rows: max diff " << (got - want).abs().max().item<float>();
  }
  // The rows its torch.export.Dim allows, and no more.
  Status big = runner->CheckInputs({at::zeros({257, 256})});
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("takes 1..256 rows"), std::string::npos) << big.message();
  // A narrower row or another dtype is the request's error, never a read past the input; the
  // next good batch still runs.
  Status narrow = runner->CheckInputs({at::zeros({3, 10})});
  EXPECT_EQ(narrow.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.message().find("compiled for shape [-1, 256] (-1: any), got [3, 10]"),
            std::string::npos)
      << narrow.message();
  Status ints = runner->CheckInputs({at::zeros({3, 256}, at::kLong)});
  EXPECT_EQ(ints.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ints.message().find("compiled for float32, got int64"), std::string::npos)
      << ints.message();
  const at::Tensor good = ReadTensor(kDir + "/mlp.ref3.in.npy");
  ASSERT_TRUE(runner->CheckInputs({good}).ok());
  EXPECT_TRUE(
      at::allclose(Forward1(*runner, good), ReadTensor(kDir + "/mlp.ref3.out.npy"), 1e-4, 1e-5));
  // fp16 is not something a compiled package can switch to.
  Status half = runner->ConvertPrecision(c10::kHalf);
  EXPECT_EQ(half.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.message().find("expected fp32, got Half"), std::string::npos) << half.message();
}

// torch.export cannot keep batch 1 dynamic for nn.TransformerEncoder: its package takes 2..256
// rows, and a 1-row batch runs padded to 2 with the output cut back to 1 row.
TEST(ModelRunner, AotiTransformerFromTwoRowsServesOneRowPadded) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  Status opened = Open(kDir + "/transformer.pt2", &runner);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_EQ(runner->Describe(), "aoti batch 2..256, compiled by torch 2.15.0");
  for (int rows : {1, 2}) {
    const at::Tensor x = ReadTensor(kDir + "/transformer.ref" + std::to_string(rows) + ".in.npy");
    ASSERT_TRUE(runner->CheckInputs({x}).ok()) << rows;
    const at::Tensor got = Forward1(*runner, x);
    const at::Tensor want =
        ReadTensor(kDir + "/transformer.ref" + std::to_string(rows) + ".out.npy");
    ASSERT_EQ(got.sizes(), want.sizes()) << rows;
    EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
        << rows << " rows: max diff " << (got - want).abs().max().item<float>();
  }
}

TEST(ModelRunner, AotiFixedBatchServesThatBatchOnly) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  ASSERT_TRUE(Open(kDir + "/mlp_b4.pt2", &runner).ok());
  EXPECT_EQ(runner->Describe(), "aoti batch 4 only, compiled by torch 2.15.0");
  Status three = runner->CheckInputs({ReadTensor(kDir + "/mlp.ref3.in.npy")});
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("compiled for a fixed batch of 4 rows and serves that batch only; "
                                 "got 3 rows"),
            std::string::npos)
      << three.message();
  at::Tensor x = ReadTensor(kDir + "/mlp.ref4.in.npy");
  ASSERT_TRUE(runner->CheckInputs({x}).ok());
  EXPECT_TRUE(
      at::allclose(Forward1(*runner, x), ReadTensor(kDir + "/mlp.ref4.out.npy"), 1e-4, 1e-5));
}

TEST(ModelRunner, TorchScriptTransformerSavedByTorch2EqualsEager) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  Status status = Open(kDir + "/transformer.pt", &runner);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(runner->format(), ModelFormat::kTorchScript);
  at::Tensor x = ReadTensor(kDir + "/transformer.ref2.in.npy");
  at::Tensor want = ReadTensor(kDir + "/transformer.ref2.out.npy");
  at::Tensor got = Forward1(*runner, x);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << "max diff " << (got - want).abs().max().item<float>();
}

TEST(ModelRunner, HostilePackagesAreRefusedWithTheReason) {
  SKIP_WITHOUT_VENV();
  const std::string good = ReadBytes(kDir + "/mlp.pt2");
  ASSERT_GT(good.size(), 1000u);
  struct Case {
    std::string path;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {WriteFile("torchfarm-text.pt2", "this is not a package"),
       "not an AOTInductor package: expected a zip archive (first bytes 50 4b 3 4), got first "
       "bytes 74 68 69 73"},
      {WriteFile("torchfarm-empty.pt2", ""), "got an empty file"},
      {WriteFile("torchfarm-half.pt2", good.substr(0, good.size() / 2)),
       "cannot read the package's metadata"},
      {WriteFile("torchfarm-head.pt2", good.substr(0, 64)), "cannot read the package's metadata"},
      {kDir + "/mlp_wrong_name.pt2", "with a model named 'model'"},
      {kDir + "/mlp_cuda.pt2",
       "the package was compiled for device 'cuda' and this worker runs on "
       "'cpu'"},
      {kDir + "/mlp_old_torch.pt2",
       "the package was compiled by torch 2.9.0 and this worker runs LibTorch 2.15"},
      {kDir + "/no-such-file.pt2", "cannot open the package file"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<ModelRunner> runner;
    Status status = Open(c.path, &runner);
    EXPECT_FALSE(status.ok()) << c.path;
    EXPECT_NE(status.message().find(c.expected), std::string::npos)
        << c.path << ": " << status.message();
    EXPECT_EQ(runner, nullptr);
  }
  // After all that, the good package still loads and runs in the same process.
  std::unique_ptr<ModelRunner> runner;
  ASSERT_TRUE(Open(kDir + "/mlp.pt2", &runner).ok());
  at::Tensor x = ReadTensor(kDir + "/mlp.ref1.in.npy");
  EXPECT_TRUE(
      at::allclose(Forward1(*runner, x), ReadTensor(kDir + "/mlp.ref1.out.npy"), 1e-4, 1e-5));
  for (const std::string name : {"text", "empty", "half", "head"})
    fs::remove(fs::temp_directory_path() / ("torchfarm-" + name + ".pt2"));
}

TEST(ModelRunner, TorchScriptLoaderSaysWhatIsWrongWithAPackageNamedAsTorchScript) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  Status status = Open(kDir + "/mlp.pt2", &runner, "torchscript");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(status.message().empty());
}

TEST(ModelRunner, OptimizeIsNoneFreezeOrInference) {
  ModelOptimize mode;
  ASSERT_TRUE(ParseModelOptimize("none", &mode).ok());
  EXPECT_EQ(mode, ModelOptimize::kNone);
  ASSERT_TRUE(ParseModelOptimize("freeze", &mode).ok());
  EXPECT_EQ(mode, ModelOptimize::kFreeze);
  ASSERT_TRUE(ParseModelOptimize("inference", &mode).ok());
  EXPECT_EQ(mode, ModelOptimize::kInference);
  for (ModelOptimize each :
       {ModelOptimize::kNone, ModelOptimize::kFreeze, ModelOptimize::kInference}) {
    ASSERT_TRUE(ParseModelOptimize(ModelOptimizeName(each), &mode).ok());
    EXPECT_EQ(mode, each);
  }
  Status bad = ParseModelOptimize("", &mode);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "optimize: expected none, freeze or inference, got ''");
}

// Deterministic weights without a random generator: sin over the element index, scaled.
at::Tensor Weights(at::IntArrayRef shape, double scale, double offset = 0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return (at::sin(at::arange(n, at::kFloat) * 0.7 + 0.3) * scale + offset).reshape(shape);
}

// A convolution, a batch norm with running statistics, a ReLU and a linear layer: what
// optimize_for_inference folds. Saved unfrozen, with its parameters, as torch.jit.script would.
std::string WriteConvBnModule() {
  torch::jit::Module m("ConvBn");
  m.register_parameter("cw", Weights({8, 3, 3, 3}, 0.3), false);
  m.register_parameter("cb", Weights({8}, 0.1), false);
  m.register_parameter("gamma", Weights({8}, 0.2, 1.0), false);
  m.register_parameter("beta", Weights({8}, 0.1), false);
  m.register_buffer("mean", Weights({8}, 0.1));
  m.register_buffer("var", Weights({8}, 0.2, 0.8));
  m.register_parameter("fw", Weights({4, 8}, 0.4), false);
  m.register_parameter("fb", Weights({4}, 0.1), false);
  m.define(R"(
def forward(self, x):
    h = torch.conv2d(x, self.cw, self.cb, [1, 1], [1, 1])
    h = torch.batch_norm(h, self.gamma, self.beta, self.mean, self.var, False, 0.1, 1e-5, False)
    h = torch.relu(h)
    h = torch.flatten(torch.adaptive_avg_pool2d(h, [1, 1]), 1)
    return torch.matmul(h, self.fw.t()) + self.fb
)");
  m.eval();
  const std::string path = (fs::temp_directory_path() / "torchfarm_convbn_test.pt").string();
  m.save(path);
  return path;
}

// Each optimize setting serves the answers of the module as loaded (to float rounding), for
// several batch sizes, and says in Describe() what it did.
TEST(ModelRunner, TorchScriptOptimizeKeepsTheAnswers) {
  const std::string path = WriteConvBnModule();
  std::unique_ptr<ModelRunner> plain;
  ASSERT_TRUE(Open(path, &plain).ok());
  ASSERT_TRUE(plain->Optimize(ModelOptimize::kNone).ok());
  EXPECT_EQ(plain->Describe(), "torchscript");
  // As loaded, forward() reads its weights from the module's attributes.
  EXPECT_NE(plain->GraphText().find("prim::GetAttr"), std::string::npos) << plain->GraphText();
  const std::vector<at::Tensor> inputs = {
      Weights({1, 3, 10, 10}, 1.0), Weights({3, 3, 10, 10}, 0.5, 0.1), Weights({5, 3, 7, 9}, 2.0)};
  std::vector<at::Tensor> want;
  for (const at::Tensor& x : inputs) want.push_back(Forward1(*plain, x));
  const std::pair<ModelOptimize, const char*> modes[] = {
      {ModelOptimize::kFreeze, "torchscript, frozen"},
      {ModelOptimize::kInference, "torchscript, optimized for inference"}};
  for (const auto& [mode, described] : modes) {
    std::unique_ptr<ModelRunner> runner;
    ASSERT_TRUE(Open(path, &runner).ok());
    const Status optimized = runner->Optimize(mode);
    ASSERT_TRUE(optimized.ok()) << optimized.ToString();
    EXPECT_EQ(runner->Describe(), described);
    // Frozen: the weights are constants of the graph, read from no attribute.
    EXPECT_EQ(runner->GraphText().find("prim::GetAttr"), std::string::npos) << described << ":\n"
                                                                            << runner->GraphText();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor got = Forward1(*runner, inputs[i]);
      ASSERT_EQ(got.sizes(), want[i].sizes()) << described;
      EXPECT_TRUE(at::allclose(got, want[i], 1e-4, 1e-5))
          << described << ", input " << i << ": max diff "
          << (got - want[i]).abs().max().item<float>();
    }
    // A wrong input is that batch's error; the next good one still runs.
    EXPECT_ANY_THROW(Forward1(*runner, at::zeros({2, 5, 10, 10})));
    EXPECT_TRUE(at::allclose(Forward1(*runner, inputs[0]), want[0], 1e-4, 1e-5)) << described;
  }
  // fp16 first, then frozen: the constants folded are the converted ones (the compute loop's
  // order). Checked by the dtype of what comes out for a half input.
  std::unique_ptr<ModelRunner> half;
  ASSERT_TRUE(Open(path, &half).ok());
  ASSERT_TRUE(half->ConvertPrecision(c10::kBFloat16).ok());
  ASSERT_TRUE(half->Optimize(ModelOptimize::kFreeze).ok());
  const at::Tensor got = Forward1(*half, inputs[1].to(at::kBFloat16));
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), want[1], 5e-2, 5e-2))
      << "max diff " << (got.to(at::kFloat) - want[1]).abs().max().item<float>();
  fs::remove(path);
}

TEST(ModelRunner, AotiPackagesTakeNoOptimizeSetting) {
  SKIP_WITHOUT_VENV();
  std::unique_ptr<ModelRunner> runner;
  ASSERT_TRUE(Open(kDir + "/mlp.pt2", &runner).ok());
  EXPECT_TRUE(runner->Optimize(ModelOptimize::kNone).ok());
  for (ModelOptimize mode : {ModelOptimize::kFreeze, ModelOptimize::kInference}) {
    Status refused = runner->Optimize(mode);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.message(),
              std::string("optimize: an AOTInductor package is compiled already; expected none, "
                          "got ") +
                  ModelOptimizeName(mode));
  }
  // Still serves.
  const at::Tensor x = ReadTensor(kDir + "/mlp.ref3.in.npy");
  EXPECT_TRUE(
      at::allclose(Forward1(*runner, x), ReadTensor(kDir + "/mlp.ref3.out.npy"), 1e-4, 1e-5));
}

}  // namespace
}  // namespace torchfarm::worker
