// torchfarm-mkmodel: writes the TorchScript models the tests, examples and benchmarks use, from
// C++ alone (torch::jit::Module + define + save; no Python). Weights come from a fixed seed, so the
// same seed and LibTorch build write the same weights.
//
// Owns: the model recipes (name, TorchScript source, parameters, declared input/output specs and a
// sample input used to check every written file by loading it back and running it).
#include <torch/script.h>
#include <torch/utils.h>  // manual_seed, set_num_threads; <torch/torch.h> costs ~1 min of compile

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Recipe {
  std::string name;
  std::string inputs;   // declared input specs, for the summary line
  std::string outputs;  // declared output specs
  std::function<torch::jit::Module()> build;
  std::function<std::vector<c10::IValue>()> sample_inputs;
  std::vector<std::vector<int64_t>> sample_output_shapes;
};

// Weights ~ N(0, 1/fan_in), the scale that keeps activations O(1) through a ReLU network.
torch::Tensor InitWeight(std::vector<int64_t> shape, int64_t fan_in) {
  return torch::randn(shape) / std::sqrt(static_cast<double>(fan_in));
}

torch::jit::Module BuildIdentity() {
  torch::jit::Module module("Identity");
  module.define(R"(
def forward(self, x):
    return x
)");
  return module;
}

torch::jit::Module BuildMlp() {
  torch::jit::Module module("Mlp");
  module.register_parameter("w1", InitWeight({512, 256}, 256), false);
  module.register_parameter("b1", InitWeight({512}, 256), false);
  module.register_parameter("w2", InitWeight({128, 512}, 512), false);
  module.register_parameter("b2", InitWeight({128}, 512), false);
  module.define(R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t()) + self.b2
)");
  return module;
}

torch::jit::Module BuildConvnet() {
  torch::jit::Module module("Convnet");
  module.register_parameter("c1w", InitWeight({16, 3, 3, 3}, 27), false);
  module.register_parameter("c1b", InitWeight({16}, 27), false);
  module.register_parameter("c2w", InitWeight({32, 16, 3, 3}, 144), false);
  module.register_parameter("c2b", InitWeight({32}, 144), false);
  module.register_parameter("fw", InitWeight({10, 32}, 32), false);
  module.register_parameter("fb", InitWeight({10}, 32), false);
  module.define(R"(
def forward(self, x):
    h = torch.relu(torch.conv2d(x, self.c1w, self.c1b, [1, 1], [1, 1]))
    h = torch.max_pool2d(h, [2, 2])
    h = torch.relu(torch.conv2d(h, self.c2w, self.c2b, [1, 1], [1, 1]))
    h = torch.adaptive_avg_pool2d(h, [1, 1])
    h = torch.flatten(h, 1)
    return torch.matmul(h, self.fw.t()) + self.fb
)");
  return module;
}

torch::jit::Module BuildSlow() {
  torch::jit::Module module("Slow");
  // A permutation matrix: repeated products stay a permutation (entries 0 and 1), so the
  // accumulator never overflows and `x + 0 * acc[0, 0]` is exactly x.
  module.register_buffer("m", torch::eye(128).index_select(0, torch::randperm(128)));
  module.define(R"(
def forward(self, x):
    if x.size(0) == 0:
        return x
    units = int(x[:, 0].max())
    acc = self.m
    for _ in range(units):
        acc = torch.mm(acc, self.m)
    return x + acc[0, 0] * 0.0
)");
  return module;
}

torch::jit::Module BuildPair() {
  torch::jit::Module module("Pair");
  module.define(R"(
def forward(self, a, b):
    return (a + b, a * b)
)");
  return module;
}

// Two inputs whose order matters (x + 2 * y): a test that swaps them sees it.
torch::jit::Module BuildAdd2() {
  torch::jit::Module module("Add2");
  module.define(R"(
def forward(self, x, y):
    return x + 2.0 * y
)");
  return module;
}

// Pipeline stages (worker/pipeline_stages.h) for convnet: a decoded image, uint8 [H, W, 3], to
// float32 [3, 32, 32] (bilinear resize, scaled to 0..1, normalised per channel) ...
torch::jit::Module BuildJpegPre() {
  torch::jit::Module module("JpegPre");
  module.register_buffer("mean", torch::tensor({0.485f, 0.456f, 0.406f}).view({3, 1, 1}));
  module.register_buffer("std", torch::tensor({0.229f, 0.224f, 0.225f}).view({3, 1, 1}));
  module.define(R"(
def forward(self, image):
    x = image.permute(2, 0, 1).unsqueeze(0).float() / 255.0
    x = torch.upsample_bilinear2d(x, [32, 32], False, None, None)
    return (x[0] - self.mean) / self.std
)");
  return module;
}

// ... and convnet's logits, float32 [-1, 10], to the top 3 (softmax probabilities, float32
// [-1, 3]; classes, int64 [-1, 3]).
torch::jit::Module BuildTopkPost() {
  torch::jit::Module module("TopkPost");
  module.define(R"(
def forward(self, logits):
    values, classes = torch.topk(torch.softmax(logits, 1), 3, 1)
    return (values, classes)
)");
  return module;
}

std::vector<Recipe> Recipes() {
  return {
      {"identity",
       "x: any dtype, any shape",
       "x unchanged",
       BuildIdentity,
       [] {
         return std::vector<c10::IValue>{torch::ones({2, 3})};
       },
       {{2, 3}}},
      {"mlp",
       "float32 [-1, 256]",
       "float32 [-1, 128]",
       BuildMlp,
       [] {
         return std::vector<c10::IValue>{torch::ones({2, 256})};
       },
       {{2, 128}}},
      {"convnet",
       "float32 [-1, 3, 32, 32]",
       "float32 [-1, 10]",
       BuildConvnet,
       [] {
         return std::vector<c10::IValue>{torch::ones({2, 3, 32, 32})};
       },
       {{2, 10}}},
      {"slow",
       "float32 [-1, N>=1] (x[:, 0].max() = work units of ~0.04-0.1 ms)",
       "x unchanged",
       BuildSlow,
       [] {
         return std::vector<c10::IValue>{torch::full({2, 4}, 3.0)};
       },
       {{2, 4}}},
      {"pair",
       "a: float32 any shape, b: float32 same shape",
       "(a + b, a * b)",
       BuildPair,
       [] {
         return std::vector<c10::IValue>{torch::ones({2, 5}), torch::ones({2, 5})};
       },
       {{2, 5}, {2, 5}}},
      {"add2",
       "x: float32 any shape, y: float32 same shape",
       "x + 2 * y",
       BuildAdd2,
       [] {
         return std::vector<c10::IValue>{torch::ones({2, 5}), torch::ones({2, 5})};
       },
       {{2, 5}}},
      {"jpeg_pre",
       "image: uint8 [H, W, 3]",
       "float32 [3, 32, 32]",
       BuildJpegPre,
       [] {
         return std::vector<c10::IValue>{torch::full({48, 40, 3}, 7, torch::dtype(torch::kUInt8))};
       },
       {{3, 32, 32}}},
      {"topk_post",
       "logits: float32 [-1, 10]",
       "(float32 [-1, 3], int64 [-1, 3])",
       BuildTopkPost,
       [] {
         return std::vector<c10::IValue>{torch::randn({2, 10})};
       },
       {{2, 3}, {2, 3}}},
  };
}

std::vector<at::Tensor> OutputTensors(const c10::IValue& output) {
  if (output.isTensor()) return {output.toTensor()};
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& element : output.toTupleRef().elements()) {
    tensors.push_back(element.toTensor());
  }
  return tensors;
}

// Loads the written file back and runs the sample input; returns an error text or "".
std::string Verify(const Recipe& recipe, const std::string& path) {
  torch::jit::Module loaded = torch::jit::load(path);
  loaded.eval();
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> outputs = OutputTensors(loaded.forward(recipe.sample_inputs()));
  if (outputs.size() != recipe.sample_output_shapes.size()) {
    return "returned " + std::to_string(outputs.size()) + " outputs";
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].sizes().vec() != recipe.sample_output_shapes[i]) {
      return "output " + std::to_string(i) + " has an unexpected shape";
    }
  }
  return "";
}

// Builds, saves and verifies one model; returns false (after printing why) on failure.
bool Write(const Recipe& recipe, const std::string& path, uint64_t seed) {
  try {
    // Seed per model, so a model's weights do not depend on which others were written before it.
    torch::manual_seed(seed);
    recipe.build().save(path);
    std::string problem = Verify(recipe, path);
    if (!problem.empty()) {
      std::fprintf(stderr, "torchfarm-mkmodel: %s: written but its check failed: %s\n",
                   path.c_str(), problem.c_str());
      return false;
    }
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "torchfarm-mkmodel: %s: %s\n", path.c_str(), e.what_without_backtrace());
    return false;
  }
  std::printf("wrote %s (%s): input %s -> output %s\n", path.c_str(), recipe.name.c_str(),
              recipe.inputs.c_str(), recipe.outputs.c_str());
  return true;
}

constexpr const char* kFooter = R"(
Models:
  identity  forward(x) returns x
  mlp       float32 [-1, 256] -> linear 256->512, relu, linear 512->128 -> float32 [-1, 128]
  convnet   float32 [-1, 3, 32, 32] -> conv 3->16, relu, maxpool 2, conv 16->32, relu,
            global avg pool, linear 32->10 -> float32 [-1, 10]
  slow      float32 [-1, N>=1] -> x unchanged, after int(x[:, 0].max()) 128x128 matmuls of
            ~0.04-0.1 ms each on one core (CPU-dependent): a value of 10000 runs ~0.4-1 s
  pair      forward(a, b) returns (a + b, a * b), float32, any shape (both the same)
  add2      forward(x, y) returns x + 2 * y, float32, any shape (both the same)
  jpeg_pre  pipeline preprocess for convnet: uint8 [H, W, 3] -> bilinear 32x32, /255, normalised
            -> float32 [3, 32, 32]
  topk_post pipeline postprocess for convnet: float32 [-1, 10] -> softmax, top 3 ->
            (float32 [-1, 3], int64 [-1, 3]))";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"torchfarm-mkmodel: writes TorchScript test models (no Python needed)"};
  app.footer(kFooter);
  std::string model;
  std::string out;
  std::string all_dir;
  uint64_t seed = 0;
  auto* model_option = app.add_option("--model", model, "model to write")
                           ->check(CLI::IsMember({"identity", "mlp", "convnet", "slow", "pair",
                                                  "add2", "jpeg_pre", "topk_post"}));
  auto* out_option = app.add_option("--out", out, "file to write (with --model)");
  auto* all_option = app.add_option("--all", all_dir, "write every model as DIR/<name>.pt");
  app.add_option("--seed", seed, "weight seed (default 0)");
  model_option->needs(out_option)->excludes(all_option);
  out_option->needs(model_option);
  CLI11_PARSE(app, argc, argv);
  if (model.empty() && all_dir.empty()) {
    std::fprintf(stderr, "torchfarm-mkmodel: give --model NAME --out FILE, or --all DIR\n%s",
                 app.help().c_str());
    return 2;
  }
  torch::set_num_threads(1);
  bool ok = true;
  if (!all_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(all_dir, error);
    if (error) {
      std::fprintf(stderr, "torchfarm-mkmodel: cannot create %s: %s\n", all_dir.c_str(),
                   error.message().c_str());
      return 1;
    }
  }
  for (const Recipe& recipe : Recipes()) {
    if (!all_dir.empty()) {
      ok = Write(recipe, (std::filesystem::path(all_dir) / (recipe.name + ".pt")).string(), seed) &&
           ok;
    } else if (recipe.name == model) {
      ok = Write(recipe, out, seed);
    }
  }
  return ok ? 0 : 1;
}
