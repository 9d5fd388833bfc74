// RedactPaths (supervisor/admin/farm_status.h): what the dashboard shows of a cause or a reason
// keeps a file's name, never the folders it lives in.
#include <gtest/gtest.h>

#include "supervisor/admin/farm_status.h"

namespace torchfarm {
namespace {

TEST(RedactPathsTest, AbsolutePathsKeepOnlyTheirLastComponent) {
  EXPECT_EQ(RedactPaths("cannot load /srv/models/secret/mlp.pt: bad magic"),
            "cannot load .../mlp.pt: bad magic");
  EXPECT_EQ(RedactPaths("model file '/home/ops/m.pt' changed since version 1 was loaded"),
            "model file '.../m.pt' changed since version 1 was loaded");
  EXPECT_EQ(RedactPaths("path=/etc/torchfarm/farm.json."), "path=.../farm.json.");
  EXPECT_EQ(RedactPaths("bound ipc:///tmp/torchfarm/admin.sock"), "bound ipc:.../admin.sock");
  EXPECT_EQ(RedactPaths("(/a/b) [/c/d]"), "(.../b) [.../d]");
}

TEST(RedactPathsTest, TextWithoutPathsIsUnchanged) {
  for (const std::string& text :
       {std::string("killed by SIGKILL"), std::string("exit code 1"), std::string("1/2 replaced"),
        std::string("a / b"), std::string("/"), std::string("top-level /name only"),
        std::string("")}) {
    EXPECT_EQ(RedactPaths(text), text);
  }
}

}  // namespace
}  // namespace torchfarm
