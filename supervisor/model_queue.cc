#include "supervisor/model_queue.h"

#include <algorithm>

namespace torchfarm {

namespace {
// How far past the head a batch looks for compatible requests; bounds the cost per batch when a
// queue holds many requests of other shapes.
constexpr size_t kScanWindowFactor = 4;
constexpr size_t kMinScanWindow = 64;
}  // namespace

bool BatchCompatible(const PendingRequest& a, const PendingRequest& b) {
  if (!a.batchable || !b.batchable || a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const auto& x = a.inputs[i];
    const auto& y = b.inputs[i];
    if (x.dtype != y.dtype || x.shape.size() != y.shape.size()) return false;
    if (!std::equal(x.shape.begin() + 1, x.shape.end(), y.shape.begin() + 1)) return false;
  }
  return true;
}

BatchingPolicy BatchingPolicyFor(const ModelConfig& m) {
  BatchingPolicy p;
  p.max_batch_size = m.max_batch_size;
  p.max_queue_delay_us = m.max_queue_delay_us;
  p.preferred_batch_sizes = m.preferred_batch_sizes;
  p.max_queue_size = m.max_queue_size;
  p.priority_levels = m.priority_levels;
  p.max_batch_bytes = m.slot_bytes;
  return p;
}

void ModelQueue::SetPolicy(BatchingPolicy policy) {
  std::vector<PendingRequest> all = TakeAll();
  policy_ = std::move(policy);
  levels_.clear();
  levels_.resize(static_cast<size_t>(std::max(1, policy_.priority_levels)));
  for (auto& r : all) {
    size_t level = std::min<size_t>(std::max(0, r.priority), levels_.size() - 1);
    earliest_deadline_ = std::min(earliest_deadline_, r.deadline);  // TakeAll forgot it
    rows_ += r.rows;
    levels_[level].push_back(std::move(r));
    ++size_;
  }
}

ModelQueue::ModelQueue(BatchingPolicy policy)
    : policy_(std::move(policy)), levels_(std::max(1, policy_.priority_levels)) {}

bool ModelQueue::Push(PendingRequest& request) {
  if (size_ >= static_cast<size_t>(policy_.max_queue_size)) return false;
  size_t level = std::min<size_t>(std::max(0, request.priority), levels_.size() - 1);
  earliest_deadline_ = std::min(earliest_deadline_, request.deadline);
  rows_ += request.rows;
  levels_[level].push_back(std::move(request));
  ++size_;
  return true;
}

void ModelQueue::PushFront(std::vector<PendingRequest> requests) {
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
    size_t level = std::min<size_t>(std::max(0, it->priority), levels_.size() - 1);
    earliest_deadline_ = std::min(earliest_deadline_, it->deadline);
    rows_ += it->rows;
    levels_[level].push_front(std::move(*it));
    ++size_;
  }
}

std::deque<PendingRequest>* ModelQueue::HighestLevel() {
  for (auto& level : levels_) {
    if (!level.empty()) return &level;
  }
  return nullptr;
}

const std::deque<PendingRequest>* ModelQueue::HighestLevel() const {
  for (const auto& level : levels_) {
    if (!level.empty()) return &level;
  }
  return nullptr;
}

std::vector<size_t> ModelQueue::Candidates(const std::deque<PendingRequest>& level,
                                           int64_t max_rows, int64_t* rows) const {
  const PendingRequest& head = level.front();
  std::vector<size_t> picked = {0};
  *rows = head.rows;
  uint64_t bytes = head.slot_bytes;
  if (!head.batchable || head.rows >= max_rows) return picked;
  size_t window = std::max<size_t>(kMinScanWindow,
                                   kScanWindowFactor * static_cast<size_t>(policy_.max_batch_size));
  for (size_t i = 1; i < level.size() && i < window && *rows < max_rows; ++i) {
    const PendingRequest& r = level[i];
    if (!BatchCompatible(head, r)) continue;
    if (*rows + r.rows > max_rows) continue;
    if (bytes + r.slot_bytes > policy_.max_batch_bytes) continue;
    picked.push_back(i);
    *rows += r.rows;
    bytes += r.slot_bytes;
  }
  return picked;
}

size_t ModelQueue::PreferredPrefix(const std::deque<PendingRequest>& level,
                                   const std::vector<size_t>& picked) const {
  size_t best = 0;
  int64_t rows = 0;
  for (size_t n = 0; n < picked.size(); ++n) {
    rows += level[picked[n]].rows;
    if (std::binary_search(policy_.preferred_batch_sizes.begin(),
                           policy_.preferred_batch_sizes.end(), rows)) {
      best = n + 1;
    }
  }
  return best;
}

std::vector<PendingRequest> ModelQueue::TakeBatch(TimePoint now, int64_t row_cap) {
  std::deque<PendingRequest>* level = HighestLevel();
  if (!level) return {};
  // Whether a batch is due is decided on max_batch_size alone; the cap only sizes it.
  const int64_t max_rows = std::max<int64_t>(1, policy_.max_batch_size);
  int64_t rows = 0;
  std::vector<size_t> picked = Candidates(*level, max_rows, &rows);
  const PendingRequest& head = level->front();
  bool alone = !head.batchable || head.rows >= max_rows;
  bool full = rows >= max_rows;
  bool waited = now - head.received >= Micros(policy_.max_queue_delay_us);
  // The rest of a due batch that a cap split goes as soon as a worker can take it.
  bool rest_of_split = split_rows_left_ > 0;
  if (!alone && !full && !waited && !rest_of_split) {
    size_t prefix = PreferredPrefix(*level, picked);
    if (prefix == 0) return {};
    picked.resize(prefix);
    rows = 0;
    for (size_t index : picked) rows += (*level)[index].rows;
  }
  const int64_t due_rows = rows;
  const int64_t capped = std::max<int64_t>(1, row_cap);
  if (!alone && capped < rows) picked = Candidates(*level, capped, &rows);
  split_rows_left_ = rest_of_split ? std::max<int64_t>(0, split_rows_left_ - rows)
                                   : due_rows - rows;
  std::vector<PendingRequest> batch;
  batch.reserve(picked.size());
  for (size_t index : picked) {
    rows_ -= (*level)[index].rows;
    batch.push_back(std::move((*level)[index]));
  }
  // Erase from the back so earlier indices stay valid.
  for (auto it = picked.rbegin(); it != picked.rend(); ++it) {
    level->erase(level->begin() + static_cast<std::ptrdiff_t>(*it));
  }
  size_ -= batch.size();
  return batch;
}

std::optional<TimePoint> ModelQueue::NextDue() const {
  const std::deque<PendingRequest>* level = HighestLevel();
  if (!level) return std::nullopt;
  return level->front().received + Micros(policy_.max_queue_delay_us);
}

std::vector<PendingRequest> ModelQueue::TakeExpired(TimePoint now) {
  std::vector<PendingRequest> expired;
  if (now < earliest_deadline_) return expired;
  TimePoint earliest = TimePoint::max();
  for (auto& level : levels_) {
    for (auto it = level.begin(); it != level.end();) {
      if (it->deadline <= now) {
        rows_ -= it->rows;
        expired.push_back(std::move(*it));
        it = level.erase(it);
        --size_;
      } else {
        earliest = std::min(earliest, it->deadline);
        ++it;
      }
    }
  }
  earliest_deadline_ = earliest;
  split_rows_left_ = std::min(split_rows_left_, rows_);
  return expired;
}

std::optional<TimePoint> ModelQueue::NextDeadline() const {
  if (earliest_deadline_ == TimePoint::max()) return std::nullopt;
  return earliest_deadline_;
}

std::vector<PendingRequest> ModelQueue::TakeAll() {
  std::vector<PendingRequest> all;
  for (auto& level : levels_) {
    for (auto& r : level) all.push_back(std::move(r));
    level.clear();
  }
  size_ = 0;
  rows_ = 0;
  split_rows_left_ = 0;
  earliest_deadline_ = TimePoint::max();
  return all;
}

}  // namespace torchfarm
