// The barrier every loop duty runs inside (Supervisor::RunTurn, and duties that run one part per
// model or per worker): a failing duty is logged and the loop goes on. Running out of descriptors
// or memory (a resource errno from ZeroMQ, std::bad_alloc) fails the one duty that hit it, counted
// and logged at a bounded rate by ResourceErrors, never the supervisor. Loop thread only.
#pragma once

#include <exception>
#include <new>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "supervisor/loop/resource_errors.h"

namespace torchfarm {

template <typename Duty>
void RunGuarded(const char* duty, const TimeSource& clock, Duty&& run) {
  try {
    run();
  } catch (const zmq::error_t& e) {
    if (IsResourceErrno(e.num())) {
      ResourceErrors::Instance().Note(duty, e.what(), clock.Now());
    } else {
      TF_LOG(kError) << "loop duty failed; the supervisor carries on" << Kv("duty", duty)
                     << Kv("error", e.what());
    }
  } catch (const std::bad_alloc& e) {
    ResourceErrors::Instance().Note(duty, e.what(), clock.Now());
  } catch (const std::exception& e) {
    TF_LOG(kError) << "loop duty failed; the supervisor carries on" << Kv("duty", duty)
                   << Kv("error", e.what());
  }
}

}  // namespace torchfarm
