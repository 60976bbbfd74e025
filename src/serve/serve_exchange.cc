// Copyright kvserve authors.
#include "serve/serve_exchange.h"

#include <string>

#include "serve/serve_protocol.h"

namespace kvserve::serve {

Result<ServeResponse> Exchange(Connection& connection, std::span<const uint8_t> request,
                               double timeout_seconds) {
  KVSERVE_RETURN_IF_ERROR(connection.Send(kMsgServeRequest, 0, request));
  Message reply;
  KVSERVE_RETURN_IF_ERROR(connection.Receive(&reply, timeout_seconds));
  if (reply.type != kMsgServeResponse)
    return Status::Corruption("prefill worker answered with message type " +
                              std::to_string(reply.type));
  return DecodeResponse(reply.payload);
}

}  // namespace kvserve::serve
