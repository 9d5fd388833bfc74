// Copies to or from memory another process may truncate under us: a client's shared-memory region
// (docs/protocol.md, "Shared-memory tensors"). A process that touches a page past the new end of a
// shared-memory object gets SIGBUS; with the guard installed, such a copy returns false instead of
// killing the process, so a client that shrinks its own region costs only its own request.
//
// The handler only jumps back to the copy that faulted (sigsetjmp/siglongjmp on a thread-local
// buffer); a SIGBUS anywhere else still kills the process as it would without the guard.
#pragma once

#include <cstddef>

namespace torchfarm::ipc {

// Installs the SIGBUS handler (idempotent). Call once at start-up, before the first GuardedCopy.
void InstallBusGuard();

// memcpy(to, from, bytes); false if either range stopped being backed by memory midway (the bytes
// already copied stay copied).
bool GuardedCopy(void* to, const void* from, size_t bytes);

}  // namespace torchfarm::ipc
