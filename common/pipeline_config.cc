#include "common/pipeline_config.h"

#include <filesystem>

#include "common/config_fields.h"

namespace torchfarm {

using config_fields::CheckKeys;
using config_fields::GetInt;
using config_fields::Got;
using nlohmann::json;

namespace {

Status CheckPipelineKeys(const json& j, const std::string& where,
                         const std::vector<std::string>& allowed) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  return CheckKeys(j, where, allowed);
}

Status ModulePath(const json& j, const std::string& key, const std::string& where,
                  const std::string& base_dir, std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_string() || it->get<std::string>().empty()) {
    return InvalidArgument(where + "." + key + ": expected a TorchScript file name, got " +
                           Got(*it));
  }
  std::filesystem::path p(it->get<std::string>());
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  *out = p.lexically_normal().string();
  return Status::Ok();
}

Status ParseDecode(const json& j, const std::string& where, PipelineConfig* out) {
  if (Status s = CheckPipelineKeys(j, where, {"format", "threads", "max_pixels"}); !s.ok()) {
    return s;
  }
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != "jpeg") {
    return InvalidArgument(where + ".format: expected \"jpeg\", got " +
                           (format == j.end() ? std::string("nothing") : Got(*format)));
  }
  out->decode_format = "jpeg";
  if (auto threads = j.find("threads"); threads != j.end()) {
    if (!threads->is_number_integer() || threads->get<int64_t>() < kMinDecodeThreads ||
        threads->get<int64_t>() > kMaxDecodeThreads) {
      return InvalidArgument(where + ".threads: expected an integer in " +
                             std::to_string(kMinDecodeThreads) + ".." +
                             std::to_string(kMaxDecodeThreads) + ", got " + Got(*threads));
    }
    out->threads = static_cast<int>(threads->get<int64_t>());
  }
  return GetInt(j, "max_pixels", where, kMinDecodeMaxPixels, kMaxDecodeMaxPixels, &out->max_pixels);
}

}  // namespace

Status CheckInputsWithoutPipeline(const std::vector<TensorSpec>& inputs, const std::string& where) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (IsBytes(inputs[i].dtype)) {
      return InvalidArgument(where + ".inputs[" + std::to_string(i) +
                             "]: a bytes input needs \"pipeline\": {\"decode\": {\"format\": "
                             "\"jpeg\"}} (no model takes bytes itself)");
    }
  }
  return Status::Ok();
}

Status ParsePipelineConfig(const json& j, const std::string& where, const std::string& base_dir,
                           const std::vector<TensorSpec>& inputs, bool has_warmup,
                           PipelineConfig* out) {
  PipelineConfig p;
  Status s = CheckPipelineKeys(j, where, {"decode", "preprocess", "postprocess", "overlap"});
  if (!s.ok()) return s;
  if (auto decode = j.find("decode"); decode != j.end()) {
    if (s = ParseDecode(*decode, where + ".decode", &p); !s.ok()) return s;
  }
  if (s = ModulePath(j, "preprocess", where, base_dir, &p.preprocess); !s.ok()) return s;
  if (s = ModulePath(j, "postprocess", where, base_dir, &p.postprocess); !s.ok()) return s;
  if (auto overlap = j.find("overlap"); overlap != j.end()) {
    if (!overlap->is_boolean()) {
      return InvalidArgument(where + ".overlap: expected true or false, got " + Got(*overlap));
    }
    p.overlap = overlap->get<bool>();
  }
  if (p.decode_format.empty()) {
    const std::string model = where.substr(0, where.rfind('.'));
    if (s = CheckInputsWithoutPipeline(inputs, model); !s.ok()) return s;
    if (!p.preprocess.empty() && inputs.size() != 1) {
      return InvalidArgument(where +
                             ".preprocess: runs on the rows of the model's one input; the "
                             "model has " +
                             std::to_string(inputs.size()) + " inputs");
    }
  } else {
    const TensorSpec wanted{DType::kBytes, {-1}};
    if (inputs.size() != 1 || !(inputs[0] == wanted)) {
      std::string got;
      for (const auto& spec : inputs) got += (got.empty() ? "" : ", ") + SpecToString(spec);
      return InvalidArgument(where +
                             ".decode: the model's inputs must be one bytes [-1] (an "
                             "encoded image per row), got [" +
                             got + "]");
    }
    if (has_warmup) {
      return InvalidArgument(where +
                             ".decode: \"warmup\" runs zero-filled inputs, which are no "
                             "image; remove \"warmup\" from a model that decodes");
    }
  }
  *out = std::move(p);
  return Status::Ok();
}

std::string PipelineToJson(const PipelineConfig& pipeline) {
  if (!pipeline.enabled()) return "";
  return json{{"decode", pipeline.decode_format},    {"threads", pipeline.threads},
              {"max_pixels", pipeline.max_pixels},   {"preprocess", pipeline.preprocess},
              {"postprocess", pipeline.postprocess}, {"overlap", pipeline.overlap}}
      .dump();
}

Status PipelineFromJson(const std::string& text, PipelineConfig* out) {
  *out = PipelineConfig{};
  if (text.empty()) return Status::Ok();
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("--pipeline: expected a JSON object, got '" + text + "'");
  }
  try {
    out->decode_format = j.at("decode").get<std::string>();
    out->threads = j.at("threads").get<int>();
    out->preprocess = j.at("preprocess").get<std::string>();
    out->postprocess = j.at("postprocess").get<std::string>();
    out->overlap = j.value("overlap", true);
  } catch (const json::exception& e) {
    return InvalidArgument("--pipeline: expected decode, threads, preprocess and postprocess in '" +
                           text + "': " + e.what());
  }
  if (out->threads < kMinDecodeThreads || out->threads > kMaxDecodeThreads) {
    return InvalidArgument("--pipeline: threads expected in " + std::to_string(kMinDecodeThreads) +
                           ".." + std::to_string(kMaxDecodeThreads) + ", got " +
                           std::to_string(out->threads));
  }
  if (auto max_pixels = j.find("max_pixels"); max_pixels != j.end()) {
    return IntegerFromJson(*max_pixels, "--pipeline: max_pixels", kMinDecodeMaxPixels,
                           kMaxDecodeMaxPixels, &out->max_pixels);
  }
  return Status::Ok();
}

}  // namespace torchfarm
