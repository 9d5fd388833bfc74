#include "supervisor/dispatch/model_queue.h"

#include <algorithm>
#include <cmath>

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
  p.fair_queueing = m.fair_queueing;
  return p;
}

ModelQueue::ModelQueue(BatchingPolicy policy)
    : policy_(std::move(policy)), levels_(std::max(1, policy_.priority_levels)) {}

void ModelQueue::SetPolicy(BatchingPolicy policy) {
  std::vector<HeldRequest> all = TakeAll();
  policy_ = std::move(policy);
  // Built in place: a Level moves only by copy (std::deque's move may throw), which its held
  // requests do not allow.
  levels_ = std::vector<Level>(static_cast<size_t>(std::max(1, policy_.priority_levels)));
  const int64_t saved_size = policy_.max_queue_size;
  policy_.max_queue_size = INT64_MAX;  // never refused: they were accepted already
  for (auto& r : all) Push(r);
  policy_.max_queue_size = saved_size;
}

ModelQueue::Level& ModelQueue::LevelOf(const PendingRequest& request) {
  return levels_[std::min<size_t>(std::max(0, request.priority), levels_.size() - 1)];
}

void ModelQueue::Added(Level& level, const PendingRequest& request, ClientShare* share) {
  if (request.deadline != TimePoint::max()) deadlines_.insert(request.deadline);
  rows_ += request.rows;
  level.rows += request.rows;
  ++size_;
  if (!policy_.fair_queueing) return;
  if (!share) share = &level.clients[request.client];
  ++share->queued;
}

void ModelQueue::Removed(Level& level, const PendingRequest& request) {
  if (request.deadline != TimePoint::max()) deadlines_.erase(request.deadline);
  rows_ -= request.rows;
  level.rows -= request.rows;
  --size_;
  if (!policy_.fair_queueing) return;
  auto it = level.clients.find(request.client);
  if (it == level.clients.end()) return;
  --it->second.queued;
  // A client's finish tag outlives its queued requests until the virtual time passes it: a
  // closed-loop client that forgot it would get the virtual time again each time, ahead of a
  // pipelining client's whole backlog. Forgotten once passed, by PruneShares only: an idle share
  // whose finish the virtual time passed tags the client's next request exactly as a new one
  // would (NextTag), so keeping it until the sweep changes nothing but one comparison here.
}

void ModelQueue::PruneShares(Level& level) {
  for (auto it = level.clients.begin(); it != level.clients.end();) {
    if (it->second.queued == 0 && it->second.finish <= level.virtual_time) {
      it = level.clients.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t ModelQueue::FairCost(const PendingRequest& request) {
  const double weight = request.client_weight > 0 ? request.client_weight : 1.0;
  const double rows = static_cast<double>(std::max<int64_t>(1, request.rows));
  return std::max<int64_t>(1, std::llround(rows * static_cast<double>(kFairUnitsPerRow) / weight));
}

int64_t ModelQueue::NextTag(const Level& level, const ClientShare* share) {
  return share ? std::max(level.virtual_time, share->finish) : level.virtual_time;
}

bool ModelQueue::Push(PendingRequest& request) {
  if (size_ >= static_cast<size_t>(policy_.max_queue_size)) return false;
  HeldRequest held = std::make_unique<PendingRequest>(std::move(request));
  return Push(held);
}

bool ModelQueue::Push(HeldRequest& held) {
  if (size_ >= static_cast<size_t>(policy_.max_queue_size)) return false;
  PendingRequest& request = *held;
  Level& level = LevelOf(request);
  auto& queue = level.requests;
  if (!policy_.fair_queueing) {
    request.fair_tag = 0;
    Added(level, request);
    queue.push_back(std::move(held));
    return true;
  }
  ClientShare& share = level.clients[request.client];  // made here when new: one lookup a push
  const int64_t tag = NextTag(level, &share);
  share.finish = tag + FairCost(request);
  request.fair_tag = tag;
  Added(level, request, &share);
  if (queue.empty() || queue.back()->fair_tag <= tag) {
    queue.push_back(std::move(held));  // one client, or one far behind: no search
  } else {
    auto at = std::upper_bound(queue.begin(), queue.end(), tag,
                               [](int64_t t, const HeldRequest& r) { return t < r->fair_tag; });
    queue.insert(at, std::move(held));
  }
  return true;
}

void ModelQueue::PushFront(std::vector<HeldRequest> requests) {
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
    PendingRequest& request = **it;
    Level& level = LevelOf(request);
    // First in the level: no later tag than the current head's, nor than the virtual time.
    request.fair_tag = level.requests.empty()
                           ? level.virtual_time
                           : std::min(level.virtual_time, level.requests.front()->fair_tag);
    Added(level, request);
    level.requests.push_front(std::move(*it));
  }
}

ModelQueue::Level* ModelQueue::HighestLevel() {
  for (auto& level : levels_) {
    if (!level.requests.empty()) return &level;
  }
  return nullptr;
}

const ModelQueue::Level* ModelQueue::HighestLevel() const {
  for (const auto& level : levels_) {
    if (!level.requests.empty()) return &level;
  }
  return nullptr;
}

size_t ModelQueue::ScanWindow() const {
  return std::max<size_t>(kMinScanWindow,
                          kScanWindowFactor * static_cast<size_t>(policy_.max_batch_size));
}

TimePoint ModelQueue::OldestInWindow(const Requests& level) const {
  TimePoint oldest = level.front()->received;
  const size_t window = std::min(level.size(), ScanWindow());
  for (size_t i = 1; i < window; ++i) oldest = std::min(oldest, level[i]->received);
  return oldest;
}

size_t ModelQueue::clients() const {
  size_t n = 0;
  for (const auto& level : levels_) {
    for (const auto& [client, share] : level.clients) n += share.queued > 0;
  }
  return n;
}

void ModelQueue::Candidates(const Requests& level, int64_t max_rows, int64_t* rows,
                            std::vector<size_t>* out) const {
  const PendingRequest& head = *level.front();
  std::vector<size_t>& picked = *out;
  picked.assign(1, 0);
  *rows = head.rows;
  uint64_t bytes = head.slot_bytes;
  if (!head.batchable || head.rows >= max_rows) return;
  const size_t window = ScanWindow();
  for (size_t i = 1; i < level.size() && i < window && *rows < max_rows; ++i) {
    const PendingRequest& r = *level[i];
    if (!BatchCompatible(head, r)) continue;
    if (*rows + r.rows > max_rows) continue;
    if (bytes + r.slot_bytes > policy_.max_batch_bytes) continue;
    picked.push_back(i);
    *rows += r.rows;
    bytes += r.slot_bytes;
  }
}

size_t ModelQueue::PreferredPrefix(const Requests& level, const std::vector<size_t>& picked) const {
  size_t best = 0;
  int64_t rows = 0;
  for (size_t n = 0; n < picked.size(); ++n) {
    rows += level[picked[n]]->rows;
    if (std::binary_search(policy_.preferred_batch_sizes.begin(),
                           policy_.preferred_batch_sizes.end(), rows)) {
      best = n + 1;
    }
  }
  return best;
}

std::vector<HeldRequest> ModelQueue::TakeBatch(TimePoint now, int64_t row_cap) {
  Level* level_state = HighestLevel();
  if (!level_state) return {};
  Requests* level = &level_state->requests;
  // Whether a batch is due is decided on max_batch_size; the cap only sizes it.
  const int64_t max_rows = std::max<int64_t>(1, policy_.max_batch_size);
  int64_t rows = 0;
  std::vector<size_t>& picked = picked_;
  Candidates(*level, max_rows, &rows, &picked);
  const PendingRequest& head = *level->front();
  bool alone = !head.batchable || head.rows >= max_rows;
  bool full = rows >= max_rows;
  // With fair queueing the head may be a newcomer: the oldest request it could be batched with
  // counts, the same one NextDue waits for (so a due wake-up always finds a batch).
  bool waited = now - OldestInWindow(*level) >= Micros(policy_.max_queue_delay_us);
  // A deadline that waiting for company would miss makes the batch due now.
  bool urgent = !deadlines_.empty() && now >= deadlines_.earliest() - dispatch_lead_;
  // The rest of a due batch that a cap split goes as soon as a worker can take it.
  bool rest_of_split = split_rows_left_ > 0;
  if (!alone && !full && !waited && !urgent && !rest_of_split) {
    size_t prefix = PreferredPrefix(*level, picked);
    if (prefix == 0) return {};
    picked.resize(prefix);
    rows = 0;
    for (size_t index : picked) rows += (*level)[index]->rows;
  }
  const int64_t due_rows = rows;
  const int64_t capped = std::max<int64_t>(1, row_cap);
  if (!alone && capped < rows) Candidates(*level, capped, &rows, &picked);
  split_rows_left_ = rest_of_split ? std::max<int64_t>(0, split_rows_left_ - rows)
                                   : due_rows - rows;
  level_state->virtual_time = std::max(level_state->virtual_time, head.fair_tag);
  // Idle clients whose finish the virtual time passed: swept now and then, so the table stays
  // about as large as the set of recently active clients.
  if (policy_.fair_queueing && ++takes_since_prune_ >= kPruneEvery) {
    takes_since_prune_ = 0;
    PruneShares(*level_state);
  }
  std::vector<HeldRequest> batch;
  batch.reserve(picked.size());
  for (size_t index : picked) {
    HeldRequest& held = (*level)[index];
    Removed(*level_state, *held);
    batch.push_back(std::move(held));
  }
  // Erase from the back so earlier indices stay valid; the head (most batches' only request)
  // by pop_front, which costs a third of erase's general path.
  for (auto it = picked.rbegin(); it != picked.rend(); ++it) {
    if (*it == 0) {
      level->pop_front();
    } else {
      level->erase(level->begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
  return batch;
}

int64_t ModelQueue::RowsAheadOf(const PendingRequest& request) const {
  const size_t index = std::min<size_t>(std::max(0, request.priority), levels_.size() - 1);
  int64_t rows = 0;
  for (size_t i = 0; i < index; ++i) rows += levels_[i].rows;
  const Level& level = levels_[index];
  if (!policy_.fair_queueing) return rows + level.rows;
  const auto share = level.clients.find(request.client);
  const int64_t tag = NextTag(level, share == level.clients.end() ? nullptr : &share->second);
  const auto& queue = level.requests;
  const auto at = std::upper_bound(queue.begin(), queue.end(), tag,
                                   [](int64_t t, const HeldRequest& r) { return t < r->fair_tag; });
  // Counted from the shorter side: a light client's place is near the front, a heavy one's near
  // the back, so either costs a few steps.
  const auto before = static_cast<size_t>(at - queue.begin());
  if (before <= queue.size() - before) {
    for (auto it = queue.begin(); it != at; ++it) rows += (*it)->rows;
    return rows;
  }
  int64_t after = 0;
  for (auto it = at; it != queue.end(); ++it) after += (*it)->rows;
  return rows + level.rows - after;
}

const PendingRequest* ModelQueue::Head() const {
  const Level* level = HighestLevel();
  return level ? level->requests.front().get() : nullptr;
}

HeldRequest ModelQueue::PopHead() {
  Level* level = HighestLevel();
  HeldRequest head = std::move(level->requests.front());
  level->requests.pop_front();
  Removed(*level, *head);
  split_rows_left_ = std::min(split_rows_left_, rows_);  // as TakeExpired: rows that are gone
  return head;
}

std::optional<TimePoint> ModelQueue::NextDue() const {
  const Level* level = HighestLevel();
  if (!level) return std::nullopt;
  TimePoint due = OldestInWindow(level->requests) + Micros(policy_.max_queue_delay_us);
  if (!deadlines_.empty()) due = std::min(due, deadlines_.earliest() - dispatch_lead_);
  return due;
}

std::vector<HeldRequest> ModelQueue::TakeExpired(TimePoint now) {
  std::vector<HeldRequest> expired;
  if (deadlines_.empty() || now < deadlines_.earliest()) return expired;
  for (auto& level : levels_) {
    for (auto it = level.requests.begin(); it != level.requests.end();) {
      if ((*it)->deadline <= now) {
        Removed(level, **it);
        expired.push_back(std::move(*it));
        it = level.requests.erase(it);
      } else {
        ++it;
      }
    }
  }
  split_rows_left_ = std::min(split_rows_left_, rows_);
  return expired;
}

std::optional<TimePoint> ModelQueue::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.earliest();
}

std::vector<HeldRequest> ModelQueue::TakeAll() {
  std::vector<HeldRequest> all;
  for (auto& level : levels_) {
    for (auto& r : level.requests) all.push_back(std::move(r));
    level.requests.clear();
    level.clients.clear();
    level.rows = 0;
  }
  size_ = 0;
  rows_ = 0;
  split_rows_left_ = 0;
  deadlines_.clear();
  return all;
}

}  // namespace torchfarm
