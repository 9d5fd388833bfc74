// Rolling replacement as a pure step function (supervisor/models/rollout_policy.h), and the file
// identity that tells a rewritten model file apart (supervisor/models/file_identity.h).
#include "supervisor/models/rollout_policy.h"

#include <unistd.h>

#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "supervisor/models/file_identity.h"

namespace torchfarm {
namespace {

// `n` ready outdated workers, nothing launched yet, min_ready = n - max_unavailable.
RolloutView Begin(int n, int surge, int unavailable) {
  RolloutView v;
  v.limits.max_surge = surge;
  v.limits.max_unavailable = unavailable;
  v.desired = n;
  v.min_ready = n - unavailable;
  v.outdated_ready.assign(static_cast<size_t>(n), true);
  v.not_launched = n;
  return v;
}

// Plays the decisions out: launched workers become ready after one step, retired ones exit after
// one step. Returns the fewest ready workers seen and the most alive; fails the test on a stall.
struct Played {
  int min_ready = 1 << 30;
  int max_alive = 0;
  int steps = 0;
};
Played Play(RolloutView v) {
  Played out;
  for (; out.steps < 1000; ++out.steps) {
    int ready = v.untouched_ready;
    for (bool r : v.outdated_ready) ready += r;
    for (const auto& r : v.replacements) ready += r.ready;
    out.min_ready = std::min(out.min_ready, ready);
    out.max_alive = std::max(out.max_alive, v.untouched_alive +
                                                static_cast<int>(v.outdated_ready.size()) +
                                                v.retired_alive +
                                                static_cast<int>(v.replacements.size()));
    RolloutDecision d = RolloutStep(v);
    EXPECT_FALSE(d.roll_back);
    if (d.done) return out;
    for (auto& r : v.replacements) r.ready = true;  // last step's launches are ready now
    v.retired_alive = 0;                            // last step's retirements have exited
    std::vector<size_t> retire = d.retire;
    std::sort(retire.rbegin(), retire.rend());
    for (size_t k : retire) {
      v.outdated_ready.erase(v.outdated_ready.begin() + static_cast<std::ptrdiff_t>(k));
      ++v.retired;
      ++v.retired_alive;
    }
    for (int n = 0; n < d.launch; ++n) v.replacements.push_back({});
    v.not_launched -= d.launch;
  }
  ADD_FAILURE() << "the rollout did not finish in 1000 steps";
  return out;
}

TEST(RolloutPolicyTest, DefaultSurgeLaunchesOneThenRetiresOneAfterItIsReady) {
  RolloutView v = Begin(2, 1, 0);
  RolloutDecision d = RolloutStep(v);
  EXPECT_EQ(d.launch, 1) << "max_surge 1: one replacement at a time";
  EXPECT_TRUE(d.retire.empty()) << "nobody retires before a replacement is ready";
  EXPECT_FALSE(d.done);
  v.not_launched = 1;
  v.replacements = {{}};
  d = RolloutStep(v);
  EXPECT_EQ(d.launch, 0) << "the surge is used up while the replacement starts";
  EXPECT_TRUE(d.retire.empty());
  v.replacements[0].ready = true;
  d = RolloutStep(v);
  EXPECT_EQ(d.retire.size(), 1u) << "a ready replacement lets one old worker go";
  EXPECT_EQ(d.launch, 0) << "the retired worker's process still holds its memory";
}

TEST(RolloutPolicyTest, AReplacementThatExitsBeforeReadyRollsBack) {
  RolloutView v = Begin(3, 1, 0);
  v.not_launched = 2;
  v.replacements = {{false, true, "model does not load: bad magic"}};
  RolloutDecision d = RolloutStep(v);
  EXPECT_TRUE(d.roll_back);
  EXPECT_EQ(d.reason, "model does not load: bad magic");
  EXPECT_TRUE(d.retire.empty());
  EXPECT_EQ(d.launch, 0);
}

TEST(RolloutPolicyTest, OutdatedWorkersThatAreNotReadyGoFirst) {
  RolloutView v = Begin(3, 1, 0);
  v.outdated_ready = {true, false, true};  // worker 1 crashed and restarts
  v.min_ready = 3;
  v.not_launched = 2;
  v.replacements = {{true, false, ""}};
  RolloutDecision d = RolloutStep(v);
  ASSERT_EQ(d.retire.size(), 1u);
  EXPECT_EQ(d.retire[0], 1u) << "retiring the crashed one costs no ready worker";
}

TEST(RolloutPolicyTest, MaxUnavailableReplacesInPlaceWithoutSurge) {
  RolloutView v = Begin(2, 0, 1);
  RolloutDecision d = RolloutStep(v);
  EXPECT_EQ(d.retire.size(), 1u) << "max_unavailable 1: one old worker goes first";
  EXPECT_EQ(d.launch, 0) << "max_surge 0: its process must exit before a replacement starts";
  Played p = Play(Begin(2, 0, 1));
  EXPECT_EQ(p.max_alive, 2) << "never more workers than before";
  EXPECT_EQ(p.min_ready, 1);
}

TEST(RolloutPolicyTest, DoneOnceEveryOldWorkerIsRetiredAndEveryReplacementReady) {
  RolloutView v;
  v.desired = 1;
  v.replacements = {{true, false, ""}};
  v.retired = 1;
  EXPECT_TRUE(RolloutStep(v).done);
  v.replacements[0].ready = false;  // crashed after it was ready: restarting, not a rollback
  RolloutDecision d = RolloutStep(v);
  EXPECT_FALSE(d.done);
  EXPECT_FALSE(d.roll_back);
}

// Every setting in its documented range (0..64 each, not both 0) over 1..12 workers: the rollout
// finishes, ready workers never drop below before - max_unavailable, and alive workers never
// exceed before + max_surge.
TEST(RolloutPolicyTest, SeededSettingsKeepTheBoundsAndFinish) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int round = 0; round < 500; ++round) {
    const int workers = std::uniform_int_distribution<int>(1, 12)(rng);
    int surge = std::uniform_int_distribution<int>(0, 64)(rng);
    const int unavailable = std::uniform_int_distribution<int>(0, 64)(rng) % (rng() % 2 ? 65 : 3);
    if (surge == 0 && unavailable == 0) surge = 1;
    RolloutView v = Begin(workers, surge, unavailable);
    v.min_ready = std::max(0, workers - unavailable);
    Played p = Play(v);
    ASSERT_GE(p.min_ready, std::max(0, workers - unavailable))
        << "seed " << seed << " workers " << workers << " surge " << surge << " unavailable "
        << unavailable;
    ASSERT_LE(p.max_alive, workers + surge) << "seed " << seed;
  }
}

TEST(FileIdentityTest, AFileRewrittenInPlaceIsAnotherFile) {
  const std::string path = "/tmp/tf-file-identity-" + std::to_string(::getpid());
  std::ofstream(path) << "weights version 1";
  FileIdentity first = ReadFileIdentity(path);
  EXPECT_TRUE(first.error.empty()) << first.error;
  EXPECT_EQ(first.size, 17);
  EXPECT_EQ(ReadFileIdentity(path), first) << "read twice, same identity";
  std::ofstream(path) << "weights version 2";  // same size, same path
  FileIdentity second = ReadFileIdentity(path);
  EXPECT_NE(second.hash, first.hash);
  EXPECT_NE(second, first);
  ::unlink(path.c_str());
  FileIdentity gone = ReadFileIdentity(path);
  EXPECT_EQ(gone.size, -1);
  EXPECT_NE(gone.error.find("cannot read"), std::string::npos) << gone.error;
}

TEST(FileIdentityTest, HashingInPiecesDependsOnEveryByte) {
  std::string bytes(1000, 'x');
  const uint64_t whole = ContentHash(bytes.data(), bytes.size());
  for (size_t i : {0u, 31u, 32u, 500u, 999u}) {
    std::string changed = bytes;
    changed[i] ^= 1;
    EXPECT_NE(ContentHash(changed.data(), changed.size()), whole) << "byte " << i;
  }
}

}  // namespace
}  // namespace torchfarm
