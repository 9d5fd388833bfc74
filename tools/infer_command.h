// `torchfarm infer`: sends one request built from .npy files and writes the outputs as .npy.
//
// Owns: the flags of the subcommand and the mapping of outcomes to exit codes (tools/command.h).
// Runs in the CLI process only, on its main thread.
//
//   torchfarm infer --endpoint EP --model NAME --input a.npy [--input b.npy ...]
//                   [--output out.npy ...] [--timeout-ms N] [--priority P] [--io-timeout-ms N]
//   torchfarm infer --model resnet18 --image a.jpg [--image b.jpg ...]
//
// --image sends the files' bytes as one "bytes" input, one item per image (docs/protocol.md,
// "Bytes inputs"), for a model whose pipeline decodes them; the answer (the post-processed
// outputs, e.g. top-5 probabilities and classes) is printed row by row after the reply header.
//
// Prints the reply header as pretty JSON on stdout. Output k goes to the k-th --output path;
// outputs beyond the paths given are not written, except that a single --output with several
// outputs writes out.npy, out.1.npy, out.2.npy, ... (the index goes before a ".npy" suffix, or
// is appended when there is none).
#pragma once

#include <string>
#include <vector>

#include "tools/command.h"

namespace torchfarm {

class InferCommand : public Command {
 public:
  explicit InferCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

  // Where output `index` of `output_count` goes, or "" when it is not written.
  static std::string OutputPath(const std::vector<std::string>& paths, size_t index,
                                size_t output_count);

 private:
  CLI::App* app_;
  std::string endpoint_ = "tcp://127.0.0.1:5555";
  std::string model_;
  std::vector<std::string> inputs_;
  std::vector<std::string> images_;
  std::vector<std::string> outputs_;
  int64_t timeout_ms_ = 0;
  int priority_ = 0;
  int io_timeout_ms_ = 30000;
};

}  // namespace torchfarm
