// Test support for ParseJob: builds the multipart message a client would send (routing id,
// header, zero-filled data frames of the given sizes) and runs it through SplitEnvelope and
// ParseJob, so each test states only what differs.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "supervisor/intake/job_intake.h"

namespace torchfarm {

struct JobContext {
  RequestLimits limits;
  ClientShmRegistry* regions = nullptr;
  ShmCommand* command = nullptr;
  TimePoint now{};
};

inline Status RunJob(const std::vector<ModelConfig>& models, const std::string& header,
                     const std::vector<size_t>& data_sizes, PendingRequest* request,
                     size_t* model_index = nullptr, const JobContext& context = {}) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("client"));
  frames.emplace_back(header);
  for (size_t n : data_sizes) frames.emplace_back(n);
  size_t start = 0;
  EXPECT_TRUE(SplitEnvelope(frames, request, &start));
  size_t index = 0;
  Status s = ParseJob(frames, start, models, context.now, request, &index, context.limits,
                      context.regions, context.command);
  if (model_index) *model_index = index;
  return s;
}

}  // namespace torchfarm
