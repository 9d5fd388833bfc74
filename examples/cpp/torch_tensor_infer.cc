// Sends an at::Tensor through a farm with the helpers of torchfarm/torch_tensor.h and gets
// at::Tensor outputs back, without copying on either side.
//
//   build/bin/torch_tensor_infer --endpoint tcp://127.0.0.1:5555 --model mlp --shape 4 256
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "torchfarm/client.h"
#include "torchfarm/torch_tensor.h"

int main(int argc, char** argv) {
  CLI::App app{"Runs a float32 model on a random at::Tensor through a torchfarm farm"};
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string model = "mlp";
  std::vector<int64_t> shape = {4, 256};
  app.add_option("--endpoint", endpoint)->capture_default_str();
  app.add_option("--model", model)->capture_default_str();
  app.add_option("--shape", shape)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  torchfarm::Client client(endpoint, 10000);
  at::Tensor input = torchfarm::ContiguousCpu(at::rand(shape));
  torchfarm::TensorView view;
  torchfarm::Status s = torchfarm::ViewTensor(input, &view);
  torchfarm::InferResult result;
  if (s.ok()) s = client.Infer(model, {view}, &result);
  for (size_t k = 0; s.ok() && k < result.outputs.size(); ++k) {
    at::Tensor output;
    s = torchfarm::ToTorch(std::move(result.outputs[k]), &output);
    if (s.ok()) std::printf("output %zu: %s %s\n", k, output.toString().c_str(),
                            torchfarm::ShapeToString(output.sizes().vec()).c_str());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
