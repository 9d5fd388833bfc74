#include "tools/terminal.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

namespace torchfarm {

namespace {

constexpr const char* kEnterFullScreen = "\x1b[?1049h\x1b[?25l";  // alternate screen, no cursor
constexpr const char* kLeaveFullScreen = "\x1b[?25h\x1b[?1049l";
constexpr const char* kHome = "\x1b[H";
constexpr const char* kClearToLineEnd = "\x1b[K";
constexpr const char* kClearBelow = "\x1b[J";

}  // namespace

TerminalSize QueryTerminalSize(int fd) {
  struct winsize size {};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0) return {};
  return {size.ws_col, size.ws_row};
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

TerminalScreen::TerminalScreen(bool full_screen, bool raw_keys)
    : full_screen_(full_screen), raw_keys_(raw_keys) {
  Enter();
}

TerminalScreen::~TerminalScreen() { Leave(); }

void TerminalScreen::Enter() {
  if (entered_) return;
  entered_ = true;
  if (raw_keys_ && ::tcgetattr(STDIN_FILENO, &saved_termios_) == 0) {
    saved_termios_valid_ = true;
    termios raw = saved_termios_;
    // Keys arrive one by one and are not echoed; ISIG stays on so Ctrl-C and Ctrl-Z still
    // signal, and output processing stays on so "\n" still returns the carriage.
    raw.c_lflag &= ~(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
  }
  if (full_screen_) WriteAll(STDOUT_FILENO, kEnterFullScreen);
}

void TerminalScreen::Leave() {
  if (!entered_) return;
  entered_ = false;
  if (full_screen_) WriteAll(STDOUT_FILENO, kLeaveFullScreen);
  if (saved_termios_valid_) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios_);
  saved_termios_valid_ = false;
}

void TerminalScreen::Draw(const std::vector<std::string>& lines) const {
  std::string frame = kHome;
  for (size_t i = 0; i < lines.size(); ++i) {
    frame += lines[i];
    frame += kClearToLineEnd;
    // No newline after the last line: on a full screen it would scroll the first line away.
    if (i + 1 < lines.size()) frame += "\n";
  }
  frame += kClearBelow;
  WriteAll(STDOUT_FILENO, frame);
}

TerminalSignals::TerminalSignals() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGWINCH}) sigaddset(&mask, signo);
  if (::sigprocmask(SIG_BLOCK, &mask, &previous_mask_) != 0) return;
  fd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) ::sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
}

TerminalSignals::~TerminalSignals() {
  if (fd_ < 0) return;
  ::close(fd_);
  // Signals that arrived after the last read would fire on unblocking; the session is over, so
  // a pending SIGINT or SIGTERM is honoured by its default action as usual.
  ::sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
}

TerminalSignals::Event TerminalSignals::ReadPending() {
  // Quit beats suspend beats resize: one poll round may collect several signals.
  auto rank = [](Event e) {
    return e == Event::kQuit ? 3 : e == Event::kSuspend ? 2 : e == Event::kResize ? 1 : 0;
  };
  Event event = Event::kNone;
  signalfd_siginfo info;
  while (fd_ >= 0 && ::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    Event next = Event::kResize;
    if (info.ssi_signo == SIGTSTP) next = Event::kSuspend;
    if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM || info.ssi_signo == SIGHUP) {
      next = Event::kQuit;
    }
    if (rank(next) > rank(event)) event = next;
  }
  return event;
}

}  // namespace torchfarm
