#include "worker/process_title.h"

#include <sys/prctl.h>

#include <cstring>

namespace torchfarm::worker {

size_t RewriteCommandLine(int argc, char** argv, const std::vector<std::string>& words) {
  if (argc <= 0 || argv == nullptr || argv[0] == nullptr) return 0;
  // The kernel lays the argument strings out one after another; stop at the first that is not
  // (someone replaced a pointer), so only memory that was ours is written.
  char* const begin = argv[0];
  char* end = begin + std::strlen(begin) + 1;
  for (int i = 1; i < argc && argv[i] == end; ++i) end += std::strlen(argv[i]) + 1;
  const size_t room = static_cast<size_t>(end - begin);
  std::memset(begin, 0, room);
  size_t used = 0;
  for (const std::string& word : words) {
    if (used + word.size() + 1 > room) break;
    std::memcpy(begin + used, word.data(), word.size());
    used += word.size() + 1;
  }
  return room;
}

void SetProcessName(const std::string& name) {
  ::prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);  // truncated to 15 bytes by the kernel
}

}  // namespace torchfarm::worker
