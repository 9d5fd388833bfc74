#include "supervisor/loop/service_notifier.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>

#include "common/log.h"

namespace torchfarm {

ServiceNotifier::ServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec / 2);
    next_watchdog_ = Clock::now();
  }
}

void ServiceNotifier::Send(const std::string& state) {
  if (!enabled_) return;
  int rc = sd_notify(/*unset_environment=*/0, state.c_str());
  if (rc < 0) TF_LOG(kWarn) << "sd_notify failed" << Kv("state", state) << Kv("errno", -rc);
}

void ServiceNotifier::Ready() {
  if (ready_sent_) return;
  ready_sent_ = true;
  Send("READY=1");
}

void ServiceNotifier::Reloading() {
  ready_sent_ = false;
  Send("RELOADING=1");
}

void ServiceNotifier::Stopping() { Send("STOPPING=1"); }

void ServiceNotifier::Status(const std::string& status) {
  if (status == last_status_) return;
  last_status_ = status;
  Send("STATUS=" + status);
}

void ServiceNotifier::Tick(TimePoint now) {
  if (now < next_watchdog_) return;
  Send("WATCHDOG=1");
  next_watchdog_ = now + watchdog_interval_;
}

}  // namespace torchfarm
