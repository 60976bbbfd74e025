// Copyright kvserve authors. The client side of the serve protocol: submit a
// request to a prefill worker and wait for its answer, re-submitting
// (re-prefill) on another worker or a fresh connection after a failure.
#include <algorithm>

#include "kvserve/serve.h"
#include "serve/serve_exchange.h"
#include "serve/serve_protocol.h"

namespace kvserve {

ServeClient::ServeClient(Transport* transport, ServeClientOptions options)
    : transport_(transport), options_(std::move(options)) {}

ServeClient::~ServeClient() {
  if (connection_) connection_->Close();
}

Result<ServeResponse> ServeClient::Submit(const ServeRequest& request) {
  if (options_.prefill_addresses.empty())
    return Status::InvalidArgument("serve client needs at least one prefill worker address");
  if (request.prompt.empty()) return Status::InvalidArgument("request has an empty prompt");
  const std::vector<uint8_t> payload = serve::EncodeRequest(request);
  Status last = Status::Unavailable("no attempt made");
  // Every failed submission's status, so a request that gives up says what
  // each attempt ran into (connecting, or the exchange), not only the last.
  std::string earlier;
  bool failed_before = false;
  auto failed_attempt = [&](Status s) {
    if (failed_before) earlier += (earlier.empty() ? "" : "; ") + last.ToString();
    failed_before = true;
    last = std::move(s);
  };
  const int attempts = std::max(1, options_.max_attempts);
  int tried = 0;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    tried = attempt;
    const std::string& address =
        options_.prefill_addresses[next_address_ % options_.prefill_addresses.size()];
    if (!connection_) {
      auto c = Connection::Dial(*transport_, address, options_.connection);
      if (!c.ok()) {
        failed_attempt(c.status().WithContext("prefill worker " + address + ", connecting"));
        ++next_address_;
        if (c.status().code() == StatusCode::kPermissionDenied) break;
        continue;
      }
      connection_ = std::move(*c);
    }
    const double start = MonotonicSeconds();
    auto response = serve::Exchange(*connection_, payload, options_.response_timeout_seconds);
    if (!response.ok()) {
      failed_attempt(response.status().WithContext("prefill worker " + address));
      connection_->Close();
      connection_.reset();
      ++next_address_;
      continue;  // re-submit: the request is prefilled again
    }
    response->timings.jct_seconds = MonotonicSeconds() - start;
    if (response->status.code() == StatusCode::kUnavailable && attempt < attempts) {
      failed_attempt(response->status);
      ++next_address_;
      connection_->Close();
      connection_.reset();
      continue;  // that worker could not reach a decode worker: try another
    }
    return std::move(*response);
  }
  ServeResponse failed;
  failed.id = request.id;
  failed.status = last.WithContext("request " + std::to_string(request.id) + " gave up after " +
                                   std::to_string(tried) + " submission(s)" +
                                   (earlier.empty() ? "" : " (earlier: " + earlier + ")"));
  return failed;
}

}  // namespace kvserve
