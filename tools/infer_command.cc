#include "tools/infer_command.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>

#include "common/bytes_items.h"
#include "common/integer_flag.h"
#include "common/npy.h"
#include "common/protocol.h"
#include "torchfarm/client.h"

namespace torchfarm {

namespace {

// Extra time the client waits beyond the server-side deadline, so the server's own
// DEADLINE_EXCEEDED reply is seen rather than a local timeout.
constexpr int64_t kDeadlineGraceMs = 2000;

int ReportInferError(const Status& status, int exit_code) {
  std::cerr << "error: " << status.ToString() << "\n";
  return exit_code;
}

// "name [rows, k]" then one line per row of each small output (an answer, e.g. top-k
// probabilities and classes); larger outputs only by their spec.
void PrintAnswer(const std::vector<Tensor>& outputs) {
  constexpr size_t kMaxPrinted = 1000;
  for (const Tensor& out : outputs) {
    std::cout << out.name << ": " << SpecToString(out.spec) << "\n";
    const auto count = NumElements(out.spec.shape);
    const bool printable = out.spec.dtype == DType::kFloat32 || out.spec.dtype == DType::kInt64;
    if (!printable || !count || *count > kMaxPrinted || *count == 0) continue;
    const int64_t rows = out.spec.shape.empty() ? 1 : out.spec.shape[0];
    const uint64_t per_row = *count / static_cast<uint64_t>(std::max<int64_t>(rows, 1));
    for (uint64_t i = 0; i < *count; ++i) {
      if (i % per_row == 0) std::cout << "  [" << i / per_row << "]";
      if (out.spec.dtype == DType::kFloat32) {
        float v;
        std::memcpy(&v, out.data.data() + i * sizeof(float), sizeof(float));
        std::cout << " " << v;
      } else {
        int64_t v;
        std::memcpy(&v, out.data.data() + i * sizeof(int64_t), sizeof(int64_t));
        std::cout << " " << v;
      }
      if ((i + 1) % per_row == 0) std::cout << "\n";
    }
  }
}

// The images' bytes as one bytes input: one length-prefixed item per file.
Status ReadImages(const std::vector<std::string>& paths, Tensor* input) {
  input->spec = TensorSpec{DType::kBytes, {static_cast<int64_t>(paths.size())}};
  for (const std::string& path : paths) {
    std::ifstream file(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (!file.good() && !file.eof()) return InvalidArgument("--image " + path + ": cannot read");
    AppendBytesItem(bytes, &input->data);
  }
  return Status::Ok();
}

int WriteOutputs(const std::vector<std::string>& paths, const std::vector<Tensor>& outputs) {
  if (paths.size() > outputs.size()) {
    std::cerr << "warning: " << paths.size() << " --output paths but the model returned "
              << outputs.size() << " output(s); the extra paths are not written\n";
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::string path = InferCommand::OutputPath(paths, k, outputs.size());
    if (path.empty()) continue;
    const Tensor& out = outputs[k];
    Status s = WriteNpy(path, out.spec, out.data.data(), out.data.size());
    if (!s.ok()) return ReportInferError(s, kExitUsage);
  }
  return kExitOk;
}

}  // namespace

InferCommand::InferCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("infer", "Send one inference request built from .npy files");
  app_->add_option("--endpoint", endpoint_, "Supervisor endpoint")->capture_default_str();
  app_->add_option("--model", model_, "Model name")->required();
  auto* input =
      app_->add_option("--input", inputs_, "Input .npy file, once per model input, in order")
          ->check(CLI::ExistingFile);
  auto* image = app_->add_option("--image", images_,
                                 "Image file (JPEG) for a model whose pipeline decodes; repeat "
                                 "for a batch; prints the answer")
                    ->check(CLI::ExistingFile);
  input->excludes(image);
  app_->callback([this, input, image] {
    if (input->count() == 0 && image->count() == 0) {
      throw CLI::RequiredError("--input or --image");
    }
  });
  app_->add_option("--output", outputs_,
                   "Output .npy path, once per output; one path with several outputs writes "
                   "out.npy, out.1.npy, ...");
  app_->add_option("--timeout-ms", timeout_ms_, "Server-side deadline in ms (0: none)")
      ->check(IntegerIn(0, kMaxCliTimeoutMs))
      ->capture_default_str();
  app_->add_option("--priority", priority_, "Priority, 0 is highest")
      ->check(IntegerIn(0, kMaxPriority))
      ->capture_default_str();
  app_->add_option("--io-timeout-ms", io_timeout_ms_,
                   "How long to wait for the reply (raised to timeout-ms + 2000 if lower)")
      ->check(IntegerIn(1, kMaxCliTimeoutMs))
      ->capture_default_str();
}

std::string InferCommand::OutputPath(const std::vector<std::string>& paths, size_t index,
                                     size_t output_count) {
  if (index < paths.size()) return paths[index];
  if (paths.size() != 1 || output_count < 2) return "";
  const std::string& base = paths[0];
  const std::string suffix = ".npy";
  const std::string number = "." + std::to_string(index);
  if (base.size() > suffix.size() &&
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return base.substr(0, base.size() - suffix.size()) + number + suffix;
  }
  return base + number;
}

int InferCommand::Run() {
  std::vector<Tensor> tensors(inputs_.size() + (images_.empty() ? 0 : 1));
  std::vector<TensorView> views;
  if (!images_.empty()) {
    Status s = ReadImages(images_, &tensors[0]);
    if (!s.ok()) return ReportInferError(s, kExitUsage);
    views.push_back(TensorView{tensors[0].spec, tensors[0].data.data(), tensors[0].data.size()});
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Status s = ReadNpy(inputs_[i], &tensors[i].spec, &tensors[i].data);
    if (!s.ok()) return ReportInferError(s, kExitUsage);
    views.push_back(TensorView{tensors[i].spec, tensors[i].data.data(), tensors[i].data.size()});
  }
  int64_t io_timeout = io_timeout_ms_;
  if (timeout_ms_ > 0) io_timeout = std::max(io_timeout, timeout_ms_ + kDeadlineGraceMs);
  io_timeout = std::min<int64_t>(io_timeout, std::numeric_limits<int>::max());
  Client client(endpoint_, static_cast<int>(io_timeout));
  if (!client.connect_status().ok()) return ReportInferError(client.connect_status(), kExitUsage);

  InferResult result;
  Status s = client.Infer(model_, views, &result, InferOptions{timeout_ms_, priority_});
  const bool got_reply = !result.header.raw.is_null();
  if (got_reply) std::cout << result.header.raw.dump(2) << std::endl;
  if (!s.ok()) {
    // An error reply is the server's verdict; anything else means no usable reply came back.
    if (got_reply && !result.header.status.ok()) return ReportInferError(s, kExitServerError);
    if (!got_reply && s.code() == StatusCode::kInvalidArgument)
      return ReportInferError(s, kExitUsage);
    return ReportInferError(s, kExitTransport);
  }
  if (!images_.empty()) PrintAnswer(result.outputs);
  return WriteOutputs(outputs_, result.outputs);
}

}  // namespace torchfarm
