// CheckRequestHeader: the checks a request header gets when it is built in code instead of parsed
// from text (the v2 front ends' typed hand-off, supervisor/frontend/typed_frame.h), so that a
// RequestHeader reaches the supervisor's intake having passed the same checks, with the same
// messages, whichever protocol it came by.
//
// ParseRequestHeaderJson (protocol.h) checks types and values as it reads; a header built in code
// has its types already, so only the value checks remain: these are they, in the JSON path's
// order and words. A test (tests/common/request_header_check_test.cc) holds each refusal against
// ParseRequestHeaderJson's for the same header written as JSON. Pure; any thread.
#pragma once

#include "common/protocol.h"
#include "common/status.h"

namespace torchfarm {

// OK when ParseRequestHeaderJson would accept `header` written as JSON (an inference header: op
// "infer"; outputs_shm and output_shm are left to intake, which knows the request's origin);
// else its INVALID_ARGUMENT. Also refuses what JSON cannot express but a struct can: input_names
// or input_shm present with another count than inputs.
Status CheckRequestHeader(const RequestHeader& header, const RequestLimits& limits);

}  // namespace torchfarm
