// Copyright kvserve authors. experiments/net_bench.h.
#include "experiments/net_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <memory>
#include <random>
#include <span>
#include <thread>

#include "experiments/serving.h"
#include "kvserve/codec.h"
#include "kvserve/profile.h"

namespace kvserve::lab {

namespace {

// A raw frame of about `bytes` bytes: seeded f32 KV of 512 tokens and 8
// heads of 128 dims (2 MiB per layer and kind), as many layers as fit.
Result<std::vector<uint8_t>> RawFrame(uint64_t bytes) {
  constexpr int32_t kTokens = 512, kHeads = 8, kDims = 128;
  constexpr uint64_t kPerLayer = uint64_t{2} * kTokens * kHeads * kDims * 4;
  const auto layers = static_cast<int32_t>(std::clamp<uint64_t>(bytes / kPerLayer, 1, 4096));
  const KvShape shape{layers, kHeads, kTokens, kDims};
  KvCache cache(DType::kF32, shape);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  float* p = reinterpret_cast<float*>(cache.bytes());
  for (int64_t i = 0; i < shape.NumElements(); ++i) p[i] = normal(rng);
  KVSERVE_ASSIGN_OR_RETURN(auto encoder, EncoderContext::Create(*Profile::Parse("none")));
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  KVSERVE_RETURN_IF_ERROR(encoder->Encode(cache.view(), sink));
  return frame;
}

// GetRecords of `key` (whose value is `frame`): its goodput in Gbps, the
// records checked against the frame's as they arrive.
Result<double> RecordsRound(KvPool& pool, const PoolKey& key, std::span<const uint8_t> frame) {
  size_t at = 0;
  FrameHandler handler;
  auto expect = [&](std::span<const uint8_t> unit) {
    if (at + unit.size() > frame.size() || std::memcmp(frame.data() + at, unit.data(), unit.size()) != 0)
      return Status::Corruption("GetRecords delivered other bytes than the stored frame's");
    at += unit.size();
    return Status::Ok();
  };
  handler.on_header = [&](uint64_t, std::span<const uint8_t> header) { return expect(header); };
  handler.on_record = expect;
  const double t0 = NowSeconds();
  KVSERVE_RETURN_IF_ERROR(pool.GetRecords(key, handler));
  const double seconds = NowSeconds() - t0;
  if (at != frame.size()) return Status::Corruption("GetRecords delivered part of the stored frame");
  return BytesPerSecondToGbps(static_cast<double>(frame.size()) / seconds);
}

}  // namespace

Result<std::vector<PoolBenchRow>> RunPoolBench(
    KvPool& pool, const std::vector<uint64_t>& sizes, int count,
    const std::function<void(const PoolBenchRound&)>& on_round, bool records) {
  if (sizes.empty() || count < 1)
    return Status::InvalidArgument("pool bench: needs a size and count >= 1");
  const std::vector<uint8_t> random = RandomBytes(*std::max_element(sizes.begin(), sizes.end()), 1);
  std::vector<PoolBenchRow> rows;
  for (uint64_t bytes : sizes) {
    std::vector<uint8_t> raw;
    if (records) {
      KVSERVE_ASSIGN_OR_RETURN(raw, RawFrame(bytes));
    }
    const std::span<const uint8_t> frame =
        records ? std::span<const uint8_t>(raw) : std::span<const uint8_t>(random.data(), bytes);
    std::vector<double> put_gbps, get_gbps, records_gbps;
    std::vector<uint8_t> got;
    for (int i = 0; i < count; ++i) {
      PoolKey key{"bench", static_cast<uint64_t>(i), "none"};
      const double t0 = NowSeconds();
      Status s = pool.Put(key, frame);
      const double t1 = NowSeconds();
      if (s.ok()) s = pool.Get(key, &got);
      const double t2 = NowSeconds();
      if (s.ok() && (got.size() != frame.size() ||
                     std::memcmp(got.data(), frame.data(), frame.size()) != 0))
        s = Status::Corruption("the pool returned other bytes than were stored");
      if (s.ok() && records) {
        auto gbps = RecordsRound(pool, key, frame);
        if (gbps.ok()) records_gbps.push_back(*gbps);
        s = gbps.status();
      }
      if (s.ok()) s = pool.Delete(key);
      KVSERVE_RETURN_IF_ERROR(s);
      put_gbps.push_back(BytesPerSecondToGbps(frame.size() / (t1 - t0)));
      get_gbps.push_back(BytesPerSecondToGbps(frame.size() / (t2 - t1)));
      if (on_round)
        on_round({frame.size(), i, put_gbps.back(), get_gbps.back(),
                  records ? records_gbps.back() : 0.0});
    }
    rows.push_back({frame.size(), Summarize(put_gbps), Summarize(get_gbps),
                    records ? Summarize(records_gbps) : SampleSummary{}});
  }
  return rows;
}

std::string PoolBenchRow::Json(const std::string& backend, int count, double shape_gbps) const {
  const std::string by_record =
      records_gbps.count > 0 ? fmt::format("{:.4f}", records_gbps.median) : std::string("null");
  return fmt::format(
      "{{\"backend\": \"{}\", \"bytes\": {}, \"count\": {}, \"shape_gbps\": {}, "
      "\"put_gbps\": {:.4f}, \"get_gbps\": {:.4f}, \"put_gbps_max\": {:.4f}, "
      "\"get_gbps_max\": {:.4f}, \"put_GBps\": {:.4f}, \"get_GBps\": {:.4f}, "
      "\"records_gbps\": {}}}\n",
      backend, bytes, count, shape_gbps, put_gbps.median, get_gbps.median, put_gbps.max,
      get_gbps.max, put_gbps.median / 8, get_gbps.median / 8, by_record);
}

std::string PoolBenchRow::Text() const {
  std::string text = fmt::format("{} MiB: put_gbps {:.4f} get_gbps {:.4f}", bytes >> 20,
                                 put_gbps.median, get_gbps.median);
  if (records_gbps.count > 0) text += fmt::format(" records_gbps {:.4f}", records_gbps.median);
  return text + "\n";
}

std::string TransportBenchFrame::Json() const {
  return fmt::format(
      "{{\"frame\":{},\"frame_mib\":{},\"gbps\":{:.4f},\"busy_gbps\":{:.4f},"
      "\"estimate_gbps\":{:.4f}}}\n",
      transfer, frame_mib, gbps, busy_gbps, estimate_gbps);
}

std::string TransportBenchRow::Json(const std::string& transport, const std::string& tls,
                                    int count) const {
  return fmt::format(
      "{{\"transport\":\"{}\",\"tls\":\"{}\",\"frame_mib\":{},\"count\":{},"
      "\"gbps_median\":{:.4f},\"gbps_max\":{:.4f},\"gbps_min\":{:.4f},"
      "\"busy_gbps_median\":{:.4f},\"estimate_gbps\":{:.4f}}}\n",
      transport, tls, frame_mib, count, gbps.median, gbps.max, gbps.min, busy_gbps.median,
      estimate_gbps);
}

std::string TransportBenchRow::Text(const std::string& transport, const std::string& tls) const {
  return fmt::format(
      "{} ({}) {:>6} MiB: median {:.2f} Gbps (min {:.2f}, max {:.2f}), estimate {:.2f} Gbps\n",
      transport, tls, frame_mib, gbps.median, gbps.min, gbps.max, estimate_gbps);
}

Result<std::vector<double>> ParseFrameSizesMb(const std::string& list) {
  std::vector<double> sizes;
  for (const std::string& s : SplitList(list)) {
    try {
      sizes.push_back(std::stod(s));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--sizes-mb: '" + s + "' is not a number");
    }
    if (!(sizes.back() > 0) || sizes.back() > 1024)
      return Status::InvalidArgument("--sizes-mb: sizes must be in (0, 1024]");
  }
  if (sizes.empty()) return Status::InvalidArgument("--sizes-mb is empty");
  return sizes;
}

Result<std::vector<TransportBenchRow>> RunTransportBench(
    Connection& connection, const BandwidthEstimator& estimator,
    const TransportBenchOptions& options,
    const std::function<void(const TransportBenchFrame&)>& on_frame) {
  if (options.sizes_mb.empty() || options.count < 1 || options.record_bytes == 0)
    return Status::InvalidArgument("transport bench: needs a size, count >= 1 and records");
  const double largest = *std::max_element(options.sizes_mb.begin(), options.sizes_mb.end());
  const std::vector<uint8_t> payload = RandomBytes(static_cast<size_t>(largest * 1048576), 7);
  const std::vector<uint8_t> header(64, 0x5A);
  const size_t record = options.record_bytes;
  FrameSender sender(&connection);
  uint64_t transfer = 0;
  auto estimate = [&] { return BytesPerSecondToGbps(estimator.Estimate(connection.peer_id())); };
  std::vector<TransportBenchRow> rows;
  for (double mb : options.sizes_mb) {
    const size_t frame_bytes = static_cast<size_t>(mb * 1048576);
    std::vector<double> gbps, busy_gbps;
    for (int round = 0; round < options.warmup + options.count; ++round) {
      Status s = sender.Begin(++transfer, header);
      for (size_t off = 0; s.ok() && off < frame_bytes; off += record)
        s = sender.SendRecord(
            std::span<const uint8_t>(payload).subspan(off, std::min(record, frame_bytes - off)));
      Result<TransferStats> stats = s.ok() ? sender.Finish() : Result<TransferStats>(s);
      if (!stats.ok())
        return stats.status().WithContext(fmt::format("frame {} of {} MiB", round, mb));
      if (round < options.warmup) continue;
      gbps.push_back(
          BytesPerSecondToGbps(static_cast<double>(stats->frame_bytes) / stats->elapsed_seconds));
      busy_gbps.push_back(
          BytesPerSecondToGbps(static_cast<double>(stats->wire_bytes) / stats->busy_seconds));
      if (on_frame) on_frame({transfer, mb, gbps.back(), busy_gbps.back(), estimate()});
    }
    rows.push_back({mb, Summarize(gbps), Summarize(busy_gbps), estimate()});
  }
  return rows;
}

FrameSinkCounts RunFrameSink(Listener& listener, const ConnectionOptions& options,
                             const std::function<void()>& wait, const Progress& progress) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> frames{0}, bytes{0};
  std::list<std::thread> peers;
  std::thread acceptor([&] {
    while (!stop.load()) {
      auto c = Connection::Accept(listener, options, 0.2);
      if (!c.ok()) {
        if (c.status().code() != StatusCode::kTimeout && !stop.load())
          Note(progress, "refused a peer: {}", c.status().ToString());
        continue;
      }
      peers.emplace_back([&, connection = std::shared_ptr<Connection>(std::move(*c))] {
        while (!stop.load()) {
          auto frame = ReceiveFrame(*connection, {}, 0.5);
          if (frame.ok()) {
            frames.fetch_add(1);
            bytes.fetch_add(static_cast<int64_t>(frame->frame_bytes));
            continue;
          }
          if (frame.status().code() == StatusCode::kTimeout) continue;
          if (frame.status().code() != StatusCode::kUnavailable)
            Note(progress, "peer {}: {}", connection->peer_id(), frame.status().ToString());
          return;
        }
      });
    }
  });
  if (wait) wait();
  stop = true;
  listener.Close();
  acceptor.join();
  for (auto& t : peers) t.join();
  return {frames.load(), bytes.load()};
}

Result<FrameSinkCounts> ServeFrameSink(Transport& transport, const std::string& listen,
                                       const ConnectionOptions& options,
                                       const std::string& address_file, double duration_seconds,
                                       const std::function<void(const std::string&)>& on_listening,
                                       const Progress& progress) {
  BlockStopSignals();
  KVSERVE_ASSIGN_OR_RETURN(auto listener, transport.Listen(listen));
  const std::string address = listener->Address();
  if (!address_file.empty()) {
    KVSERVE_RETURN_IF_ERROR(WriteAddressFile(address_file, address));
  }
  if (on_listening) on_listening(address);
  return RunFrameSink(
      *listener, options, [&] { WaitForStopSignal(duration_seconds); }, progress);
}

}  // namespace kvserve::lab
