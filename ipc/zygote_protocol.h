// The launch channel between the supervisor and its zygote: a pre-started torchfarm-worker
// (`--zygote FD`) that has loaded LibTorch and run its static initialisers but started no thread,
// opened no CUDA context and loaded no model, and forks one child per worker launch. A child so
// made skips exec, dynamic loading and LibTorch's initialisation: most of a worker's start-up.
//
// Channel: one AF_UNIX SOCK_SEQPACKET socketpair, the zygote's end at the fd its argv names.
// Every message is one packet of UTF-8 JSON; a launch request carries the worker's descriptors
// as SCM_RIGHTS ancillary data, in the order of its "targets".
//
// zygote -> supervisor
//   ready    {"type":"zygote_ready","pid":123}                     once, when it can fork
//   launched {"type":"launched","pid":456}   the worker's (or zygote's) pid, a child of the
//                                            supervisor
//   failed   {"type":"failed","error":"fork: Resource temporarily unavailable"}
// supervisor -> zygote (one request at a time; the zygote MUST answer each with launched or
// failed, in order)
//   launch      {"type":"launch","argv":[...],"env":["NAME=VALUE",...],"targets":[3,4,1,2],
//                "supervisor":789}       + one descriptor per target (SCM_RIGHTS)
//   fork_zygote {"type":"fork_zygote","supervisor":789}
//                                        + one descriptor: the new zygote's end of a new channel
//
// The worker is the zygote's grandchild: the zygote forks, the child forks the worker and exits,
// and the worker is re-parented to the supervisor, a child subreaper (PR_SET_CHILD_SUBREAPER).
// So SIGCHLD, waitpid and PR_SET_PDEATHSIG work as for an exec'd worker. Before it runs the
// worker's main, the child waits for that re-parenting, moves the descriptors to their targets,
// closes every other one and applies "env".
//
// fork_zygote makes another zygote the same way, in milliseconds instead of an exec and a LibTorch
// load, sharing the parent's pages copy-on-write: once re-parented, the child moves the descriptor
// onto the channel number of its argv (closing its parent's channel), closes every other one but
// stdio, sets PR_SET_PDEATHSIG, sends ready on the new channel and serves it as its parent does.
// It MUST NOT answer on its parent's channel. A zygote exec'd by the supervisor runs as argv[0]
// kZygoteProgramName (and so does one forked from it); a worker forked from a zygote renames
// itself kWorkerProgramName, so `ps` tells them apart.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace torchfarm::ipc {

inline constexpr const char* kZygoteFlag = "--zygote";
// argv[0] of a zygote and of a worker forked from one (ps, /proc/PID/cmdline); both 16 bytes, so
// a worker forked from a zygote rewrites its inherited argv[0] in place. The kernel's 15-byte
// process name (ps -e, /proc/PID/comm) is their first 15 bytes.
inline constexpr const char* kZygoteProgramName = "torchfarm-zygote";
inline constexpr const char* kWorkerProgramName = "torchfarm-worker";
// Descriptors one launch may carry (SCM_RIGHTS has a per-message limit of 253).
inline constexpr size_t kZygoteMaxFds = 16;
// The largest launch packet: argv with a warm-up spec and an environment fit well inside, and a
// SOCK_SEQPACKET send of it fits the default socket buffer (net.core.wmem_default, 208 KiB).
inline constexpr size_t kZygoteMaxMessageBytes = 192 << 10;

// A launch request, or (zygote true) a fork_zygote request: argv, env and targets empty, the one
// descriptor the new zygote's channel.
struct ZygoteLaunch {
  bool zygote = false;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=VALUE": set in the child before the worker's main
  std::vector<int> targets;      // where each passed descriptor goes in the child
  pid_t supervisor = -1;         // the child's parent once re-parented
};

std::string EncodeZygoteLaunch(const ZygoteLaunch& launch);
Status DecodeZygoteLaunch(const std::string& text, ZygoteLaunch* out);

// One packet, with `fds` as SCM_RIGHTS (may be empty). Blocking. Unavailable when the peer has
// closed its end (EPIPE, ECONNRESET); Internal for any other error.
Status SendPacket(int socket, const std::string& payload, const std::vector<int>& fds = {});
// One packet of at most kZygoteMaxMessageBytes and the descriptors it carried (each close-on-exec
// and owned by the caller). Waits at most `timeout_ms` (-1: forever). DeadlineExceeded when
// nothing came in time (the peer is alive but silent: stuck or stopped); Unavailable when the
// peer is gone (end of file, ECONNRESET).
Status ReceivePacket(int socket, int timeout_ms, std::string* payload, std::vector<int>* fds);

}  // namespace torchfarm::ipc
