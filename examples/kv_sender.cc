// Copyright kvserve authors. kv_sender: the prefill side of an engine. It
// keeps its KV in a vLLM-layout paged cache, computes a request's KV layer
// by layer (a stand-in for its prefill) and streams each layer to the
// receiver as soon as the layer is final, so compression and the transfer
// overlap the rest of the prefill.
//
//   kv_sender HOST:PORT [--profile SPEC] [--tokens N] [--secret S]
//
// Prints the frame size and a digest of the KV; kv_receiver prints the
// digest of what it imported (equal for a lossless profile such as "none").
#include <kvserve/codec.h>
#include <kvserve/connector.h>
#include <kvserve/paged.h>
#include <kvserve/profile.h>
#include <kvserve/transport.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "example_kv.h"

namespace {

int Fail(const char* what, const kvserve::Status& status) {
  std::fprintf(stderr, "kv_sender: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kv_sender HOST:PORT [--profile SPEC] [--tokens N] [--secret S]\n");
    return 2;
  }
  const std::string address = argv[1];
  std::string spec = "none", secret = "example-secret";
  int tokens = 1000;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--profile")
      spec = argv[i + 1];
    else if (flag == "--tokens")
      tokens = std::atoi(argv[i + 1]);
    else if (flag == "--secret")
      secret = argv[i + 1];
    else
      return Fail("arguments", kvserve::Status::InvalidArgument("unknown flag " + flag));
  }

  // The engine's cache: vLLM's [2, num_blocks, 16, kv_heads, head_dim] per
  // layer. The request got every third block, in descending order.
  constexpr int kBlockSize = 16;
  const int blocks = (tokens + kBlockSize - 1) / kBlockSize;
  auto cache = example::AllocateCache(kvserve::PagedLayout::kVllm, 3 * blocks, kBlockSize);
  if (!cache.ok()) return Fail("allocating the cache", cache.status());
  std::vector<int32_t> block_table;
  for (int b = 0; b < blocks; ++b) block_table.push_back(3 * (blocks - 1 - b));
  auto pages = cache->layers.MutableView(block_table, tokens);
  if (!pages.ok()) return Fail("block table", pages.status());

  auto profile = kvserve::Profile::Parse(spec);
  if (!profile.ok()) return Fail("--profile", profile.status());
  auto encoder = kvserve::EncoderContext::Create(*profile, {.threads = 1});
  if (!encoder.ok()) return Fail("encoder", encoder.status());

  auto transport = kvserve::NewTcpTransport();
  kvserve::ConnectionOptions options;
  options.secret = secret;
  options.local_id = "kv_sender";
  auto connection = kvserve::Connection::Dial(*transport, address, options);
  if (!connection.ok()) return Fail("connecting", connection.status());

  // The prefill: after each layer's attention the layer's KV is in the
  // pages, and layer_done(l) hands it to the connector.
  auto sent =
      kvserve::StreamKvWhileProducing(**connection, **encoder, pages->AsConst(), /*transfer_id=*/1,
                                      [&](const std::function<void(int)>& layer_done) {
                                        for (int layer = 0; layer < example::kLayers; ++layer) {
                                          example::ComputeLayer(*pages, layer);
                                          layer_done(layer);
                                        }
                                        return kvserve::Status::Ok();
                                      });
  if (!sent.ok()) return Fail("streaming the KV", sent.status());
  const double kv_bytes = static_cast<double>(pages->AsConst().LogicalBytes());
  std::printf("sent %d tokens x %d layers with %s: %" PRIu64 " frame bytes (%.2fx), %.1f ms\n",
              tokens, example::kLayers, profile->ToString().c_str(), sent->transfer.frame_bytes,
              kv_bytes / static_cast<double>(sent->transfer.frame_bytes), sent->kv_seconds * 1e3);
  std::printf("digest %016" PRIx64 "\n", example::Digest(pages->AsConst()));
  return 0;
}
