// Copyright kvserve authors. kv_receiver: the decode side of an engine. It
// accepts one sender, and when a frame's header arrives it allocates blocks
// for the request in its own paged cache (FlashInfer's HND layout, blocks
// of 32 tokens, whatever the sender uses) and lets the connector decode
// every chunk record into them as it arrives.
//
//   kv_receiver ADDRESS_FILE [--listen HOST:PORT] [--secret S]
//
// Writes the address it listens on to ADDRESS_FILE, then prints what it
// received and the digest of the imported KV.
#include <kvserve/codec.h>
#include <kvserve/connector.h>
#include <kvserve/paged.h>
#include <kvserve/transport.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "example_kv.h"

namespace {

int Fail(const char* what, const kvserve::Status& status) {
  std::fprintf(stderr, "kv_receiver: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kv_receiver ADDRESS_FILE [--listen HOST:PORT] [--secret S]\n");
    return 2;
  }
  std::string listen = "127.0.0.1:0", secret = "example-secret";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--listen")
      listen = argv[i + 1];
    else if (flag == "--secret")
      secret = argv[i + 1];
    else
      return Fail("arguments", kvserve::Status::InvalidArgument("unknown flag " + flag));
  }
  auto transport = kvserve::NewTcpTransport();
  auto listener = transport->Listen(listen);
  if (!listener.ok()) return Fail("listening", listener.status());
  std::ofstream(argv[1]) << (*listener)->Address() << "\n";

  kvserve::ConnectionOptions options;
  options.secret = secret;
  options.local_id = "kv_receiver";
  auto connection = kvserve::Connection::Accept(**listener, options, /*timeout_seconds=*/60);
  if (!connection.ok()) return Fail("accepting", connection.status());

  // Allocated once the header says how many tokens the request has.
  constexpr int kBlockSize = 32;
  std::optional<example::EngineCache> cache;
  std::vector<int32_t> block_table;
  std::optional<kvserve::MutablePagedKvView> pages;
  auto destination =
      [&](uint64_t, const kvserve::FrameInfo& info) -> kvserve::Result<kvserve::KvDestination> {
    if (info.shape.layers != example::kLayers || info.shape.kv_heads != example::kKvHeads ||
        info.shape.head_dim != example::kHeadDim || info.dtype != example::kDType)
      return kvserve::Status::InvalidArgument("the frame does not fit this engine's model");
    const int blocks = (info.shape.tokens + kBlockSize - 1) / kBlockSize;
    KVSERVE_ASSIGN_OR_RETURN(cache, example::AllocateCache(kvserve::PagedLayout::kFlashInferHnd,
                                                           blocks + 4, kBlockSize));
    block_table.clear();
    for (int b = 0; b < blocks; ++b) block_table.push_back((b * 7) % (blocks + 4));  // scattered
    KVSERVE_ASSIGN_OR_RETURN(pages, cache->layers.MutableView(block_table, info.shape.tokens));
    return kvserve::KvDestination(*pages);
  };
  auto decoder = kvserve::DecoderContext::Create({.threads = 1});
  if (!decoder.ok()) return Fail("decoder", decoder.status());
  auto received =
      kvserve::ReceiveKv(**connection, **decoder, destination, {}, /*timeout_seconds=*/60);
  if (!received.ok()) return Fail("receiving the KV", received.status());
  std::printf("received %d tokens x %d layers (%s): %" PRIu64 " records, %" PRIu64
              " bytes, decoded in %.1f ms\n",
              received->info.shape.tokens, received->info.shape.layers,
              received->info.profile.ToString().c_str(), received->records,
              received->transfer.frame_bytes, received->decode_seconds * 1e3);
  std::printf("digest %016" PRIx64 "\n", example::Digest(pages->AsConst()));
  return 0;
}
