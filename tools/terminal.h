// The terminal side of `torchfarm top`: full-screen drawing, raw keys, and the signals that end,
// suspend or resize a session.
//
// Owns: the saved termios of stdin (restored on destruction, on Leave and before a Ctrl-Z stop),
// the alternate screen and hidden cursor of stdout, and a signalfd for SIGINT, SIGTERM, SIGHUP,
// SIGTSTP and SIGWINCH (blocked while it lives, so no handler runs and nothing can interrupt
// a half-written frame). Runs on the CLI's main thread.
#pragma once

#include <signal.h>
#include <termios.h>

#include <string>
#include <vector>

namespace torchfarm {

struct TerminalSize {
  int columns = 0;  // 0: unknown (not a terminal)
  int rows = 0;
};

// TIOCGWINSZ of `fd`.
TerminalSize QueryTerminalSize(int fd);

class TerminalScreen {
 public:
  // `full_screen`: draw on stdout's alternate screen with the cursor hidden. `raw_keys`: read
  // stdin key by key without echo (Ctrl-C still raises SIGINT). Both are entered at once.
  TerminalScreen(bool full_screen, bool raw_keys);
  ~TerminalScreen();
  TerminalScreen(const TerminalScreen&) = delete;
  TerminalScreen& operator=(const TerminalScreen&) = delete;

  void Enter();
  // Restores the terminal as it was; safe to call twice.
  void Leave();
  // Replaces the screen with `lines` (home, each line cleared to its end, the rest cleared).
  void Draw(const std::vector<std::string>& lines) const;

 private:
  bool full_screen_;
  bool raw_keys_;
  bool entered_ = false;
  bool saved_termios_valid_ = false;
  termios saved_termios_{};
};

// Signals as a file descriptor: the top loop polls it next to stdin.
class TerminalSignals {
 public:
  enum class Event { kNone, kQuit, kSuspend, kResize };

  TerminalSignals();
  ~TerminalSignals();
  TerminalSignals(const TerminalSignals&) = delete;
  TerminalSignals& operator=(const TerminalSignals&) = delete;

  // -1 when the signalfd could not be opened (the default dispositions then stay in force).
  int fd() const { return fd_; }
  // The most pressing pending event: quit beats suspend beats resize.
  Event ReadPending();

 private:
  int fd_ = -1;
  sigset_t previous_mask_{};
};

// Writes all of `text` to `fd`, retrying short writes; false on error.
bool WriteAll(int fd, const std::string& text);

}  // namespace torchfarm
