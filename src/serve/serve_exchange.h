// Copyright kvserve authors. One request/response exchange with a prefill
// worker, shared by ServeClient and the Router. Internal to src/serve.
#ifndef KVSERVE_SERVE_SERVE_EXCHANGE_H_
#define KVSERVE_SERVE_SERVE_EXCHANGE_H_

#include <span>

#include "kvserve/serve.h"

namespace kvserve::serve {

// Sends an encoded request on `connection` and waits (up to
// `timeout_seconds`) for its response. A connection error, a message of
// another type (Corruption) or an undecodable response is the returned
// error: the caller then drops the connection and may re-submit.
Result<ServeResponse> Exchange(Connection& connection, std::span<const uint8_t> request,
                               double timeout_seconds);

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_SERVE_EXCHANGE_H_
