// Integers appended to text as JSON and HTTP write them, without a temporary string: for the
// per-request writers (MakeOkReply, the v2 reply, the HTTP response head; issue 36).
// Header-only; any thread.
#pragma once

#include <charconv>
#include <string>

namespace torchfarm {

template <typename Int>
void AppendInt(std::string* out, Int value) {
  char text[24];  // any 64-bit integer, sign included
  const auto result = std::to_chars(text, text + sizeof(text), value);
  // append(pointer, count): the iterator pair overload goes through replace(), ~3x the work.
  out->append(text, static_cast<size_t>(result.ptr - text));
}

}  // namespace torchfarm
