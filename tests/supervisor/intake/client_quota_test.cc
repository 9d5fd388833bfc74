// ClientQuota: one client cannot hold more than its share; others are unaffected; released
// entries disappear beyond a few idle ones, so the map stays as small as the supervisor's request
// count plus ClientQuota::kIdleKept.
#include "supervisor/intake/client_quota.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

TEST(ClientQuotaTest, OneClientIsCappedOthersAreNot) {
  ClientQuota quota(3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(quota.TryAcquire("noisy"));
  EXPECT_FALSE(quota.TryAcquire("noisy"));
  EXPECT_EQ(quota.held("noisy"), 3);
  EXPECT_TRUE(quota.TryAcquire("quiet"));
  quota.Release("noisy");
  EXPECT_TRUE(quota.TryAcquire("noisy"));
  EXPECT_FALSE(quota.TryAcquire("noisy"));
}

TEST(ClientQuotaTest, ReleasedClientsAreForgotten) {
  ClientQuota quota(2);
  for (int i = 0; i < 1000; ++i) {
    std::string client = "c" + std::to_string(i);
    ASSERT_TRUE(quota.TryAcquire(client));
    quota.Release(client);
  }
  EXPECT_EQ(quota.clients(), 0u);
  EXPECT_LE(quota.entries(), ClientQuota::kIdleKept);
  quota.Release("never-seen");  // harmless
  EXPECT_EQ(quota.clients(), 0u);
  EXPECT_LE(quota.entries(), ClientQuota::kIdleKept);
}

TEST(ClientQuotaTest, ClientsThatLeftDoNotHoldTheIdlePlacesForGood) {
  ClientQuota quota(2);
  ASSERT_TRUE(quota.TryAcquire("busy"));  // holds one request throughout
  for (int i = 0; i < 10 * static_cast<int>(ClientQuota::kIdleKept); ++i) {
    const std::string gone = "gone" + std::to_string(i);  // one request, then never again
    ASSERT_TRUE(quota.TryAcquire(gone));
    quota.Release(gone);
    ASSERT_LE(quota.entries(), 1 + ClientQuota::kIdleKept) << "after client " << i;
  }
  EXPECT_EQ(quota.clients(), 1u);
  EXPECT_EQ(quota.held("busy"), 1);
  // A new client's entry is kept while it is idle: the places were freed, not taken for good.
  ASSERT_TRUE(quota.TryAcquire("new"));
  quota.Release("new");
  const size_t with_new = quota.entries();
  ASSERT_TRUE(quota.TryAcquire("new"));
  quota.Release("new");
  EXPECT_EQ(quota.entries(), with_new) << "its idle entry was reused, not erased and remade";
  EXPECT_TRUE(quota.TryAcquire("busy"));
  EXPECT_FALSE(quota.TryAcquire("busy")) << "the busy client's count survived every sweep";
}

TEST(ClientQuotaTest, AnIdleEntryCountsAgainFromZero) {
  ClientQuota quota(2);
  ASSERT_TRUE(quota.TryAcquire("a"));
  quota.Release("a");
  quota.Release("a");  // one release too many: still zero, not negative
  EXPECT_EQ(quota.held("a"), 0);
  EXPECT_EQ(quota.clients(), 0u);
  EXPECT_TRUE(quota.TryAcquire("a"));
  EXPECT_TRUE(quota.TryAcquire("a"));
  EXPECT_FALSE(quota.TryAcquire("a")) << "the kept entry still caps at max_per_client";
  EXPECT_EQ(quota.clients(), 1u);
  quota.Release("a");
  quota.Release("a");
  EXPECT_EQ(quota.clients(), 0u);
}

TEST(ClientQuotaTest, KeyIsTheRoutingIdWithoutCurve) {
  zmq::message_t identity(std::string("\0abc", 4));
  zmq::message_t payload(std::string("{}"));
  EXPECT_EQ(ClientKey(identity, payload, false), std::string("\0abc", 4));
  // No ZAP User-Id on a locally built message: the routing id is the fallback.
  EXPECT_EQ(ClientKey(identity, payload, true), std::string("\0abc", 4));
}

}  // namespace
}  // namespace torchfarm
