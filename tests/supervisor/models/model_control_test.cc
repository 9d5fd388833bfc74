// The models' collaborators without processes (issue 28): ModelTable's counts, SpareManager's
// promotions, RolloutController's surge, retire and rollback, and ModelControl's load, unload,
// scale and retirement, on a WorkerPool whose launcher forks nothing
// (tests/supervisor/fake_worker.h) and a fake clock. Slots become ready by MakeReady and die by
// OnExit with a real wait status, as the loop would see them.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>

#include "supervisor/models/model_control.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm {
namespace {

using testing::FakeWorkerLauncher;
using testing::MakeReady;

constexpr int kKilled = SIGKILL;  // a wait status: killed by SIGKILL

class ModelControlTest : public ::testing::Test {
 protected:
  ModelControlTest() {
    LaunchContext launch;
    launch.worker_binary = "/bin/true";
    launch.segment_prefix = testing::UniqueSegmentPrefix();
    launch.launcher = &launcher_;
    workers_.Configure(launch, policy_);
    model_file_ = "/tmp/torchfarm-model-control-test-" + std::to_string(::getpid()) + ".pt";
    std::ofstream(model_file_) << "not a real model, only bytes to identify";
  }
  ~ModelControlTest() override { ::unlink(model_file_.c_str()); }

  ModelConfig Model(const std::string& name, int count, int spares = 0) {
    ModelConfig m = testing::SmallModel(name, count, spares);
    m.path = model_file_;  // a real file: load and reload read its identity
    return m;
  }
  // Adds and launches a model as Start does; every slot ready unless `ready` is false.
  ServedModel& AddRunning(const ModelConfig& config, bool ready = true) {
    const size_t first = workers_.size();
    const size_t index = control_.Add(config, ReadFileIdentity(config.path));
    models_.RebuildServed();
    workers_.LaunchDue();  // a fresh turn's launch budget
    for (size_t i = first; i < workers_.size(); ++i) {
      workers_.Launch(*workers_[i]);
      if (ready) MakeReady(*workers_[i], clock_.Now());
    }
    return models_[index];
  }
  void Kill(WorkerSlot& slot) {
    slot.OnExit(kKilled, clock_.Now(), workers_.policy(), /*shutting_down=*/false);
  }
  int LiveCount(const ServedModel& model) const { return models_.Tally(model).live; }

  FakeTimeSource clock_;
  RestartPolicy policy_;
  FakeWorkerLauncher launcher_;
  WorkerPool workers_{clock_};
  FarmState farm_;
  ModelTable models_{workers_, clock_};
  SpareManager spares_{models_, workers_, farm_};
  RolloutController rollouts_{models_, workers_, spares_, clock_};
  ModelControl control_{models_, workers_, spares_, rollouts_, farm_};
  std::string model_file_;
};

TEST_F(ModelControlTest, TheTableCountsEveryModelTheSameWay) {
  ServedModel& mlp = AddRunning(Model("mlp", 3, /*spares=*/1), /*ready=*/false);
  MakeReady(*workers_[mlp.slots[0]], clock_.Now());
  MakeReady(*workers_[mlp.spares[0]], clock_.Now());
  Kill(*workers_[mlp.slots[2]]);  // restarting: may serve soon
  const ModelWorkerTally tally = models_.Tally(mlp);
  EXPECT_EQ(tally.ready, 1);
  EXPECT_EQ(tally.live, 3);
  EXPECT_EQ(tally.starting, 2);  // one starting, one backing off
  EXPECT_EQ(tally.spares_ready, 1);
  EXPECT_NE(tally.failure_reason.find("killed by SIGKILL"), std::string::npos)
      << tally.failure_reason;
  EXPECT_TRUE(models_.Available(mlp));
  EXPECT_EQ(models_.Find("mlp"), &mlp);
  EXPECT_EQ(models_.Find("mlp", "1"), &mlp);
  EXPECT_EQ(models_.Find("mlp", "2"), nullptr);
  EXPECT_EQ(models_.Find("resnet"), nullptr);
  EXPECT_EQ(models_.DefaultVersion("mlp"), "1");
}

TEST_F(ModelControlTest, AReadySpareTakesTheDeadWorkersPlace) {
  ServedModel& mlp = AddRunning(Model("mlp", 2, /*spares=*/1));
  const size_t dead = mlp.slots[1], spare = mlp.spares[0];
  ASSERT_TRUE(workers_[spare]->spare());
  Kill(*workers_[dead]);
  spares_.Promote(mlp, clock_.Now());
  EXPECT_EQ(mlp.slots[1], spare) << "the spare serves in the dead worker's place";
  EXPECT_EQ(mlp.spares[0], dead) << "the dead worker's slot restarts as the spare";
  EXPECT_FALSE(workers_[spare]->spare());
  EXPECT_TRUE(workers_[dead]->spare());
  EXPECT_EQ(mlp.spare_promotions, 1u);
  EXPECT_EQ(workers_[spare]->promotions(), 1);
  // Nothing more to promote: both serving places are ready again.
  spares_.Promote(mlp, clock_.Now());
  EXPECT_EQ(mlp.spare_promotions, 1u);
}

TEST_F(ModelControlTest, NoPromotionWhileWorkersStopOrARolloutOwnsTheSlots) {
  ServedModel& mlp = AddRunning(Model("mlp", 1, /*spares=*/1));
  Kill(*workers_[mlp.slots[0]]);
  farm_.phase = FarmPhase::kStoppingWorkers;
  spares_.Promote(mlp, clock_.Now());
  EXPECT_EQ(mlp.spare_promotions, 0u);
  farm_.phase = FarmPhase::kServing;
  mlp.rollout.state = RolloutState::kRolling;
  spares_.Promote(mlp, clock_.Now());
  EXPECT_EQ(mlp.spare_promotions, 0u);
  mlp.rollout.state = RolloutState::kNone;
  spares_.Promote(mlp, clock_.Now());
  EXPECT_EQ(mlp.spare_promotions, 1u);
}

TEST_F(ModelControlTest, FewerSparesAfterAReloadRetireTheYoungestAndKeepTheWarmOnes) {
  ServedModel& mlp = AddRunning(Model("mlp", 1, /*spares=*/2));
  const std::vector<size_t> before = mlp.spares;
  const ModelConfig previous = mlp.config;
  mlp.config = Model("mlp", 1, /*spares=*/1);
  ModelUpdate update;
  update.config = mlp.config;
  spares_.Reconcile(mlp, previous, update);
  EXPECT_FALSE(workers_[before[0]]->retiring());
  EXPECT_TRUE(workers_[before[1]]->retiring());
  // More again: one new spare is launched, the warm one stays.
  const size_t launches = launcher_.launches().size();
  const ModelConfig one = mlp.config;
  mlp.config = Model("mlp", 1, /*spares=*/2);
  update.config = mlp.config;
  spares_.Reconcile(mlp, one, update);
  EXPECT_EQ(launcher_.launches().size(), launches + 1);
  EXPECT_FALSE(workers_[before[0]]->retiring());
}

TEST_F(ModelControlTest, ARolloutSurgesRetiresOnlyOnceAReplacementIsReadyAndFinishes) {
  ServedModel& mlp = AddRunning(Model("mlp", 2));
  const std::vector<size_t> old = mlp.slots;
  const size_t launches = launcher_.launches().size();
  ModelConfig next = mlp.config;
  next.path = model_file_ + ".new";
  const ModelConfig previous = mlp.config;
  mlp.config = next;
  rollouts_.Start(mlp, old, {InstanceConfig{}, InstanceConfig{}}, previous, mlp.file,
                  /*ready_before=*/2);
  ASSERT_EQ(mlp.rollout.state, RolloutState::kRolling);
  workers_.LaunchDue();
  rollouts_.AdvanceAll();
  ASSERT_EQ(launcher_.launches().size(), launches + 1) << "max_surge 1: one replacement at a time";
  EXPECT_EQ(launcher_.last().spec.args.model_path, next.path);
  EXPECT_FALSE(workers_[old[0]]->retiring());
  EXPECT_FALSE(workers_[old[1]]->retiring()) << "nothing retires before a replacement is ready";
  const size_t first_new = mlp.rollout.replacements[0];
  MakeReady(*workers_[first_new], clock_.Now());
  for (int turn = 0; turn < 4; ++turn) {
    workers_.LaunchDue();
    rollouts_.AdvanceAll();
    for (size_t i : mlp.rollout.replacements) {
      if (workers_[i]->state() == SlotState::kStarting) MakeReady(*workers_[i], clock_.Now());
    }
    // A retired worker finishes its batches, is told to stop and exits cleanly (WorkerEvents).
    for (size_t i : old) {
      WorkerSlot& slot = *workers_[i];
      if (slot.retiring() && slot.TakeStopRequest(clock_.Now())) {
        slot.OnExit(0, clock_.Now(), workers_.policy(), false);
        EXPECT_EQ(slot.state(), SlotState::kStopped);
      }
    }
  }
  EXPECT_EQ(mlp.rollout.state, RolloutState::kDone) << mlp.rollout.reason;
  EXPECT_EQ(mlp.rollout.replaced(), 2);
  EXPECT_TRUE(workers_[old[0]]->retiring());
  EXPECT_TRUE(workers_[old[1]]->retiring());
  EXPECT_EQ(launcher_.launches().size(), launches + 2);
  EXPECT_EQ(models_.Tally(mlp).ready, 2);
}

TEST_F(ModelControlTest, AReplacementThatDoesNotStartRollsBackAndTheOldWorkersKeepServing) {
  ServedModel& mlp = AddRunning(Model("mlp", 2));
  const std::vector<size_t> old = mlp.slots;
  const ModelConfig previous = mlp.config;
  ModelConfig next = mlp.config;
  next.path = model_file_ + ".broken";
  mlp.config = next;
  rollouts_.Start(mlp, old, {InstanceConfig{}, InstanceConfig{}}, previous, mlp.file, 2);
  workers_.LaunchDue();
  rollouts_.AdvanceAll();
  const size_t replacement = mlp.rollout.replacements.at(0);
  // The new model does not load: the worker reports it and exits 1 before it was ever ready.
  workers_[replacement]->OnFatalError("model does not load", "model", clock_.Now());
  workers_[replacement]->OnExit(1 << 8, clock_.Now(), workers_.policy(), false);
  rollouts_.AdvanceAll();
  EXPECT_EQ(mlp.rollout.state, RolloutState::kFailed);
  EXPECT_NE(mlp.rollout.reason.find("model does not load"), std::string::npos)
      << mlp.rollout.reason;
  EXPECT_EQ(mlp.config.path, previous.path) << "the old config is back";
  EXPECT_TRUE(workers_[replacement]->retiring());
  EXPECT_FALSE(workers_[old[0]]->retiring());
  EXPECT_FALSE(workers_[old[1]]->retiring());
  EXPECT_EQ(models_.Tally(mlp).ready, 2);
}

TEST_F(ModelControlTest, ScaleAddsAndRetiresTheYoungestAndChecksWhatItIsAsked) {
  ServedModel& mlp = AddRunning(Model("mlp", 2));
  const size_t launches = launcher_.launches().size();
  workers_.LaunchDue();
  ScaleResult up = control_.Scale("mlp", 4);
  ASSERT_TRUE(up.ok()) << up.Describe();
  EXPECT_EQ(up.from, 2);
  EXPECT_EQ(up.to, 4);
  EXPECT_EQ(up.Describe(), "model 'mlp': 2 -> 4 worker(s)");
  EXPECT_EQ(launcher_.launches().size(), launches + 2);
  EXPECT_EQ(LiveCount(mlp), 4);
  const std::vector<size_t> slots = mlp.slots;
  ScaleResult down = control_.Scale("mlp", 1);
  ASSERT_TRUE(down.ok());
  EXPECT_FALSE(workers_[slots[0]]->retiring()) << "the oldest, warm worker stays";
  for (size_t k = 1; k < slots.size(); ++k) EXPECT_TRUE(workers_[slots[k]]->retiring()) << k;
  EXPECT_EQ(LiveCount(mlp), 1);

  EXPECT_EQ(control_.Scale("mlp", 1025).status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control_.Scale("mlp", -1).status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control_.Scale("nope", 1).status.code(), StatusCode::kNotFound);
  EXPECT_EQ(control_.Scale("mlp", 2, "7").status.message(), "no model 'mlp' version '7'");
  mlp.rollout.state = RolloutState::kRolling;
  EXPECT_EQ(control_.Scale("mlp", 2).status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(LiveCount(mlp), 1);
}

TEST_F(ModelControlTest, LoadUnloadAndRetireIdleLeaveNothingServing) {
  ModelConfig config = Model("mlp", 2, /*spares=*/1);
  workers_.LaunchDue();
  const LoadResult loaded = control_.Load("mlp", {config});
  ASSERT_TRUE(loaded.status.ok()) << loaded.status.message();
  EXPECT_EQ(loaded.versions, 1u);
  EXPECT_EQ(loaded.workers, 3u) << "two serving workers and a spare";
  EXPECT_EQ(launcher_.launches().size(), 3u);
  ASSERT_NE(models_.Find("mlp"), nullptr);
  EXPECT_EQ(control_.Load("mlp", {config}).status.message(),
            "model 'mlp' is already loaded; use reload to change it");
  ModelConfig missing = Model("other", 1);
  missing.path = "/nonexistent/other.pt";
  const LoadResult refused = control_.Load("other", {missing});
  EXPECT_FALSE(refused.status.ok());
  EXPECT_NE(refused.status.message().find("/nonexistent/other.pt"), std::string::npos)
      << refused.status.message();
  EXPECT_EQ(models_.Find("other"), nullptr) << "a refused load registers nothing";

  ServedModel& mlp = *models_.Find("mlp");
  PendingRequest queued;
  queued.rows = 1;
  mlp.queue.Push(queued);  // one request still queued: served before the workers go
  const UnloadResult unloaded = control_.Unload("mlp");
  ASSERT_TRUE(unloaded.status.ok());
  EXPECT_EQ(unloaded.queued, 1u);
  EXPECT_EQ(unloaded.workers, 2u);
  EXPECT_EQ(models_.Find("mlp"), nullptr);
  EXPECT_TRUE(models_.served_configs().empty());
  EXPECT_EQ(control_.Unload("mlp").status.message(), "no model 'mlp' is loaded (loaded: none)");
  control_.RetireIdle();
  for (size_t i : mlp.slots) EXPECT_FALSE(workers_[i]->retiring()) << "its queue is not empty";
  for (size_t i : mlp.spares) EXPECT_TRUE(workers_[i]->retiring()) << "spares go at once";
  mlp.queue.TakeAll();
  control_.RetireIdle();
  for (size_t i : mlp.slots) EXPECT_TRUE(workers_[i]->retiring());
  std::string message;
  EXPECT_TRUE(models_.BeingUnloaded(NotFound("model 'mlp' is not served"), &message));
  EXPECT_EQ(message, "model 'mlp' is being unloaded");

  farm_.phase = FarmPhase::kDraining;
  EXPECT_EQ(control_.Load("mlp", {config}).status.message(),
            "the farm is draining; it loads no model");
}

TEST_F(ModelControlTest, ADroppedVersionGoesOnceAnotherVersionIsReady) {
  ModelConfig v1 = Model("mlp", 1);
  ModelConfig v2 = Model("mlp", 1);
  v2.version = "2";
  AddRunning(v1);
  models_[0].retire_when_replaced = true;
  ServedModel& second = AddRunning(v2, /*ready=*/false);
  EXPECT_FALSE(control_.RetireReplacedVersions()) << "version 2 is not ready yet";
  EXPECT_FALSE(models_[0].removed);
  MakeReady(*workers_[second.slots[0]], clock_.Now());
  EXPECT_TRUE(control_.RetireReplacedVersions());
  EXPECT_TRUE(models_[0].removed);
  EXPECT_EQ(models_.ServedVersions("mlp"), std::vector<std::string>{"2"});
}

// Issue 35, uptime hygiene: an unloaded model and its stopped slots are erased, not only marked;
// the models and slots that stay are renumbered and keep serving.
TEST_F(ModelControlTest, UnloadedModelsAndTheirStoppedSlotsAreErasedAndTheRestRenumbered) {
  std::vector<int> ids;
  for (int cycle = 0; cycle < 3; ++cycle) {
    workers_.LaunchDue();
    ASSERT_TRUE(control_.Load("gone", {Model("gone", 2, /*spares=*/1)}).status.ok());
    if (cycle == 0) AddRunning(Model("keep", 1));  // after "gone": it moves down when gone goes
    for (const auto& slot : workers_) {
      if (slot->state() == SlotState::kStarting) MakeReady(*slot, clock_.Now());
      ids.push_back(slot->id());
    }
    ASSERT_TRUE(control_.Unload("gone").status.ok());
    control_.RetireIdle();
    for (const auto& slot : workers_) {
      if (slot->retiring() && slot->pid() > 0) Kill(*slot);  // the stop's exit
    }
    control_.RetireIdle();
    EXPECT_GT(control_.ReclaimRemoved(), 0u) << cycle;
    ASSERT_EQ(models_.size(), 1u) << cycle;
    ASSERT_EQ(workers_.size(), 1u) << cycle << ": only keep's worker is left";
    EXPECT_EQ(control_.ReclaimRemoved(), 0u) << "nothing more to free";
  }
  ServedModel* keep = models_.Find("keep");
  ASSERT_NE(keep, nullptr);
  ASSERT_EQ(keep->slots, std::vector<size_t>{0});
  EXPECT_EQ(workers_[0]->model_index(), 0u);
  EXPECT_EQ(workers_[0]->model_name(), "keep");
  EXPECT_EQ(models_.Tally(*keep).ready, 1);
  std::sort(ids.begin(), ids.end());
  const int keep_id = workers_[0]->id();
  ids.erase(std::remove(ids.begin(), ids.end(), keep_id), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end())
      << "a worker id is never given twice";
  EXPECT_TRUE(workers_.RequestRestart(keep_id, "test").ok()) << "found by id, not position";
}

TEST_F(ModelControlTest, ALoadWhoseEveryWorkerFailsIsUnregisteredAndReported) {
  policy_.max_restarts = 0;  // the first start failure fails the slot
  workers_.set_policy(policy_);
  AddRunning(Model("keep", 1));
  workers_.LaunchDue();
  ASSERT_TRUE(control_.Load("bad", {Model("bad", 1)}).status.ok());
  ServedModel* bad = models_.Find("bad");
  ASSERT_NE(bad, nullptr);
  WorkerSlot& slot = *workers_[bad->slots[0]];
  control_.DropFailedLoads();
  EXPECT_NE(models_.Find("bad"), nullptr) << "still starting";
  slot.OnFatalError("cannot load model: not a TorchScript archive", "model", clock_.Now());
  slot.OnExit(1 << 8, clock_.Now(), workers_.policy(), /*shutting_down=*/false);
  ASSERT_EQ(slot.state(), SlotState::kFailed);
  control_.DropFailedLoads();
  EXPECT_EQ(models_.Find("bad"), nullptr) << "unregistered: readiness no longer waits for it";
  EXPECT_EQ(models_.served_configs().size(), 1u);
  ASSERT_EQ(models_.failed_loads().size(), 1u);
  EXPECT_EQ(models_.failed_loads()[0].name, "bad");
  EXPECT_NE(models_.failed_loads()[0].reason.find("not a TorchScript archive"), std::string::npos);
  control_.RetireIdle();
  control_.ReclaimRemoved();
  EXPECT_EQ(models_.size(), 1u);
  EXPECT_EQ(workers_.size(), 1u);
  // Loaded again (fixed): the old failure is forgotten.
  workers_.LaunchDue();
  ASSERT_TRUE(control_.Load("bad", {Model("bad", 1)}).status.ok());
  EXPECT_TRUE(models_.failed_loads().empty());
}

// Issue 35, a version is one set of bytes: a worker of a version whose file changed since it was
// loaded is not started; the other worker keeps serving the loaded bytes.
TEST_F(ModelControlTest, AWorkerIsNotStartedOnAModelFileThatChangedSinceItsVersionWasLoaded) {
  workers_.set_launch_check(
      [this](const WorkerSlot& slot) { return models_.CheckModelFile(slot); });
  ServedModel& model = AddRunning(Model("m", 2));
  WorkerSlot& restarted = *workers_[model.slots[0]];
  const std::string original = "not a real model, only bytes to identify";
  {
    std::ofstream(model_file_ + ".new") << "other bytes: another model altogether";
    ASSERT_EQ(::rename((model_file_ + ".new").c_str(), model_file_.c_str()), 0);
  }
  Kill(restarted);
  clock_.Advance(Millis(60'000));
  workers_.LaunchDue();
  EXPECT_EQ(restarted.state(), SlotState::kFailed);
  EXPECT_NE(restarted.failure_reason().find(
                "model file changed since version 1 was loaded; reload to serve it"),
            std::string::npos)
      << restarted.failure_reason();
  EXPECT_EQ(workers_[model.slots[1]]->state(), SlotState::kReady) << "the other one serves on";
  // The same bytes back (a new mtime, the same hash): started again after the cool-down.
  std::ofstream(model_file_, std::ios::trunc) << original;
  clock_.Advance(workers_.policy().failed_retry + Millis(1));
  workers_.LaunchDue();
  EXPECT_EQ(restarted.state(), SlotState::kStarting);
}

// The same size and the old mtime back (`cp -p` over the file, which writes in place): the
// inode's change time still moves, so the bytes are read and the worker is not started on them.
TEST_F(ModelControlTest, AFileRewrittenInPlaceWithItsSizeAndMtimeKeptIsStillCaught) {
  workers_.set_launch_check(
      [this](const WorkerSlot& slot) { return models_.CheckModelFile(slot); });
  ServedModel& model = AddRunning(Model("m", 2));
  WorkerSlot& restarted = *workers_[model.slots[0]];
  struct stat before {};
  ASSERT_EQ(::stat(model_file_.c_str(), &before), 0);
  std::string other(static_cast<size_t>(before.st_size), 'x');  // same size, other bytes
  { std::ofstream(model_file_, std::ios::trunc | std::ios::binary) << other; }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, model_file_.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(model_file_.c_str(), &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_ino, before.st_ino) << "written in place";
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ASSERT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  Kill(restarted);
  clock_.Advance(Millis(60'000));
  workers_.LaunchDue();
  EXPECT_EQ(restarted.state(), SlotState::kFailed);
  EXPECT_NE(restarted.failure_reason().find("model file changed since version 1 was loaded"),
            std::string::npos)
      << restarted.failure_reason();
  EXPECT_EQ(workers_[model.slots[1]]->state(), SlotState::kReady) << "the other one serves on";
}

}  // namespace
}  // namespace torchfarm
