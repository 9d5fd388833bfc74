// The body type the HTTP front end reads requests into: Beast's string_body, but its reader
// appends each received buffer instead of resizing the string first. string_body's reader
// zero-fills the new length and then copies over it, a second pass over every body byte (~4k
// instructions of a 5 KB JSON request, issue 36). Serialising (the writer) is string_body's own.
// Header-only; used wherever HttpSession parses a request.
#pragma once

#include <cstdint>
#include <string>

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/optional.hpp>

namespace torchfarm {

struct RequestBody : boost::beast::http::string_body {
  class reader {
   public:
    template <bool kIsRequest, class Fields>
    explicit reader(boost::beast::http::header<kIsRequest, Fields>&, value_type& body)
        : body_(body) {}

    // Room for a declared Content-Length (the parser's body limit has already bounded it).
    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      if (length) {
        if (*length > body_.max_size()) {
          ec = boost::beast::http::error::buffer_overflow;
          return;
        }
        body_.reserve(static_cast<std::size_t>(*length));
      }
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t added = 0;
      for (const auto buffer : boost::beast::buffers_range_ref(buffers)) {
        if (buffer.size() > body_.max_size() - body_.size()) {
          ec = boost::beast::http::error::buffer_overflow;
          return added;
        }
        body_.append(static_cast<const char*>(buffer.data()), buffer.size());
        added += buffer.size();
      }
      ec = {};
      return added;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace torchfarm
