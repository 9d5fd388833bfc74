#include "tools/top_command.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include "common/integer_flag.h"
#include "tools/terminal.h"
#include "tools/top_view.h"

namespace torchfarm {

using nlohmann::json;

namespace {

using SteadyClock = std::chrono::steady_clock;

// Until what happens next in the refresh loop.
enum class Wake { kRefresh, kRedraw, kQuit };

std::string TopTimestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

// True when stdin delivered a `q` (or its Ctrl-D end); other keys are read and ignored.
bool QuitKeyPressed() {
  char keys[64];
  ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
  if (n == 0) return false;  // VMIN 0: nothing there
  for (ssize_t i = 0; i < n; ++i) {
    if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 0x04) return true;
  }
  return false;
}

// Sleeps until `deadline`, a key or a signal, and says what the loop does next. Ctrl-Z leaves
// the screen, stops the process, and comes back to a redraw once resumed.
Wake WaitForNext(SteadyClock::time_point deadline, bool watch_keys, TerminalSignals* signals,
                 TerminalScreen* screen) {
  while (true) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return Wake::kRefresh;
    pollfd fds[2] = {{signals->fd(), POLLIN, 0}, {watch_keys ? STDIN_FILENO : -1, POLLIN, 0}};
    int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready <= 0) continue;  // timeout (loop re-checks the deadline) or EINTR
    if (fds[0].revents & POLLIN) {
      switch (signals->ReadPending()) {
        case TerminalSignals::Event::kQuit:
          return Wake::kQuit;
        case TerminalSignals::Event::kSuspend:
          screen->Leave();
          ::raise(SIGSTOP);
          screen->Enter();
          return Wake::kRedraw;
        case TerminalSignals::Event::kResize:
          return Wake::kRedraw;
        case TerminalSignals::Event::kNone:
          break;
      }
    }
    if (fds[1].revents & POLLIN && QuitKeyPressed()) return Wake::kQuit;
    // Input closed (a hung-up terminal): stop watching it rather than spin.
    if (fds[1].revents & (POLLHUP | POLLERR)) watch_keys = false;
  }
}

}  // namespace

TopCommand::TopCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("top", "Live view of the farm's models and workers (q quits)");
  app_->add_option("--admin", admin_, "Admin endpoint of the supervisor")->capture_default_str();
  app_->add_option("--interval-ms", interval_ms_, "Refresh interval")
      ->check(IntegerIn(100, 3'600'000))
      ->capture_default_str();
  app_->add_option("--iterations", iterations_, "Stop after N refreshes (0: until quit)")
      ->check(IntegerIn(0, INT32_MAX))
      ->capture_default_str();
  app_->add_option("--timeout-ms", timeout_ms_, "How long to wait for each answer")
      ->check(IntegerIn(1, kMaxAdminTimeoutMs))
      ->capture_default_str();
  app_->add_flag("--no-colour,--no-color", no_colour_, "No colours even on a terminal");
}

int TopCommand::Run() {
  // Block the signals before the admin client's context starts its I/O thread.
  TerminalSignals signals;
  const bool full_screen = ::isatty(STDOUT_FILENO) == 1;
  const bool watch_keys = full_screen && ::isatty(STDIN_FILENO) == 1;
  const char* no_color_env = std::getenv("NO_COLOR");  // https://no-color.org
  const bool colour = full_screen && !no_colour_ && (no_color_env == nullptr || !*no_color_env);
  TerminalScreen screen(full_screen, watch_keys);
  AdminClient client(admin_, timeout_ms_);

  json stats;
  Status last = Status::Ok();
  for (int refresh = 0; iterations_ == 0 || refresh < iterations_; ++refresh) {
    auto deadline = SteadyClock::now() + std::chrono::milliseconds(interval_ms_);
    last = client.Command("stats", &stats);
    if (std::string error = AdminReplyError(stats); last.ok() && !error.empty()) {
      last = Internal("the supervisor refused \"stats\": " + error);
    }
    for (bool draw = true;; draw = full_screen) {
      if (draw) {
        TopViewOptions options{0, 0, colour, watch_keys};
        if (full_screen) {
          TerminalSize size = QueryTerminalSize(STDOUT_FILENO);
          options.width = size.columns > 0 ? size.columns : 80;
          options.height = size.rows > 0 ? size.rows : 24;
        }
        auto lines = last.ok() ? RenderTopView(stats, options)
                               : RenderTopError(admin_, last.message(), options);
        if (full_screen) {
          screen.Draw(lines);
        } else {
          std::string block = (refresh > 0 ? "\n=== " : "=== ") + TopTimestamp() + " ===\n";
          for (const auto& line : lines) block += line + "\n";
          if (!WriteAll(STDOUT_FILENO, block)) return kExitUsage;  // stdout closed: nobody reads
        }
      }
      if (iterations_ != 0 && refresh + 1 >= iterations_) break;
      Wake wake = WaitForNext(deadline, watch_keys, &signals, &screen);
      if (wake == Wake::kQuit) return kExitOk;
      if (wake == Wake::kRefresh) break;
      // kRedraw: the same snapshot again, at the new size or after a resume; plain output, which
      // has no screen to repair, just waits on.
    }
  }
  screen.Leave();
  if (!last.ok()) {
    std::cerr << "error: " << last.message() << "\n";
    if (last.code() == StatusCode::kInternal) return kExitServerError;
    return last.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTransport;
  }
  return kExitOk;
}

}  // namespace torchfarm
