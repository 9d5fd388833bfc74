#include "supervisor/models/rollout_controller.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "supervisor/loop/duty_barrier.h"

namespace torchfarm {

namespace {

int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void RolloutController::Start(ServedModel& model, std::vector<size_t> outdated,
                              std::vector<InstanceConfig> replacements,
                              const ModelConfig& previous_config, const FileIdentity& previous_file,
                              int ready_before) {
  ModelRollout r;
  r.id = next_id_++;
  r.state = RolloutState::kRolling;
  r.total = static_cast<int>(outdated.size());
  r.started_ms = WallMillis();
  r.workers_before = models_.Tally(model).live;
  r.desired = r.workers_before;
  const RolloutConfig& limits = model.config.rollout;
  r.min_ready = std::max(0, std::min(ready_before, r.desired) - limits.max_unavailable);
  r.outdated = std::move(outdated);
  r.not_launched = std::move(replacements);
  r.previous_config = previous_config;
  r.previous_file = previous_file;
  model.rollout = std::move(r);
  TF_LOG(kInfo) << "rollout started" << Kv("model", model.config.name)
                << Kv("rollout", model.rollout.id) << Kv("workers", model.rollout.total)
                << Kv("max_surge", limits.max_surge)
                << Kv("max_unavailable", limits.max_unavailable)
                << Kv("min_ready", model.rollout.min_ready) << Kv("file", model.file.Describe());
  if (events_) {
    events_->Add("rollout",
                 "rollout " + std::to_string(model.rollout.id) +
                     " started: " + std::to_string(model.rollout.total) + " worker(s) to replace",
                 model.config.name);
  }
}

RolloutView RolloutController::ViewOf(ServedModel& model) {
  ModelRollout& r = model.rollout;
  RolloutView view;
  view.limits = model.config.rollout;
  view.desired = r.desired;
  view.min_ready = r.min_ready;
  view.retired = r.replaced();
  view.not_launched = static_cast<int>(r.not_launched.size());
  auto in = [](const std::vector<size_t>& list, size_t i) {
    return std::find(list.begin(), list.end(), i) != list.end();
  };
  for (size_t i : model.slots) {
    const WorkerSlot& slot = *workers_[i];
    if (slot.retiring() || in(r.outdated, i) || in(r.replacements, i)) continue;
    ++view.untouched_alive;
    view.untouched_ready += slot.state() == SlotState::kReady;
  }
  for (size_t i : r.outdated) view.outdated_ready.push_back(workers_[i]->state() == SlotState::kReady);
  for (size_t i : r.retired) view.retired_alive += workers_[i]->pid() > 0;
  for (size_t n = 0; n < r.replacements.size(); ++n) {
    const WorkerSlot& slot = *workers_[r.replacements[n]];
    if (slot.state() == SlotState::kReady) r.replacement_ready[n] = true;
    RolloutView::Replacement replacement;
    replacement.ready = slot.state() == SlotState::kReady;
    // Exited before it was ever ready: backing off, failed, or already relaunched (a later
    // generation) when the restart policy has no backoff.
    const bool exited = slot.state() == SlotState::kBackoff ||
                        slot.state() == SlotState::kFailed ||
                        slot.state() == SlotState::kStopped ||
                        slot.generation() != r.launch_generation[n];
    replacement.failed_start = !r.replacement_ready[n] && exited;
    replacement.reason = "worker " + std::to_string(slot.id()) + " with the new config did not " +
                         "start: " + (slot.failure_reason().empty() ? slot.last_exit()
                                                                    : slot.failure_reason());
    view.replacements.push_back(std::move(replacement));
  }
  return view;
}

void RolloutController::Advance(ServedModel& model) {
  ModelRollout& r = model.rollout;
  if (r.state != RolloutState::kRolling) return;
  if (model.removed) {
    Finish(model, RolloutState::kFailed, "the model was removed by a later reload");
    return;
  }
  const RolloutDecision decision = RolloutStep(ViewOf(model));
  if (decision.roll_back) {
    Finish(model, RolloutState::kFailed, decision.reason);
    return;
  }
  // Retire in descending index order so the earlier indices stay valid while erasing.
  std::vector<size_t> retire = decision.retire;
  std::sort(retire.rbegin(), retire.rend());
  for (size_t k : retire) {
    const size_t i = r.outdated[k];
    WorkerPool::Retire(*workers_[i], "replaced by rollout " + std::to_string(r.id));
    r.retired.push_back(i);
    r.outdated.erase(r.outdated.begin() + static_cast<std::ptrdiff_t>(k));
  }
  const size_t model_index = models_.IndexOf(model);
  for (int n = 0; n < decision.launch && !r.not_launched.empty(); ++n) {
    const size_t index = models_.AddSlot(model_index, r.not_launched.front());
    r.not_launched.erase(r.not_launched.begin());
    WorkerSlot& slot = *workers_[index];
    workers_.Launch(slot);
    r.replacements.push_back(index);
    r.launch_generation.push_back(slot.generation());
    r.replacement_ready.push_back(false);
    TF_LOG(kInfo) << "rollout: replacement launched" << Kv("model", model.config.name)
                  << Kv("rollout", r.id) << Kv("worker", slot.id())
                  << Kv("replaced", r.replaced()) << Kv("total", r.total);
  }
  if (decision.done && r.not_launched.empty()) Finish(model, RolloutState::kDone, "");
}

void RolloutController::Finish(ServedModel& model, RolloutState outcome,
                               const std::string& reason) {
  ModelRollout& r = model.rollout;
  r.state = outcome;
  r.reason = reason;
  r.finished_ms = WallMillis();
  const int64_t took_ms = r.finished_ms - r.started_ms;
  if (outcome == RolloutState::kDone) {
    // The new file's outputs are learned again from the workers now serving it (model_metadata.h).
    model.outputs_learned_for.clear();
    TF_LOG(kInfo) << "rollout done" << Kv("model", model.config.name) << Kv("rollout", r.id)
                  << Kv("replaced", r.replaced()) << Kv("took_ms", took_ms);
  } else {
    // The old workers never stopped serving; only the replacements go. Their restart history is
    // their own: the old workers' is untouched.
    for (size_t i : r.replacements) {
      if (!workers_[i]->retiring())
        WorkerPool::Retire(*workers_[i], "rollout " + std::to_string(r.id) + " rolled back");
    }
    model.config = r.previous_config;
    model.file = r.previous_file;
    model.queue.SetPolicy(BatchingPolicyFor(model.config));
    // The spares were started with the rejected config at the reload: they must not stand in.
    if (!model.removed && !model.spares.empty()) spares_.Replace(model, "rollout rolled back");
    TF_LOG(kError) << "rollout failed; rolled back, the old workers keep serving"
                   << Kv("model", model.config.name) << Kv("rollout", r.id)
                   << Kv("replaced", r.replaced()) << Kv("total", r.total)
                   << Kv("reason", reason);
    // With max_unavailable > 0 some old workers may have been retired already: put them back,
    // with the old config.
    if (!model.removed && models_.Tally(model).live < r.workers_before) {
      models_.ScaleTo(model, r.workers_before);
    }
  }
  r.outdated.clear();
  r.not_launched.clear();
  if (metrics_) metrics_->Rollout(model.config.name, RolloutStateName(outcome));
  if (events_) {
    events_->Add("rollout",
                 "rollout " + std::to_string(r.id) + " " + RolloutStateName(outcome) + ": " +
                     std::to_string(r.replaced()) + "/" + std::to_string(r.total) +
                     " replaced in " + std::to_string(took_ms) + " ms" +
                     (reason.empty() ? std::string() : "; rolled back: " + reason),
                 model.config.name);
  }
}

void RolloutController::AdvanceAll() {
  for (ServedModel& model : models_) {
    // One model's failing step is logged and counted; the others' rollouts go on.
    RunGuarded("rollout", clock_, [&] { Advance(model); });
  }
}

}  // namespace torchfarm
