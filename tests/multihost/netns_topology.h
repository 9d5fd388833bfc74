// Test support: several "hosts" on one machine. Each host is a network namespace joined by a veth
// pair to a bridge in a "client" namespace; every packet stays inside these namespaces.
//
//   client ns  tfmh-<pid>-c   br0 10.201.0.1/24 ── port0 ══ veth ══ eth0 10.201.0.2  tfmh-<pid>-h0
//                                                 └─ port1 ══ veth ══ eth0 10.201.0.3 tfmh-<pid>-h1
//
// Owns: the namespaces (and with them their links): removed on destruction, and at the next
// construction when a crashed run (a pid no longer alive) left some behind. Needs CAP_SYS_ADMIN
// and CAP_NET_ADMIN (root); Create() says why not when it cannot.
#pragma once

#include <string>
#include <vector>

namespace torchfarm::testing {

class NetnsTopology {
 public:
  NetnsTopology() = default;
  ~NetnsTopology();
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  // Tries `ip netns add` first; false with why() set when the privilege or iproute2 is missing.
  bool Create(int hosts);
  const std::string& why() const { return why_; }

  const std::string& client_ns() const { return client_ns_; }
  const std::string& host_ns(int host) const { return host_ns_[host]; }
  std::string host_address(int host) const;  // "10.201.0.2", …

  // Moves the calling thread into the client namespace (threads it starts later inherit it);
  // LeaveClientNamespace returns it to the namespace it came from.
  bool EnterClientNamespace();
  void LeaveClientNamespace();

  // Cuts or restores the host's cable: the bridge port in the client namespace goes down or up.
  bool SetLink(int host, bool up);

  // Runs `ip args…`; false with the output in why() on failure.
  bool Ip(const std::string& args);

 private:
  void Destroy();

  std::string client_ns_;
  std::vector<std::string> host_ns_;
  std::vector<std::string> created_;
  int original_ns_fd_ = -1;
  std::string why_;
};

}  // namespace torchfarm::testing
