// Copyright kvserve authors. The connector's receiving side: decodes each
// chunk record of a streamed frame into the receiver's destination as it
// arrives (kvserve/connector.h).
#include <string>
#include <variant>

#include "kvserve/connector.h"

namespace kvserve {
namespace {

// One frame's reception: the FrameHandler callbacks and what they found.
class KvReception {
 public:
  KvReception(DecoderContext& decoder, const KvDestinationCallback& destination,
              const KvReceiveOptions& options)
      : decoder_(decoder), destination_(destination), options_(options) {}

  FrameHandler Handler() {
    FrameHandler h;
    h.on_header = [this](uint64_t transfer_id, std::span<const uint8_t> header) {
      return Refusing(OnHeader(transfer_id, header));
    };
    h.on_record = [this](std::span<const uint8_t> record) { return Refusing(OnRecord(record)); };
    return h;
  }

  // The result of ReceiveFrame(From) as the connector reports it.
  Result<KvReceiveResult> Finish(Result<TransferStats> transfer) {
    if (options_.refused) *options_.refused = refused_;
    if (!transfer.ok()) return transfer.status();
    if (!started_ || result_.records != result_.info.chunk_count) {
      if (options_.refused) *options_.refused = true;
      return Status::Corruption("transfer " + std::to_string(transfer->transfer_id) +
                                " ended after " + std::to_string(result_.records) + " of " +
                                std::to_string(result_.info.chunk_count) + " records");
    }
    result_.transfer = *transfer;
    return std::move(result_);
  }

 private:
  Status Refusing(Status s) {
    if (!s.ok()) refused_ = true;
    return s;
  }

  Status OnHeader(uint64_t transfer_id, std::span<const uint8_t> header) {
    if (options_.keep_mask) options_.keep_mask->clear();
    KVSERVE_ASSIGN_OR_RETURN(size_t used, decoder_.Start(header));
    if (used != header.size()) return Status::Corruption("frame header: trailing bytes");
    result_.info = decoder_.info();
    KVSERVE_ASSIGN_OR_RETURN(destination_value_, destination_(transfer_id, result_.info));
    started_ = true;
    return Status::Ok();
  }

  Status OnRecord(std::span<const uint8_t> record) {
    if (!started_) return Status::Corruption("chunk record before the frame header");
    const double start = MonotonicSeconds();
    Result<size_t> used = std::visit(
        [&](const auto& out) { return decoder_.DecodeRecord(record, out, options_.keep_mask); },
        destination_value_);
    result_.decode_seconds += MonotonicSeconds() - start;
    KVSERVE_RETURN_IF_ERROR(used.status());
    if (*used != record.size()) return Status::Corruption("chunk record: trailing bytes");
    ++result_.records;
    return Status::Ok();
  }

  DecoderContext& decoder_;
  const KvDestinationCallback& destination_;
  const KvReceiveOptions& options_;
  KvDestination destination_value_;
  KvReceiveResult result_;
  bool started_ = false;
  bool refused_ = false;
};

}  // namespace

Result<KvReceiveResult> ReceiveKv(Connection& connection, DecoderContext& decoder,
                                  const KvDestinationCallback& destination,
                                  const KvReceiveOptions& options, double timeout_seconds) {
  KvReception reception(decoder, destination, options);
  return reception.Finish(ReceiveFrame(connection, reception.Handler(), timeout_seconds));
}

Result<KvReceiveResult> ReceiveKvFrom(Connection& connection, const Message& begin,
                                      DecoderContext& decoder,
                                      const KvDestinationCallback& destination,
                                      const KvReceiveOptions& options) {
  KvReception reception(decoder, destination, options);
  return reception.Finish(ReceiveFrameFrom(connection, begin, reception.Handler()));
}

Result<KvReceiveResult> ReceiveKvWith(const FrameSource& source, DecoderContext& decoder,
                                      const KvDestinationCallback& destination,
                                      const KvReceiveOptions& options) {
  KvReception reception(decoder, destination, options);
  return reception.Finish(source(reception.Handler()));
}

}  // namespace kvserve
