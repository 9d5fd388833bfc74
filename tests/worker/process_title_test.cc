// worker/process_title.h on argv-like memory: the words land over the argument strings, within
// their room, and nothing beyond it is touched.
#include "worker/process_title.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace torchfarm::worker {
namespace {

// "torchfarm-zygote\0--zygote\03\0" followed by a guard, the way the kernel lays out argv.
struct FakeArgv {
  std::vector<char> memory;
  std::vector<char*> argv;
  explicit FakeArgv(const std::vector<std::string>& args) {
    for (const auto& a : args) memory.insert(memory.end(), a.c_str(), a.c_str() + a.size() + 1);
    memory.insert(memory.end(), {'G', 'U', 'A', 'R', 'D'});
    size_t at = 0;
    for (const auto& a : args) {
      argv.push_back(memory.data() + at);
      at += a.size() + 1;
    }
    argv.push_back(nullptr);
  }
  // The argument area as /proc/PID/cmdline reads it: NUL-separated words, empty ones dropped.
  std::vector<std::string> Words(size_t room) const {
    std::vector<std::string> words;
    std::string word;
    for (size_t i = 0; i < room; ++i) {
      if (memory[i] != '\0') {
        word += memory[i];
      } else if (!word.empty()) {
        words.push_back(word);
        word.clear();
      }
    }
    return words;
  }
  std::string Guard(size_t room) const { return std::string(memory.data() + room, 5); }
};

TEST(ProcessTitle, AForkedWorkerNamesItselfOverTheZygotesCommandLine) {
  FakeArgv a({"torchfarm-zygote", "--zygote", "3"});
  const size_t room = RewriteCommandLine(3, a.argv.data(), {"torchfarm-worker", "worker=12"});
  EXPECT_EQ(room, 28u);
  EXPECT_EQ(a.Words(room), (std::vector<std::string>{"torchfarm-worker", "worker=12"}));
  EXPECT_EQ(a.Guard(room), "GUARD");
}

TEST(ProcessTitle, AWordThatDoesNotFitIsLeftOutWholeWithTheRest) {
  FakeArgv a({"torchfarm-zygote", "--zygote", "3"});
  const size_t room =
      RewriteCommandLine(3, a.argv.data(), {"torchfarm-worker", "worker=123456", "more"});
  EXPECT_EQ(a.Words(room), (std::vector<std::string>{"torchfarm-worker"}));
  EXPECT_EQ(a.Guard(room), "GUARD");
}

TEST(ProcessTitle, OnlyContiguousArgumentsAreWritten) {
  FakeArgv a({"torchfarm-zygote", "--zygote", "3"});
  char elsewhere[] = "elsewhere";
  a.argv[1] = elsewhere;  // not where the kernel put it: the area ends after argv[0]
  const size_t room = RewriteCommandLine(3, a.argv.data(), {"torchfarm-worker"});
  EXPECT_EQ(room, 17u);
  EXPECT_STREQ(elsewhere, "elsewhere");
  EXPECT_EQ(RewriteCommandLine(0, a.argv.data(), {"x"}), 0u);
}

}  // namespace
}  // namespace torchfarm::worker
