// FarmChannel against a fake job loop: the test reads the channel's requests from a FrontendHub
// and answers like the supervisor (docs/protocol.md replies, the channel's ids echoed).
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/typed_frame.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "tests/frontend/hub_loop.h"

namespace torchfarm {
namespace {

using nlohmann::json;

class FakeLoop {
 public:
  FrontendHub& hub() { return hub_; }
  // Reads one request: [identity][tag][call id][header][frames...].
  bool Receive(std::vector<zmq::message_t>* frames, int timeout_ms = 5000) {
    return testing::ReceiveFromHub(hub_, frames, std::chrono::milliseconds(timeout_ms));
  }
  // Answers `request` with an ok reply carrying one output: the request's first frame echoed.
  void Echo(std::vector<zmq::message_t>& request) {
    const json header = json::parse(request[3].to_string());
    EXPECT_EQ(header["id"].dump(), request[2].to_string());
    SendEcho(request, header["id"]);
  }
  // A typed request (farm_channel.h) answered like Echo: its id is the call id frame.
  void EchoTyped(std::vector<zmq::message_t>& request) {
    SendEcho(request, std::stoull(request[2].to_string()));
  }
  void SendEcho(std::vector<zmq::message_t>& request, const json& id) {
    json reply = {{"v", 1},
                  {"id", id},
                  {"status", "ok"},
                  {"outputs", json::array({{{"dtype", "uint8"}, {"shape", {request[4].size()}}}})},
                  {"timing_us", {{"queue", 1}, {"compute", 2}, {"total", 3}}},
                  {"worker", 0}};
    std::vector<zmq::message_t> data;
    data.push_back(std::move(request[4]));
    Send(request, zmq::message_t(reply.dump()), std::move(data));
  }
  // Answers a typed request as the loop does (ReplyWriter::SendTyped): a typed reply header with
  // the call id, then `data` frames.
  void ReplyTyped(std::vector<zmq::message_t>& request, ReplyHeader header,
                  std::vector<std::string> data) {
    header.id = std::stoull(request[2].to_string());
    std::vector<zmq::message_t> frames;
    for (const std::string& bytes : data) frames.emplace_back(bytes.data(), bytes.size());
    Send(request, MakeTypedFrame(std::move(header)), std::move(frames));
  }
  void Error(std::vector<zmq::message_t>& request, const std::string& code) {
    const json header = json::parse(request[3].to_string());
    json reply = {{"v", 1}, {"id", header["id"]}, {"status", "error"}, {"code", code},
                  {"message", "no such model"}};
    Send(request, zmq::message_t(reply.dump()), {});
  }

 private:
  void Send(const std::vector<zmq::message_t>& request, zmq::message_t header,
            std::vector<zmq::message_t> data) {
    std::vector<zmq::message_t> reply;
    reply.emplace_back(request[0].data(), request[0].size());
    reply.push_back(std::move(header));
    for (auto& frame : data) reply.push_back(std::move(frame));
    EXPECT_TRUE(testing::ReplyThroughHub(hub_, std::move(reply)));
  }

  FrontendHub hub_;
};

std::vector<zmq::message_t> OneFrame(const std::string& bytes) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(bytes.data(), bytes.size());
  return frames;
}

TEST(FarmChannel, ARequestTravelsWithItsTagAndTheReplyComesBackOnTheChannelThread) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::promise<FarmReply> answered;
  std::promise<std::thread::id> channel_thread;
  std::thread::id done_thread;
  channel.Post([&] {
    channel_thread.set_value(std::this_thread::get_id());
    channel.Call("http 127.0.0.1:40000", json{{"v", 1}, {"model", "m"}}, OneFrame("abcdef"),
                 [&](FarmReply reply) {
                   done_thread = std::this_thread::get_id();
                   answered.set_value(std::move(reply));
                 });
  });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(loop.Receive(&request));
  ASSERT_EQ(request.size(), 5u);
  EXPECT_EQ(request[1].to_string(), "http 127.0.0.1:40000");
  const json header = json::parse(request[3].to_string());
  EXPECT_EQ(header["model"], "m");
  EXPECT_TRUE(header["id"].is_number_unsigned());
  loop.Echo(request);
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  FarmReply reply = future.get();
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  ASSERT_EQ(reply.frames.size(), 1u);
  EXPECT_EQ(reply.frames[0].to_string(), "abcdef");
  ASSERT_EQ(reply.header.outputs.size(), 1u);
  EXPECT_EQ(reply.header.outputs[0].shape, std::vector<int64_t>{6});
  EXPECT_EQ(done_thread, channel_thread.get_future().get());
}

TEST(FarmChannel, AFarmErrorArrivesAsTheStatusWithItsCode) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::promise<FarmReply> answered;
  channel.Post([&] {
    channel.Call("grpc ipv4:1.2.3.4:5", json{{"v", 1}}, OneFrame("x"),
                 [&](FarmReply reply) { answered.set_value(std::move(reply)); });
  });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(loop.Receive(&request));
  loop.Error(request, "NOT_FOUND");
  FarmReply reply = answered.get_future().get();
  EXPECT_EQ(reply.status.code(), StatusCode::kNotFound);
  EXPECT_EQ(reply.status.message(), "no such model");
  EXPECT_TRUE(reply.frames.empty());
}

// Many calls in flight, answered in reverse order: each Done runs exactly once with its own bytes.
TEST(FarmChannel, ManyCallsAnsweredOutOfOrderEachGetTheirOwnReplyOnce) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  constexpr int kCalls = 500;
  std::atomic<int> done{0};
  std::atomic<int> wrong{0};
  std::map<int, int> times;  // written on the channel thread only
  channel.Post([&] {
    for (int i = 0; i < kCalls; ++i) {
      const std::string payload = "payload-" + std::to_string(i);
      channel.Call("http p", json{{"v", 1}}, OneFrame(payload), [&, i, payload](FarmReply reply) {
        if (!reply.status.ok() || reply.frames.size() != 1 ||
            reply.frames[0].to_string() != payload) {
          wrong++;
        }
        times[i]++;
        done++;
      });
    }
  });
  std::vector<std::vector<zmq::message_t>> requests(kCalls);
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(loop.Receive(&requests[i]));
  for (int i = kCalls - 1; i >= 0; --i) loop.Echo(requests[i]);
  for (int t = 0; t < 500 && done < kCalls; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(done.load(), kCalls);
  EXPECT_EQ(wrong.load(), 0);
  std::promise<bool> all_once;
  channel.Post([&] {
    bool ok = times.size() == static_cast<size_t>(kCalls);
    for (const auto& [i, n] : times) ok = ok && n == 1;
    all_once.set_value(ok);
  });
  EXPECT_TRUE(all_once.get_future().get());
  EXPECT_EQ(channel.pending(), 0u);
}

TEST(FarmChannel, StopAnswersEveryWaitingCallUnavailable) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::atomic<int> unavailable{0};
  std::promise<void> sent;
  channel.Post([&] {
    for (int i = 0; i < 3; ++i) {
      channel.Call("http p", json{{"v", 1}}, OneFrame("x"), [&](FarmReply reply) {
        if (reply.status.code() == StatusCode::kUnavailable) unavailable++;
      });
    }
    sent.set_value();
  });
  sent.get_future().wait();
  EXPECT_EQ(channel.pending(), 3u);
  channel.Stop();
  EXPECT_EQ(unavailable.load(), 3);
  channel.Stop();  // idempotent
}

// A header over the loop's limit is answered at once and never sent; a reply that matches no
// call is counted (a dropped answer is a bug the tests must see).
TEST(FarmChannel, AnOversizedHeaderIsRefusedAtOnceAndAnUnmatchedReplyIsCounted) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  RequestLimits limits;
  limits.max_header_bytes = 300;
  channel.set_request_limits(limits);
  EXPECT_EQ(channel.request_limits().max_header_bytes, 300u);
  std::promise<FarmReply> refused;
  channel.Post([&] {
    channel.Call("grpc p", json{{"v", 1}, {"model", std::string(400, 'm')}}, OneFrame("x"),
                 [&](FarmReply reply) { refused.set_value(std::move(reply)); });
  });
  FarmReply reply = refused.get_future().get();
  EXPECT_EQ(reply.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reply.status.message().find("over limits.max_header_bytes (300)"), std::string::npos)
      << reply.status.message();
  EXPECT_EQ(channel.pending(), 0u);

  std::promise<FarmReply> answered;
  channel.Post([&] {
    channel.Call("grpc p", json{{"v", 1}, {"model", "m"}}, OneFrame("x"),
                 [&](FarmReply reply) { answered.set_value(std::move(reply)); });
  });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(loop.Receive(&request));  // the good call, not the refused one
  EXPECT_EQ(json::parse(request[3].to_string())["model"], "m");
  std::vector<zmq::message_t> stray;
  stray.emplace_back(request[0].data(), request[0].size());
  stray.emplace_back(request[1].data(), request[1].size());
  stray.emplace_back(std::string("999"));
  stray.emplace_back(std::string("{\"v\":1,\"id\":999}"));
  loop.Error(stray, "INVALID_ARGUMENT");
  loop.Echo(request);
  EXPECT_TRUE(answered.get_future().get().status.ok());
  EXPECT_EQ(channel.unmatched_replies(), 1u);
}

// Issue 36: a typed request travels as its RequestHeader in a typed frame, tagged "typed ",
// with the call id the reply comes back by; a typed frame nobody reads is freed with its message
// (the ASan build sees a leak otherwise).
TEST(FarmChannel, ATypedRequestTravelsAsItsHeaderInATypedFrame) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::promise<FarmReply> answered;
  channel.Post([&] {
    RequestHeader header;
    header.model = "m";
    header.inputs.push_back(TensorSpec{DType::kUInt8, {6}});
    header.input_names.push_back("x");
    channel.Call("http 127.0.0.1:40000", std::move(header), OneFrame("abcdef"),
                 [&](FarmReply reply) { answered.set_value(std::move(reply)); });
    RequestHeader unread;
    unread.model = std::string(1000, 'u');
    channel.Call("grpc p", std::move(unread), OneFrame("x"), [](FarmReply) {});
  });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(loop.Receive(&request));
  ASSERT_EQ(request.size(), 5u);
  EXPECT_EQ(request[1].to_string(), std::string(testing::kTypedTagPrefix) + "http 127.0.0.1:40000");
  const RequestHeader* typed = TypedFrameValue<RequestHeader>(request[3]);
  ASSERT_NE(typed, nullptr);
  EXPECT_EQ(typed->model, "m");
  EXPECT_EQ(typed->input_names, std::vector<std::string>{"x"});
  EXPECT_TRUE(typed->id.is_null());
  EXPECT_EQ(TypedFrameValue<ReplyHeader>(request[3]), nullptr) << "a box knows its type";
  EXPECT_EQ(TypedFrameValue<RequestHeader>(request[4]), nullptr) << "data is no box";
  loop.EchoTyped(request);
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  FarmReply reply = future.get();
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  ASSERT_EQ(reply.frames.size(), 1u);
  EXPECT_EQ(reply.frames[0].to_string(), "abcdef");
  // The second call stays unread in the hub: the hub's end frees its header.
  channel.Stop();
}

// A typed frame copied shares its box, which is freed once, when the last copy goes.
TEST(FarmChannel, ATypedFrameOwnsItsValueAcrossCopies) {
  RequestHeader header;
  header.model = std::string(100, 'x');
  zmq::message_t frame = MakeTypedFrame(std::move(header));
  zmq::message_t copy;
  copy.copy(frame);
  frame = zmq::message_t();
  const RequestHeader* typed = TypedFrameValue<RequestHeader>(copy);
  ASSERT_NE(typed, nullptr);
  EXPECT_EQ(typed->model, std::string(100, 'x'));
  zmq::message_t text(std::string(sizeof(TypedFrameBox<RequestHeader>), '{'));
  EXPECT_EQ(TypedFrameValue<RequestHeader>(text), nullptr) << "JSON of the same size is no box";
}

// Issue 36: the loop answers a typed request with a typed reply header, taken without parsing;
// an error's message is what the text reply would carry (invalid UTF-8 replaced).
TEST(FarmChannel, ATypedReplyIsTakenAsItIs) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::promise<FarmReply> ok_answer;
  std::promise<FarmReply> error_answer;
  channel.Post([&] {
    RequestHeader header;
    header.model = "m";
    channel.Call("http p", header, OneFrame("abc"),
                 [&](FarmReply reply) { ok_answer.set_value(std::move(reply)); });
    channel.Call("http p", header, OneFrame("abc"),
                 [&](FarmReply reply) { error_answer.set_value(std::move(reply)); });
  });
  std::vector<zmq::message_t> first;
  std::vector<zmq::message_t> second;
  ASSERT_TRUE(loop.Receive(&first));
  ASSERT_TRUE(loop.Receive(&second));
  ReplyHeader ok;
  ok.outputs.push_back(TensorSpec{DType::kUInt8, {3}});
  ok.output_names.push_back("y");
  ok.timing.queue_us = 5;
  ok.worker_id = 2;
  loop.ReplyTyped(first, ok, {"xyz"});
  ReplyHeader error;
  error.status = Status(StatusCode::kNotFound, "model 'm\xff\xfe' is not served here");
  loop.ReplyTyped(second, error, {});
  FarmReply reply = ok_answer.get_future().get();
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  EXPECT_EQ(reply.header.output_names, std::vector<std::string>{"y"});
  EXPECT_EQ(reply.header.timing.queue_us, 5);
  EXPECT_EQ(reply.header.worker_id, 2);
  ASSERT_EQ(reply.frames.size(), 1u);
  EXPECT_EQ(reply.frames[0].to_string(), "xyz");
  reply = error_answer.get_future().get();
  ReplyHeader as_text;
  ASSERT_TRUE(ParseReplyHeader(MakeErrorReply(1, error.status), &as_text).ok());
  EXPECT_EQ(reply.status.code(), StatusCode::kNotFound);
  EXPECT_EQ(reply.status.message(), as_text.status.message());
  EXPECT_NE(reply.status.message(), error.status.message()) << "the bytes were replaced";
  EXPECT_EQ(channel.unmatched_replies(), 0u);
}

// A reply handler that throws loses its own call only: the replies behind it in the mailbox are
// still delivered, and later calls on the channel are answered (the mailbox raises no new edge
// while it holds a reply, so a drain cut short would leave the channel deaf).
TEST(FarmChannel, AThrowingReplyHandlerCostsOnlyItsOwnCall) {
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  std::promise<FarmReply> second;
  channel.Post([&] {
    channel.Call("http p", json{{"v", 1}}, OneFrame("one"),
                 [](FarmReply) { throw std::runtime_error("handler bug"); });
    channel.Call("http p", json{{"v", 1}}, OneFrame("two"),
                 [&](FarmReply reply) { second.set_value(std::move(reply)); });
  });
  std::vector<zmq::message_t> first_request;
  std::vector<zmq::message_t> second_request;
  ASSERT_TRUE(loop.Receive(&first_request));
  ASSERT_TRUE(loop.Receive(&second_request));
  // Both replies wait in the mailbox before the channel's drain runs the throwing handler.
  channel.Post([&] {
    loop.Echo(first_request);
    loop.Echo(second_request);
  });
  auto future = second.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(future.get().frames[0].to_string(), "two");
  std::promise<FarmReply> third;
  channel.Post([&] {
    channel.Call("http p", json{{"v", 1}}, OneFrame("three"),
                 [&](FarmReply reply) { third.set_value(std::move(reply)); });
  });
  std::vector<zmq::message_t> third_request;
  ASSERT_TRUE(loop.Receive(&third_request));
  loop.Echo(third_request);
  auto later = third.get_future();
  ASSERT_EQ(later.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(later.get().frames[0].to_string(), "three");
  EXPECT_EQ(channel.pending(), 0u);
}

}  // namespace
}  // namespace torchfarm
