// Copyright kvserve authors. The N-prefill-worker router: least loaded with
// prefix affinity, connection pools per worker, re-submission elsewhere
// after a failure (include/kvserve/router.h).
#include "kvserve/router.h"

#include <algorithm>
#include <limits>
#include <list>
#include <mutex>
#include <unordered_map>

#include "kvserve/pool.h"
#include "serve/serve_exchange.h"
#include "serve/serve_protocol.h"

namespace kvserve {

class Router::Impl {
 public:
  Impl(Transport* transport, RouterOptions options)
      : transport_(transport), options_(std::move(options)) {
    workers_.resize(options_.prefill_addresses.size());
  }

  Result<RoutedResponse> Submit(const ServeRequest& request) {
    if (workers_.empty())
      return Status::InvalidArgument("router needs at least one prefill worker address");
    if (request.prompt.empty()) return Status::InvalidArgument("request has an empty prompt");
    const std::vector<uint8_t> payload = serve::EncodeRequest(request);
    const uint64_t key = AffinityKey(request);
    const double start = MonotonicSeconds();
    Status last = Status::Unavailable("no attempt made");
    const int attempts = std::max(1, options_.max_attempts);
    std::vector<bool> tried(workers_.size(), false);
    for (int attempt = 1; attempt <= attempts; ++attempt) {
      std::unique_ptr<Connection> connection;
      const int w = Pick(key, tried, &connection);
      tried[w] = true;
      const std::string& address = options_.prefill_addresses[w];
      if (!connection) {
        auto c = Connection::Dial(*transport_, address, options_.connection);
        if (!c.ok()) {
          last = c.status().WithContext("prefill worker " + address);
          Release(w, nullptr, /*failed=*/true, attempt < attempts);
          if (c.status().code() == StatusCode::kPermissionDenied) break;
          continue;
        }
        connection = std::move(*c);
      }
      auto response = serve::Exchange(*connection, payload, options_.response_timeout_seconds);
      if (!response.ok()) {
        last = response.status().WithContext("prefill worker " + address);
        connection->Close();
        Release(w, nullptr, /*failed=*/true, attempt < attempts);
        continue;  // re-submit elsewhere: the request is prefilled again
      }
      if (response->status.code() == StatusCode::kUnavailable && attempt < attempts) {
        // That worker could not reach a decode worker: try another.
        last = response->status;
        Release(w, std::move(connection), /*failed=*/false, /*rerouted=*/true);
        continue;
      }
      RoutedResponse routed;
      routed.response = std::move(*response);
      routed.response.timings.jct_seconds = MonotonicSeconds() - start;
      routed.worker = w;
      routed.submissions = attempt;
      Release(w, std::move(connection), /*failed=*/false, /*rerouted=*/false);
      Served(w, key, routed.response.status.ok());
      return routed;
    }
    RoutedResponse failed;
    failed.response.id = request.id;
    failed.response.status = last.WithContext("request " + std::to_string(request.id) +
                                              " could not be served");
    failed.response.timings.jct_seconds = MonotonicSeconds() - start;
    return failed;
  }

  RouterStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    RouterStats s = stats_;
    s.served.clear();
    for (const Worker& w : workers_) s.served.push_back(w.served);
    return s;
  }

 private:
  struct Worker {
    int in_flight = 0;
    int64_t served = 0;
    double down_until = 0;
    std::vector<std::unique_ptr<Connection>> idle;
  };

  // The request's first pool chunk, for prefix affinity; 0 for none.
  uint64_t AffinityKey(const ServeRequest& r) const {
    const int chunk = options_.pool_chunk_tokens;
    if (!r.use_pool || chunk <= 0 || r.prompt.size() <= static_cast<size_t>(chunk)) return 0;
    const uint64_t h = PrefixHash(std::span<const int32_t>(r.prompt).first(chunk));
    return h == 0 ? 1 : h;
  }

  // The worker for the next submission (counted in flight), and a pooled
  // connection to it if one is idle.
  int Pick(uint64_t key, const std::vector<bool>& tried, std::unique_ptr<Connection>* connection) {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = MonotonicSeconds();
    auto usable = [&](size_t i, bool skip_down) {
      return !tried[i] && (!skip_down || workers_[i].down_until <= now);
    };
    int best = -1;
    for (bool skip_down : {true, false}) {
      for (size_t k = 0; k < workers_.size(); ++k) {
        const size_t i = (next_ + k) % workers_.size();  // rotate ties
        if (usable(i, skip_down) && (best < 0 || workers_[i].in_flight < workers_[best].in_flight))
          best = static_cast<int>(i);
      }
      if (best >= 0) break;
    }
    if (best < 0) best = static_cast<int>(next_ % workers_.size());  // every worker tried
    next_ = (next_ + 1) % workers_.size();
    if (key != 0) {
      auto it = affinity_index_.find(key);
      if (it != affinity_index_.end()) {
        const int w = it->second->second;
        if (usable(w, true) && workers_[w].in_flight <= workers_[best].in_flight + options_.affinity_slack) {
          best = w;
          ++stats_.affinity;
        }
      }
    }
    Worker& chosen = workers_[best];
    ++chosen.in_flight;
    if (!chosen.idle.empty()) {
      *connection = std::move(chosen.idle.back());
      chosen.idle.pop_back();
    }
    return best;
  }

  void Release(int w, std::unique_ptr<Connection> connection, bool failed, bool rerouted) {
    std::lock_guard<std::mutex> lock(mu_);
    Worker& worker = workers_[w];
    --worker.in_flight;
    if (failed) {
      worker.down_until = MonotonicSeconds() + options_.down_seconds;
      for (auto& c : worker.idle) c->Close();  // they go to the same dead peer
      worker.idle.clear();
    }
    if (rerouted) ++stats_.rerouted;
    if (connection) worker.idle.push_back(std::move(connection));
  }

  void Served(int w, uint64_t key, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++workers_[w].served;
    if (key == 0 || !ok) return;
    auto it = affinity_index_.find(key);
    if (it != affinity_index_.end()) affinity_.erase(it->second);
    affinity_.emplace_front(key, w);
    affinity_index_[key] = affinity_.begin();
    while (affinity_.size() > options_.affinity_entries) {
      affinity_index_.erase(affinity_.back().first);
      affinity_.pop_back();
    }
  }

  Transport* transport_;
  const RouterOptions options_;
  mutable std::mutex mu_;  // guards everything below
  std::vector<Worker> workers_;
  size_t next_ = 0;
  std::list<std::pair<uint64_t, int>> affinity_;  // most recent first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, int>>::iterator> affinity_index_;
  RouterStats stats_;
};

Router::Router(Transport* transport, RouterOptions options)
    : impl_(std::make_unique<Impl>(transport, std::move(options))) {}
Router::~Router() = default;
Result<RoutedResponse> Router::Submit(const ServeRequest& request) { return impl_->Submit(request); }
RouterStats Router::stats() const { return impl_->stats(); }

}  // namespace kvserve
