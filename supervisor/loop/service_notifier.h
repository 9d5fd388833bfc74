// systemd integration through sd_notify(3): READY=1 once every model has a ready worker,
// STATUS= a one-line summary, WATCHDOG=1 from the main loop (only while it turns), RELOADING=1
// and READY=1 around a reload, STOPPING=1 when a drain or stop begins. Without NOTIFY_SOCKET
// (not started by systemd) every call is a silent no-op.
//
// Owns: the watchdog interval and what was last sent. Loop thread only.
#pragma once

#include <string>

#include "common/clock.h"

namespace torchfarm {

class ServiceNotifier {
 public:
  ServiceNotifier();

  void Ready();
  void Reloading();
  void Stopping();
  // Sends STATUS=… when it changed.
  void Status(const std::string& status);
  // Sends WATCHDOG=1 when half the watchdog interval has passed; call every loop turn.
  void Tick(TimePoint now);

  bool enabled() const { return enabled_; }
  bool ready_sent() const { return ready_sent_; }
  // When Tick must run next (for the poll timeout); TimePoint::max() without a watchdog.
  TimePoint next_watchdog() const { return next_watchdog_; }

 private:
  void Send(const std::string& state);

  bool enabled_ = false;
  bool ready_sent_ = false;
  Clock::duration watchdog_interval_{};
  TimePoint next_watchdog_ = TimePoint::max();
  std::string last_status_;
};

}  // namespace torchfarm
