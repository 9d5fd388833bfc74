// Builds against an installed torchfarm and constructs a client; sends nothing, so it needs no
// running farm. Prints the connect status ("connect_status: OK") and exits 0 when it is OK.
#include <cstdio>

#include "torchfarm/client.h"

int main() {
  torchfarm::Client client("tcp://127.0.0.1:5555", 1000);
  std::printf("connect_status: %s\n", client.connect_status().ToString().c_str());
  torchfarm::Client malformed("no-such-transport://x", 1000);
  std::printf("malformed endpoint: %s\n", malformed.connect_status().ToString().c_str());
  return client.connect_status().ok() && !malformed.connect_status().ok() ? 0 : 1;
}
