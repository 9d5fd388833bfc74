// What `ps` shows for a process forked from the zygote: it inherits the zygote's command line
// (`torchfarm-zygote --zygote 3`) and process name, so a worker forked from it rewrites both
// (ipc/zygote_protocol.h, kWorkerProgramName). Owns nothing; runs in the process it renames, once,
// before any thread starts.
#pragma once

#include <string>
#include <vector>

namespace torchfarm::worker {

// Writes `words` NUL-separated over the contiguous argv strings (argv[0] up to the end of the
// last argument that follows the one before it), zero-filling the rest; a word that does not fit
// whole is left out with every word after it. /proc/PID/cmdline then reads the words. Returns the
// bytes of room the argv strings had (0 when argc is 0).
size_t RewriteCommandLine(int argc, char** argv, const std::vector<std::string>& words);

// PR_SET_NAME: the process name of ps -e, top and /proc/PID/comm (the kernel keeps 15 bytes).
void SetProcessName(const std::string& name);

}  // namespace torchfarm::worker
