// The AOTInductor ModelRunner (worker/model_runner.h): a .pt2 package from
// torch._inductor.aoti_compile_and_package, run by torch::inductor::AOTIModelPackageLoader.
//
// Load, in this order, so each failure says what is wrong with the file before LibTorch is asked
// to dlopen anything: the file is a zip archive; its metadata reads (a package without a "model"
// inside says so here); it was compiled for this device, this CPU's features (the package's .so is
// built with -march of the exporting machine) and this torch release (worker/aoti_package_info.h);
// then the loader unpacks it into $TMPDIR/aotinductor_XXXXXX and dlopens it there (TMPDIR is
// the worker's own folder, worker/private_temp_dir.h, so a killed worker's copy is swept).
//
// Per batch: CheckInputs holds the batch to the rows the package was compiled for (a fixed-batch
// package takes that batch only) and each input to the dtype and non-batch dimensions its
// metadata records, so a wrong tensor is the request's INVALID_ARGUMENT with both shapes, never a
// read past the input. The package's own input checks are switched on too
// (AOTI_RUNTIME_CHECK_INPUTS=1, read by the generated code; the worker's main() sets it before any
// thread starts), so a package without torchfarm metadata still refuses a wrong shape.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/version.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "worker/aoti_package_info.h"
#include "worker/model_runner.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

// The name aoti_compile_and_package gives the one model of a package (its data/aotinductor/model/).
constexpr const char* kPackageModelName = "model";

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A zip archive starts with a local file header ("PK\3\4"); an empty one with "PK\5\6".
Status CheckZipArchive(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open the package file");
  char magic[4] = {};
  in.read(magic, sizeof(magic));
  const std::streamsize got = in.gcount();
  if (got == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4)
    return Status::Ok();
  std::ostringstream hex;
  for (std::streamsize i = 0; i < got; ++i)
    hex << (i ? " " : "") << std::hex << (static_cast<unsigned>(magic[i]) & 0xff);
  return InvalidArgument(
      "not an AOTInductor package: expected a zip archive (first bytes 50 4b 3 "
      "4), got " +
      (got == 0 ? std::string("an empty file") : "first bytes " + hex.str()));
}

class AotiModelRunner final : public ModelRunner {
 public:
  AotiModelRunner(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader,
                  AotiPackageInfo info)
      : loader_(std::move(loader)), info_(std::move(info)) {}

  ModelFormat format() const override { return ModelFormat::kAoti; }

  Status ConvertPrecision(c10::ScalarType type) override {
    if (type == c10::kFloat) return Status::Ok();
    return InvalidArgument(std::string("precision: an AOTInductor package runs in the dtypes it "
                                       "was compiled for; expected fp32, got ") +
                           ScalarTypeName(type) + " (export the model in that precision instead)");
  }

  Status Optimize(ModelOptimize mode) override {
    if (mode == ModelOptimize::kNone) return Status::Ok();
    return InvalidArgument(std::string("optimize: an AOTInductor package is compiled already; "
                                       "expected none, got ") +
                           ModelOptimizeName(mode));
  }

  Status CheckInputs(const std::vector<c10::IValue>& inputs) const override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].isTensor()) {
        return InvalidArgument("input " + std::to_string(i) +
                               ": an AOTInductor package takes "
                               "tensors, got " +
                               IValueKind(inputs[i]));
      }
    }
    if (!info_.inputs.empty() && inputs.size() != info_.inputs.size()) {
      return InvalidArgument("the package takes " + std::to_string(info_.inputs.size()) +
                             " inputs, got " + std::to_string(inputs.size()));
    }
    int64_t rows = -1;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& tensor = inputs[i].toTensor();
      if (tensor.dim() > 0) {
        if (Status status = CheckAotiRows(info_, tensor.size(0)); !status.ok()) return status;
        // Padding is defined for a batch, whose inputs share their rows.
        if (rows >= 0 && tensor.size(0) != rows && (Padded(rows) || Padded(tensor.size(0)))) {
          return InvalidArgument("input " + std::to_string(i) + " has " +
                                 std::to_string(tensor.size(0)) + " rows and an earlier one " +
                                 std::to_string(rows) + ": a batch below the package's " +
                                 info_.BatchText() + " rows is padded only when all agree");
        }
        rows = tensor.size(0);
      }
      const std::optional<DType> dtype = FromScalarType(tensor.scalar_type());
      if (!dtype) {
        return InvalidArgument("input " + std::to_string(i) + ": unsupported dtype " +
                               ScalarTypeName(tensor.scalar_type()));
      }
      if (Status status = CheckAotiInput(info_, i, *dtype, tensor.sizes().vec()); !status.ok())
        return status;
    }
    return Status::Ok();
  }

  c10::IValue Forward(const std::vector<c10::IValue>& inputs) override {
    std::vector<at::Tensor> tensors;
    tensors.reserve(inputs.size());
    // The generated code reads the inputs as laid out (it checks strides): contiguous ones.
    // CheckInputs passed: when one input is below the package's range, all share its rows.
    int64_t rows = -1;
    for (const c10::IValue& input : inputs) {
      at::Tensor tensor = input.toTensor().contiguous();
      if (tensor.dim() > 0 && Padded(tensor.size(0))) {
        // Below the package's range: zero rows up to its minimum (CheckAotiRows).
        rows = tensor.size(0);
        std::vector<int64_t> shape = tensor.sizes().vec();
        shape[0] = AotiRunRows(info_, rows) - rows;
        tensor = at::cat({tensor, at::zeros(shape, tensor.options())});
      }
      tensors.push_back(std::move(tensor));
    }
    std::vector<at::Tensor> outputs = loader_->run(tensors);
    if (rows >= 0) {
      const int64_t padded = AotiRunRows(info_, rows);
      // Cut back the outputs that are per row: those the metadata records with a variable first
      // dimension (or, with no outputs recorded, those with `padded` rows).
      for (size_t k = 0; k < outputs.size(); ++k) {
        at::Tensor& out = outputs[k];
        const bool per_row = k < info_.outputs.size() ? !info_.outputs[k].shape.empty() &&
                                                            info_.outputs[k].shape[0] == -1
                                                      : out.dim() > 0 && out.size(0) == padded;
        if (!per_row) continue;
        if (out.dim() == 0 || out.size(0) != padded) {
          throw std::runtime_error(
              "output " + std::to_string(k) + " of a batch padded to " + std::to_string(padded) +
              " rows has " +
              (out.dim() == 0 ? std::string("no rows") : std::to_string(out.size(0)) + " rows"));
        }
        out = out.narrow(0, 0, rows);
      }
    }
    if (outputs.size() == 1) return c10::IValue(std::move(outputs[0]));
    std::vector<c10::IValue> elements(outputs.begin(), outputs.end());
    return c10::ivalue::Tuple::create(std::move(elements));
  }

  std::vector<TensorSpec> declared_inputs() const override { return info_.inputs; }
  std::vector<TensorSpec> declared_outputs() const override { return info_.outputs; }

  std::string Describe() const override {
    std::string text = "aoti batch " + info_.BatchText();
    if (!info_.torch_version.empty()) text += ", compiled by torch " + info_.torch_version;
    return text;
  }

 private:
  // A batch of `rows` runs padded with zero rows (AotiRunRows).
  bool Padded(int64_t rows) const { return AotiRunRows(info_, rows) > rows; }

  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  const AotiPackageInfo info_;
};

}  // namespace

Status OpenAotiRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out) {
  if (Status status = CheckZipArchive(options.path); !status.ok()) return status;
  // Before the first package runs: the generated code reads the variable once. The worker's
  // main() set it before starting threads; this covers in-process users (tests, tools), which
  // load models before they start any.
  if (const char* check = std::getenv("AOTI_RUNTIME_CHECK_INPUTS");
      check == nullptr || std::string(check) != "1") {
    ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/1);
  }
  std::unordered_map<std::string, std::string> metadata;
  try {
    metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(
        options.path, kPackageModelName);
  } catch (const c10::Error& e) {
    return InvalidArgument(std::string("cannot read the package's metadata (expected a package "
                                       "from torch._inductor.aoti_compile_and_package with a "
                                       "model named '") +
                           kPackageModelName + "'): " + ErrorText(e));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("cannot read the package's metadata: ") + e.what());
  }
  AotiPackageInfo info;
  if (Status status = ParseAotiPackageInfo(metadata, &info); !status.ok()) {
    return InvalidArgument("package metadata: " + status.message());
  }
  const std::string device_type = options.device.is_cuda() ? "cuda" : "cpu";
  Status fits =
      CheckAotiPackageFits(info, device_type, ParseCpuFlags(ReadFileText("/proc/cpuinfo")),
                           TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
  if (!fits.ok()) return fits;
  try {
    const c10::DeviceIndex index = options.device.is_cuda() ? options.device.index() : -1;
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        options.path, kPackageModelName, /*run_single_threaded=*/false, /*num_runners=*/1, index);
    *out = std::make_unique<AotiModelRunner>(std::move(loader), std::move(info));
  } catch (const c10::Error& e) {
    return InvalidArgument("AOTInductor cannot load the package: " + ErrorText(e));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("AOTInductor cannot load the package: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace torchfarm::worker
