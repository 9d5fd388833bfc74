#include "common/worker_count.h"

#include "common/number_parse.h"

namespace torchfarm {

Status CheckWorkerCount(int64_t count, const std::string& where) {
  if (count >= 0 && count <= kMaxWorkersPerModel) return Status::Ok();
  return InvalidArgument(where + ": expected an integer in " + RangeText(0, kMaxWorkersPerModel) +
                         " (workers of one model), got " + std::to_string(count));
}

}  // namespace torchfarm
