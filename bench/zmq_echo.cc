// torchfarm-bench-zmq-echo: what ZeroMQ alone costs the server a request, the floor under the zmq
// path of bench/instructions.py (issue 36), as torchfarm-bench-grpc-echo is gRPC's. A ROUTER socket
// bound where a farm's job socket would be; each request, [identity][header][data...] as a DEALER
// client sends it, is answered at once with [identity][{"status":"ok"}][data...], the data frames
// moved back without a copy. One thread, blocking receives: no poll, no parsing, no worker; what
// is left is libzmq's own work on both of its threads (the caller's and the I/O thread).
//
//   torchfarm-bench-zmq-echo --bind ipc:///tmp/x.sock
// runs until SIGINT or SIGTERM.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

int main(int argc, char** argv) {
  CLI::App app{"torchfarm-bench-zmq-echo: ZeroMQ's own cost a request (issue 36's reference)"};
  std::string bind;
  app.add_option("--bind", bind, "endpoint to bind the ROUTER socket to")->required();
  CLI11_PARSE(app, argc, argv);

  // Stop on a signal between two requests: the blocking receive returns EINTR.
  struct sigaction quit {};
  quit.sa_handler = [](int) {};
  sigaction(SIGINT, &quit, nullptr);
  sigaction(SIGTERM, &quit, nullptr);

  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(bind);
  const std::string ok = R"({"status":"ok"})";
  std::vector<zmq::message_t> frames;
  while (true) {
    frames.clear();
    try {
      do {
        frames.emplace_back();
        if (!router.recv(frames.back())) return 0;
      } while (frames.back().more());
    } catch (const zmq::error_t& error) {
      if (error.num() == EINTR) return 0;
      throw;
    }
    if (frames.size() < 2) continue;
    frames[1].rebuild(ok.data(), ok.size());  // the header, answered
    for (size_t i = 0; i < frames.size(); ++i) {
      router.send(frames[i],
                  i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}
