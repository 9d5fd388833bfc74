// Typed frames: how a front-end thread hands the loop a request header, and the loop hands it
// back a reply header, inside the supervisor's process without writing either as text
// (farm_channel.h has the messages they travel in; issue 36).
//
// A typed frame is a zmq::message_t whose bytes are a heap TypedFrameBox<T>: an 8-byte marker
// naming T, then the T. The message owns the box: libzmq calls the box's deleter when the last
// reference to the message goes, on whichever thread that is (the reader once it has taken the
// value, or the hub's mailbox at its end when nobody read it), so a box is neither leaked nor freed
// twice. It never leaves the process (the bytes hold pointers that mean nothing in another
// process): only the FrontendHub's mailboxes carry one. Header-only
// so the loop's side (events/job_acceptor.cc) links none of the front ends' libraries.
//
// Recognising one: a request says it is typed (FrontendRequest::typed, loop/frontend_hub.h); a
// reply is typed when its first frame is a box (the loop's JSON replies begin with '{', a box with
// a NUL byte). TypedFrameValue checks size and marker either way, so a frame that is not what the
// request says is refused, never read as a T.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include <zmq.hpp>

#include "common/protocol.h"

namespace torchfarm {

template <typename T>
struct TypedFrameMarker;
template <>
struct TypedFrameMarker<RequestHeader> {
  static constexpr char kBytes[8] = {'\0', 't', 'f', 'r', 'e', 'q', '0', '1'};
};
template <>
struct TypedFrameMarker<ReplyHeader> {
  static constexpr char kBytes[8] = {'\0', 't', 'f', 'r', 'e', 'p', '0', '1'};
};

template <typename T>
struct TypedFrameBox {
  char marker[8];
  T value;
};

// A frame that owns `value`. Throws zmq::error_t (libzmq out of memory) like any message_t; the
// value is freed then too.
template <typename T>
zmq::message_t MakeTypedFrame(T value) {
  auto box = std::unique_ptr<TypedFrameBox<T>>(new TypedFrameBox<T>{{}, std::move(value)});
  std::memcpy(box->marker, TypedFrameMarker<T>::kBytes, sizeof(box->marker));
  zmq::message_t frame(
      box.get(), sizeof(TypedFrameBox<T>),
      [](void* data, void*) { delete static_cast<TypedFrameBox<T>*>(data); }, nullptr);
  box.release();  // the message owns it now
  return frame;
}

// The T in `frame`, or null when the frame is not a box of T (then it is left as it was).
template <typename T>
T* TypedFrameValue(zmq::message_t& frame) {
  if (frame.size() != sizeof(TypedFrameBox<T>)) return nullptr;
  if (std::memcmp(frame.data(), TypedFrameMarker<T>::kBytes, sizeof(TypedFrameMarker<T>::kBytes)) !=
      0) {
    return nullptr;
  }
  return &static_cast<TypedFrameBox<T>*>(frame.data())->value;
}

}  // namespace torchfarm
