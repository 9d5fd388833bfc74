// Random tokens for names others must not guess: shared-memory region names and tokens, the
// supervisor's run nonce. Read from /dev/urandom; no state.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace torchfarm {

// 2*bytes lowercase hex digits from /dev/urandom, or INTERNAL when it cannot be read.
Status RandomHex(size_t bytes, std::string* out);

}  // namespace torchfarm
