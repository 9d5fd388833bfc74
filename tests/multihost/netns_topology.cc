#include "netns_topology.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <sstream>

namespace torchfarm::testing {
namespace {

constexpr const char* kPrefix = "tfmh-";

// Runs a shell command, returns its exit status and combined output.
int Run(const std::string& command, std::string* output) {
  output->clear();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) *output += buffer.data();
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Namespaces "tfmh-<pid>-…" of runs whose process is gone (a crash skipped the destructor).
void RemoveStaleNamespaces() {
  std::string list;
  if (Run("ip netns list", &list) != 0) return;
  std::istringstream lines(list);
  std::string name;
  while (lines >> name) {
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t pid = std::atoi(name.c_str() + std::char_traits<char>::length(kPrefix));
    if (pid > 0 && ::kill(pid, 0) != 0) {
      std::string ignored;
      Run("ip netns del " + name, &ignored);
    }
    std::getline(lines, name);  // the rest of the line: "(id: 3)"
  }
}

}  // namespace

NetnsTopology::~NetnsTopology() {
  LeaveClientNamespace();
  Destroy();
}

bool NetnsTopology::Ip(const std::string& args) {
  std::string output;
  if (Run("ip " + args, &output) == 0) return true;
  why_ = "ip " + args + ": " + output;
  return false;
}

bool NetnsTopology::Create(int hosts) {
  RemoveStaleNamespaces();
  const std::string base = kPrefix + std::to_string(::getpid()) + "-";
  client_ns_ = base + "c";
  // The privilege check is the first real step: a failing `ip netns add` means skip.
  if (!Ip("netns add " + client_ns_)) return false;
  created_.push_back(client_ns_);
  const std::string c = "-n " + client_ns_ + " ";
  if (!Ip(c + "link set lo up") || !Ip(c + "link add br0 type bridge") ||
      !Ip(c + "addr add 10.201.0.1/24 dev br0") || !Ip(c + "link set br0 up")) {
    return false;
  }
  for (int h = 0; h < hosts; ++h) {
    const std::string ns = base + "h" + std::to_string(h);
    const std::string port = "port" + std::to_string(h);
    if (!Ip("netns add " + ns)) return false;
    created_.push_back(ns);
    host_ns_.push_back(ns);
    const std::string n = "-n " + ns + " ";
    if (!Ip(c + "link add " + port + " type veth peer name eth0 netns " + ns) ||
        !Ip(c + "link set " + port + " master br0") || !Ip(c + "link set " + port + " up") ||
        !Ip(n + "addr add " + host_address(h) + "/24 dev eth0") || !Ip(n + "link set eth0 up") ||
        !Ip(n + "link set lo up")) {
      return false;
    }
  }
  return true;
}

std::string NetnsTopology::host_address(int host) const {
  return "10.201.0." + std::to_string(2 + host);
}

bool NetnsTopology::EnterClientNamespace() {
  if (original_ns_fd_ < 0)
    original_ns_fd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int fd = ::open(("/run/netns/" + client_ns_).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || original_ns_fd_ < 0) {
    why_ = "cannot open the client namespace";
    if (fd >= 0) ::close(fd);
    return false;
  }
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  if (!ok) why_ = "setns into " + client_ns_ + " failed";
  return ok;
}

void NetnsTopology::LeaveClientNamespace() {
  if (original_ns_fd_ < 0) return;
  ::setns(original_ns_fd_, CLONE_NEWNET);
  ::close(original_ns_fd_);
  original_ns_fd_ = -1;
}

bool NetnsTopology::SetLink(int host, bool up) {
  return Ip("-n " + client_ns_ + " link set port" + std::to_string(host) + (up ? " up" : " down"));
}

void NetnsTopology::Destroy() {
  // Deleting a namespace deletes its links (both ends of a veth pair go with either end).
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    std::string ignored;
    Run("ip netns del " + *it, &ignored);
  }
  created_.clear();
}

}  // namespace torchfarm::testing
