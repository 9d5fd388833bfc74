// Config reload as a pure diff (supervisor/models/reload_plan.h).
#include "supervisor/models/reload_plan.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

ModelConfig Model(const std::string& name, int count = 1) {
  ModelConfig m;
  m.name = name;
  m.path = "/models/" + name + ".pt";
  m.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
  InstanceConfig instance;
  instance.count = count;
  m.instances = {instance};
  return m;
}

FarmConfig Farm(std::vector<ModelConfig> models) {
  FarmConfig c;
  c.models = std::move(models);
  return c;
}

TEST(ReloadPlanTest, AddsUpdatesAndRemovesModelsByName) {
  FarmConfig running = Farm({Model("a"), Model("b")});
  FarmConfig fresh = Farm({Model("b", 3), Model("c")});
  ReloadPlan plan = PlanReload(running, running.models, fresh, 4);
  ASSERT_EQ(plan.added.size(), 1u);
  EXPECT_EQ(plan.added[0].name, "c");
  ASSERT_EQ(plan.updated.size(), 1u);
  EXPECT_EQ(plan.updated[0].config.name, "b");
  EXPECT_EQ(plan.updated[0].instances.size(), 3u) << "count 3: three workers wanted";
  EXPECT_FALSE(plan.updated[0].replace_workers) << "a count change scales, it replaces nobody";
  ASSERT_EQ(plan.removed.size(), 1u);
  EXPECT_EQ(plan.removed[0].name, "a");
  EXPECT_TRUE(plan.needs_restart.empty());
}

ModelConfig Version(const std::string& name, const std::string& version) {
  ModelConfig m = Model(name);
  m.version = version;
  m.path = "/models/" + name + "/" + version + "/model.pt";
  return m;
}

TEST(ReloadPlanTest, VersionsAreAddedAndRemovedLikeModels) {
  FarmConfig running = Farm({Version("m", "1"), Version("m", "2")});
  FarmConfig fresh = Farm({Version("m", "2"), Version("m", "3")});
  ReloadPlan plan = PlanReload(running, running.models, fresh, 4);
  ASSERT_EQ(plan.added.size(), 1u);
  EXPECT_EQ(plan.added[0].version, "3");
  ASSERT_EQ(plan.updated.size(), 1u);
  EXPECT_EQ(plan.updated[0].config.version, "2");
  EXPECT_FALSE(plan.updated[0].replace_workers) << "version 2 did not change";
  ASSERT_EQ(plan.removed.size(), 1u);
  EXPECT_EQ(plan.removed[0].name, "m");
  EXPECT_EQ(plan.removed[0].version, "1");
}

TEST(ReloadPlanTest, ChangesNoRunningWorkerCanPickUpReplaceTheWorkers) {
  FarmConfig running = Farm({Model("m")});
  auto replaced = [&](auto change) {
    FarmConfig fresh = running;
    change(fresh.models[0]);
    return PlanReload(running, running.models, fresh, 4).updated.at(0).replace_workers;
  };
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.path = "/models/other.pt"; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.slot_bytes *= 2; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.ring_slots = 8; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.max_inflight_per_worker = 4; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.inputs[0].shape = {-1, 8}; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.format = "torchscript"; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.optimize = "inference"; }));
  EXPECT_TRUE(replaced([](ModelConfig& m) { m.warmup = {{TensorSpec{DType::kFloat32, {8, 4}}}}; }));
  EXPECT_FALSE(replaced([](ModelConfig& m) { m.max_batch_size = 32; })) << "batching is live";
  EXPECT_FALSE(replaced([](ModelConfig& m) { m.max_queue_delay_us = 500; }));
  EXPECT_FALSE(replaced([](ModelConfig& m) { m.max_queue_wait_ms = 5; }));
}

TEST(ReloadPlanTest, RingOrInputChangesReplaceAllWorkersAtOnceOthersOneByOne) {
  FarmConfig running = Farm({Model("m")});
  auto at_once = [&](auto change) {
    FarmConfig fresh = running;
    change(fresh.models[0]);
    return PlanReload(running, running.models, fresh, 4).updated.at(0).replace_at_once;
  };
  EXPECT_TRUE(at_once([](ModelConfig& m) { m.slot_bytes *= 2; }));
  EXPECT_TRUE(at_once([](ModelConfig& m) { m.ring_slots = 8; }));
  EXPECT_TRUE(at_once([](ModelConfig& m) { m.max_inflight_per_worker = 4; }));
  EXPECT_TRUE(at_once([](ModelConfig& m) { m.inputs[0].shape = {-1, 8}; }));
  EXPECT_FALSE(at_once([](ModelConfig& m) { m.path = "/models/v2.pt"; })) << "rolled one by one";
  EXPECT_FALSE(at_once([](ModelConfig& m) { m.warmup = {{TensorSpec{DType::kFloat32, {8, 4}}}}; }));
}

TEST(ReloadPlanTest, InstanceSettingsAWorkerIsLaunchedWithReplaceIt) {
  ModelUpdate update;
  InstanceConfig current;
  auto differs = [&](auto change) {
    InstanceConfig wanted = current;
    change(wanted);
    return WorkerNeedsReplacing(update, current, wanted);
  };
  EXPECT_FALSE(differs([](InstanceConfig&) {}));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.threads = 2; }));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.precision = "bf16"; }));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.streams = 2; }));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.device = "cuda:0"; }));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.idle_spin_us = 50; }));
  EXPECT_TRUE(differs([](InstanceConfig& i) { i.cores = {0}; }));
  update.replace_workers = true;
  EXPECT_TRUE(differs([](InstanceConfig&) {})) << "a model-level change replaces every worker";
}

// Same path string, another file (new weights written in place): the workers are replaced, one
// by one (it is no ring change); an unchanged identity replaces nobody.
TEST(ReloadPlanTest, AModelFileRewrittenUnderTheSamePathReplacesTheWorkers) {
  FarmConfig running = Farm({Model("m"), Model("n")});
  FileIdentity before;
  before.path = "/models/m.pt";
  before.size = 100;
  before.mtime_ns = 1;
  before.hash = 0xABC;
  ModelFiles files;
  const std::string m = ModelFiles::Key(running.models[0]);
  const std::string n = ModelFiles::Key(running.models[1]);
  files.served = {{m, before}, {n, before}};
  FileIdentity rewritten = before;
  rewritten.hash = 0xDEF;
  rewritten.mtime_ns = 2;
  files.fresh = {{m, rewritten}, {n, before}};
  ReloadPlan plan = PlanReload(running, running.models, running, 4, files);
  ASSERT_EQ(plan.updated.size(), 2u);
  EXPECT_TRUE(plan.updated[0].file_changed);
  EXPECT_TRUE(plan.updated[0].replace_workers);
  EXPECT_FALSE(plan.updated[0].replace_at_once) << "a new file rolls, one worker at a time";
  EXPECT_FALSE(plan.updated[1].file_changed);
  EXPECT_FALSE(plan.updated[1].replace_workers);

  FileIdentity unreadable = before;
  unreadable.size = -1;
  unreadable.error = "cannot read /models/m.pt: No such file or directory";
  files.fresh[m] = unreadable;
  EXPECT_TRUE(PlanReload(running, running.models, running, 4, files).updated[0].replace_workers)
      << "a vanished file is a change: the replacement fails and rolls back";
  files.fresh.erase(m);
  EXPECT_FALSE(PlanReload(running, running.models, running, 4, files).updated[0].replace_workers)
      << "without an identity, the path string decides";
  EXPECT_FALSE(PlanReload(running, running.models, running, 4).updated[0].file_changed);
}

TEST(ReloadPlanTest, ARolloutSettingChangeAloneReplacesNobody) {
  FarmConfig running = Farm({Model("m")});
  FarmConfig fresh = running;
  fresh.models[0].rollout.max_surge = 3;
  EXPECT_FALSE(PlanReload(running, running.models, fresh, 4).updated[0].replace_workers);
}

TEST(ReloadPlanTest, KeysOnlyARestartAppliesAreNamed) {
  FarmConfig running = Farm({Model("m")});
  FarmConfig fresh = running;
  fresh.endpoint = "tcp://127.0.0.1:6000";
  fresh.metrics_endpoint = "127.0.0.1:9464";
  ReloadPlan plan = PlanReload(running, running.models, fresh, 4);
  EXPECT_EQ(plan.needs_restart, std::vector<std::string>({"endpoint", "metrics_endpoint"}));
}

// A reload cannot apply front-end settings (the front ends start once): each changed one is
// named so the admin reply and the log can say so instead of dropping it silently.
TEST(ReloadPlanTest, FrontendChangesNeedingRestartNameEachChangedKeyInFileOrder) {
  FrontendConfig running;
  running.http_endpoint = "127.0.0.1:8000";
  EXPECT_TRUE(FrontendChangesNeedingRestart(running, running).empty());
  FrontendConfig fresh = running;
  fresh.client_id_header = "x-tenant";
  EXPECT_EQ(FrontendChangesNeedingRestart(running, fresh),
            std::vector<std::string>{"frontend.client_id_header"});
  fresh.http_endpoint = "127.0.0.1:8001";
  fresh.threads = 4;
  fresh.tls.key_file = "/k.pem";
  fresh.max_inflight_body_bytes = 1;
  EXPECT_EQ(FrontendChangesNeedingRestart(running, fresh),
            (std::vector<std::string>{"http_endpoint", "frontend.threads",
                                      "frontend.max_inflight_body_bytes", "frontend.tls",
                                      "frontend.client_id_header"}));
  // Every field counts: a default FrontendConfig against one with each field changed.
  FrontendConfig all;
  all.http_endpoint = "a:1";
  all.grpc_endpoint = "a:2";
  all.threads = 2;
  all.max_connections = 2;
  all.idle_timeout_ms = 2;
  all.request_timeout_ms = 2;
  all.max_header_bytes = 2;
  all.max_body_bytes = 2;
  all.max_inflight_body_bytes = 2;
  all.tls.cert_file = "c";
  all.dashboard = false;
  all.model_control = true;
  all.log_control = true;
  all.system_shared_memory = true;
  all.client_id_header = "x";
  EXPECT_EQ(FrontendChangesNeedingRestart(FrontendConfig{}, all).size(), 15u);
}

// The front ends start once: a reload that changes one of their settings names it (the admin
// answer and the log say "... changed: a restart applies them") instead of dropping it silently.
TEST(ReloadPlanTest, FrontEndSettingsAreNamedAsNeedingARestart) {
  FarmConfig running = Farm({Model("m")});
  running.frontend.http_endpoint = "127.0.0.1:8000";
  FarmConfig fresh = running;
  fresh.frontend.client_id_header = "x-tenant";
  fresh.frontend.max_body_bytes = 1 << 20;
  ReloadPlan plan = PlanReload(running, running.models, fresh, 4);
  EXPECT_EQ(plan.needs_restart,
            std::vector<std::string>({"frontend.max_body_bytes", "frontend.client_id_header"}));
  EXPECT_TRUE(PlanReload(running, running.models, running, 4).needs_restart.empty());
}

}  // namespace
}  // namespace torchfarm
