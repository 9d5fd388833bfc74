#include "ipc/guarded_copy.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>

namespace torchfarm::ipc {
namespace {

// volatile: the compiler must not drop the store before memcpy (which, as a builtin, it knows
// does not read this variable); only the signal handler does.
thread_local sigjmp_buf* volatile active_copy = nullptr;

void OnBusError(int signal_number, siginfo_t*, void*) {
  if (sigjmp_buf* target = active_copy) siglongjmp(*target, 1);
  // Not inside a guarded copy: die of it, as without the guard.
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

void InstallBusGuard() {
  struct sigaction action {};
  action.sa_sigaction = OnBusError;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

bool GuardedCopy(void* to, const void* from, size_t bytes) {
  sigjmp_buf target;
  if (sigsetjmp(target, /*savemask=*/1) != 0) {
    active_copy = nullptr;
    return false;
  }
  active_copy = &target;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(to, from, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  active_copy = nullptr;
  return true;
}

}  // namespace torchfarm::ipc
