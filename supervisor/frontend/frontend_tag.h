// The tag of a front-end inference request (farm_channel.h has the message it starts): which
// protocol the request came by (a metrics label) and its client key, the one
// limits.max_queued_per_client, client_weights and fair queueing count it by. This file owns the
// tag's format: the front ends write it, the loop (events/job_acceptor.cc) reads it, nobody else
// takes it apart. Header-only so the loop's side links none of the front ends' libraries.
//
//   "<protocol> <peer>"   unnamed: the key is the whole tag, so each connection is a client of its
//                         own ("http 127.0.0.1:40000", "grpc ipv4:10.0.0.7:51234")
//   "<protocol>=<id>"     named by frontend.client_id_header: the key is <id> alone, the same key
//                         as a ZeroMQ client whose routing id is <id>, so client_weights can name
//                         it and the two share one quota ("http=tenant-gold")
// <protocol> is RequestOriginName's "http" or "grpc". The character after it decides, so no peer
// text is ever read as an id. An id is 1..255 visible ASCII bytes (v2_client_id.h checks it before
// the tag is written): it has no space, so a named client can never take a connection's key.
#pragma once

#include <string>
#include <string_view>

#include "supervisor/intake/request_origin.h"

namespace torchfarm {

// The tag of a request from `peer` that no client id names.
inline std::string PeerTag(RequestOrigin origin, std::string_view peer) {
  std::string tag(RequestOriginName(origin));
  tag += ' ';
  tag += peer;
  return tag;
}

// The tag of a request named by a checked client id (v2_client_id.h CheckClientId).
inline std::string ClientIdTag(RequestOrigin origin, std::string_view id) {
  std::string tag(RequestOriginName(origin));
  tag += '=';
  tag += id;
  return tag;
}

// What the loop reads from a tag.
struct FrontendTagParts {
  RequestOrigin origin = RequestOrigin::kHttp;
  std::string client;  // the client key
};

// A tag that starts with "grpc" is gRPC's, any other HTTP's (only FarmChannel writes tags, so
// there is no third kind to refuse); the key as the header comment says. Taken by value: an
// unnamed tag becomes the key without a copy.
inline FrontendTagParts ReadFrontendTag(std::string tag) {
  FrontendTagParts parts;
  const std::string_view grpc = RequestOriginName(RequestOrigin::kGrpc);
  parts.origin =
      tag.compare(0, grpc.size(), grpc) == 0 ? RequestOrigin::kGrpc : RequestOrigin::kHttp;
  const size_t protocol = RequestOriginName(parts.origin).size();
  if (tag.size() > protocol && tag[protocol] == '=') {
    parts.client = tag.substr(protocol + 1);
  } else {
    parts.client = std::move(tag);
  }
  return parts;
}

}  // namespace torchfarm
