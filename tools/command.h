// The shape every `torchfarm` subcommand takes, and the CLI's exit codes.
//
// Owns: nothing at run time. Each subcommand lives in its own file pair (infer_command.h/.cc;
// later stats, top, bench, ctl): its constructor registers a CLI11 subcommand and its flags on the
// parent app, Run() does the work after parsing. torchfarm_main.cc lists the commands.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace torchfarm {

// Exit codes of the `torchfarm` CLI, stable for scripts.
inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;  // the server answered with an error reply
inline constexpr int kExitUsage = 2;        // bad flags, unreadable or unwritable files
inline constexpr int kExitTransport = 3;    // no reply, connection or protocol failure

// Request and reply timeouts of infer and bench (--timeout-ms, --io-timeout-ms): at most a day,
// so adding the reply grace to one never overflows.
inline constexpr int64_t kMaxCliTimeoutMs = 86'400'000;

class Command {
 public:
  virtual ~Command() = default;
  // The CLI11 subcommand this command registered; Run() is called when it was parsed.
  virtual CLI::App* app() const = 0;
  virtual int Run() = 0;
};

}  // namespace torchfarm
