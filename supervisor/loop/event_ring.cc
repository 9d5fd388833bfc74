#include "supervisor/loop/event_ring.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

namespace torchfarm {

namespace {

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Cuts `text` to at most `bytes` without splitting a UTF-8 sequence.
void CutUtf8(std::string* text, size_t bytes) {
  if (text->size() <= bytes) return;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>((*text)[end]) & 0xC0) == 0x80) --end;
  text->resize(end);
  *text += "...";
}

}  // namespace

EventRing::EventRing(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

void EventRing::Add(std::string kind, std::string text, std::string model, int worker) {
  RingEvent event;
  event.seq = next_seq_++;
  event.time_ms = now_ms_ ? now_ms_() : SystemNowMs();
  event.kind = std::move(kind);
  event.model = std::move(model);
  event.worker = worker;
  CutUtf8(&text, kMaxTextBytes);
  event.text = std::move(text);
  if (events_.size() == capacity_) events_.pop_front();
  events_.push_back(std::move(event));
}

nlohmann::json EventRing::ToJson(size_t limit, uint64_t after) const {
  nlohmann::json out = nlohmann::json::array();
  for (auto it = events_.rbegin(); it != events_.rend() && out.size() < limit; ++it) {
    if (it->seq <= after) break;
    nlohmann::json e = {
        {"seq", it->seq}, {"time_ms", it->time_ms}, {"kind", it->kind}, {"text", it->text}};
    if (!it->model.empty()) e["model"] = it->model;
    if (it->worker >= 0) e["worker"] = it->worker;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace torchfarm
