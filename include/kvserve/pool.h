// Copyright kvserve authors. The KV pool: compressed frames of prefix chunks,
// stored so that a request sharing a token prefix can fetch the KV instead of
// recomputing it (paper §7.2, Fig. 14).
//
// A value is one frame (docs/format.md) keyed by (model id, prefix hash,
// profile spec). The same prefix may be stored under several profiles;
// Lookup tells which exist and their sizes, so the controller can pick the
// encoding to fetch for the measured bandwidth, or recompute.
//
// Backends: an embedded in-memory pool (byte budget, LRU), a remote pool
// served by `kvserve pool serve` over the authenticated transport, and
// Redis. docs/transport.md §KV pool gives the key scheme of each.
#ifndef KVSERVE_POOL_H_
#define KVSERVE_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve {

// XXH3-64 (seed 0) of the token ids as little-endian int32: the prefix hash.
uint64_t PrefixHash(std::span<const int32_t> tokens);
// PrefixHash of tokens[0, k * chunk_tokens) for k = 1 .. tokens.size() /
// chunk_tokens (full chunks only), in one pass. Empty for chunk_tokens <= 0.
std::vector<uint64_t> PrefixChunkHashes(std::span<const int32_t> tokens, int chunk_tokens);

// Limits every backend enforces (InvalidArgument beyond them).
inline constexpr size_t kMaxPoolModelIdBytes = 255;
inline constexpr size_t kMaxPoolProfileBytes = 4096;

struct PoolKey {
  std::string model_id;  // 1..255 bytes, any bytes
  uint64_t prefix_hash = 0;
  std::string profile;   // canonical profile spec (or "none" for raw), 1..4096 bytes
  bool operator==(const PoolKey&) const = default;
};

// InvalidArgument when a field is empty or too long.
Status ValidatePoolKey(const PoolKey& key);

// One stored encoding of a prefix.
struct PoolEntryInfo {
  std::string profile;
  uint64_t bytes = 0;
};

struct PoolStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;       // stored value bytes
  uint64_t hits = 0;        // Get found the key
  uint64_t misses = 0;
  uint64_t evictions = 0;   // entries evicted by the byte budget
};

// Delivers one stored frame to `handler` (see KvPool::GetRecords).
using PoolFrameReader = std::function<Status(const FrameHandler& handler)>;

// Thread safety: every implementation is thread-safe.
class KvPool {
 public:
  virtual ~KvPool() = default;

  // Stores `frame` under `key`, replacing any previous value. InvalidArgument
  // for a bad key; ResourceExhausted when the value can never fit the
  // backend's limits; Unavailable when the backend cannot be reached.
  [[nodiscard]] virtual Status Put(const PoolKey& key, std::span<const uint8_t> frame) = 0;
  // Copies the value of `key` into `*frame` (replacing its contents).
  // NotFound when absent (never stored, deleted or evicted).
  [[nodiscard]] virtual Status Get(const PoolKey& key, std::vector<uint8_t>* frame) = 0;
  // Gets several keys at once: (*frames)[i] and the i-th status are what
  // Get(keys[i]) would give. The default calls Get per key; backends that
  // can pipeline (Redis Cluster: one pipeline per node, all nodes at once)
  // answer in about one round trip.
  [[nodiscard]] virtual std::vector<Status> GetMany(std::span<const PoolKey> keys,
                                                    std::vector<std::vector<uint8_t>>* frames);
  // Streams the frame stored under `key` to `handler`, record by record:
  // on_header (transfer id 0) with the frame's header, then on_record per
  // chunk record in frame order (through place_record when set), each as
  // the backend delivers it, so a caller can forward or decode a record
  // while the rest is still on the wire. NotFound when absent; Corruption,
  // before anything is delivered, when the stored value is not a frame;
  // the handler's first error (nothing more is delivered); Unavailable
  // when the backend is lost mid-frame. The default splits what GetShared
  // gives; the remote pool has its server stream the records.
  [[nodiscard]] virtual Status GetRecords(const PoolKey& key, const FrameHandler& handler);
  // Streams the frames stored under `keys`, in order, to a reader that
  // takes them one after another (a decode worker fetching a prefix's
  // chunks): calls `each(i, read)` for i = 0, 1, ... while it returns true,
  // where `read(handler)` delivers the frame of keys[i] as GetRecords
  // would (NotFound before any handler call when the key is absent). The
  // sequence ends after the first `read` that fails, after `each` returns
  // false, and when `each` returns without running `read`; `read` runs at
  // most once, on the calling thread, and only inside its `each` call.
  // The default runs GetRecords per key; the remote pool asks for every key
  // in one request, so the server streams frame i+1 while the reader is
  // still finishing frame i (e.g. waiting for its last windows to decode)
  // instead of waiting for the reader's next request.
  virtual void GetRecordsInOrder(std::span<const PoolKey> keys,
                                 const std::function<bool(size_t i, const PoolFrameReader& read)>& each);
  // The value of `key` as shared, immutable bytes, as Get would give them:
  // without a copy where the backend keeps values in this process (the
  // embedded pool, whose evicted or replaced value then lives on until the
  // last holder lets go); the default Gets a copy.
  [[nodiscard]] virtual Result<std::shared_ptr<const std::vector<uint8_t>>> GetShared(
      const PoolKey& key);
  // Removes `key`. NotFound when absent.
  [[nodiscard]] virtual Status Delete(const PoolKey& key) = 0;
  // The profiles stored for (model_id, prefix_hash) with their sizes, sorted
  // by profile; empty when none.
  [[nodiscard]] virtual Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id,
                                                                  uint64_t prefix_hash) = 0;
  // Counters and occupancy (as far as the backend knows them).
  [[nodiscard]] virtual Result<PoolStats> Stats() = 0;
};

// The frame of `key` in `pool` as a FrameSource (a receiver's input, e.g.
// ReceiveKvWith, or a decode worker fetching a prefix chunk itself): its
// records are streamed with GetRecords and handed to the handler under
// `transfer_id`. Stats count the frame's header and records and the time
// from the request to the last record. NotFound when the pool lacks the
// key (before any handler call); the pool's or the handler's error
// otherwise. `pool` must outlive the source.
FrameSource PoolFrameSource(KvPool& pool, PoolKey key, uint64_t transfer_id);
// As above, for the frame `read` delivers (e.g. one frame of
// KvPool::GetRecordsInOrder); the source must run inside that frame's
// `each` call.
FrameSource PoolFrameSource(const PoolFrameReader& read, uint64_t transfer_id);

struct MemoryPoolOptions {
  // Values are evicted least-recently-used first (Put and Get both count as
  // use) to keep the stored bytes within this budget. A value larger than
  // the budget is refused with ResourceExhausted.
  uint64_t budget_bytes = uint64_t{1} << 30;
};

// The embedded default pool.
std::unique_ptr<KvPool> NewMemoryPool(MemoryPoolOptions options = {});

struct RemotePoolOptions {
  std::string address;               // of a `kvserve pool serve`
  ConnectionOptions connection;      // secret, timeouts, goodput callback
  // Reconnect attempts per request when the connection is broken.
  int reconnect_attempts = 2;
  // Get responses of at least this many bytes are reported as goodput
  // samples (response bytes / request-to-response seconds).
  uint64_t goodput_min_bytes = 256 * 1024;
};

// A client of `kvserve pool serve`. Requests are serialised over one
// connection, dialled on first use and redialled after a failure; a request
// whose connection fails is retried on a fresh one (all operations are
// idempotent) and otherwise fails with Unavailable naming the address.
// PermissionDenied when the server refuses our secret.
std::unique_ptr<KvPool> NewRemotePool(Transport* transport, RemotePoolOptions options);

struct PoolServerOptions {
  std::string listen_address = "127.0.0.1:7400";
  ConnectionOptions connection;  // secret and limits for clients
  // Clients served at once (admission.max_connections; more are refused)
  // and the budget and deadline of peers still in the handshake
  // (docs/transport.md §3, admission).
  AdmissionOptions admission{};
  // A client idle this long is disconnected.
  double idle_timeout_seconds = 300;
};

// Serves a KvPool (not owned; must outlive the server) over `transport`
// (not owned). One thread accepts, one thread per client connection.
//
// Thread safety: thread-safe; Stop may be called from any thread.
class PoolServer {
 public:
  // Listens and starts serving. IOError/Unavailable when it cannot listen.
  static Result<std::unique_ptr<PoolServer>> Start(Transport* transport, KvPool* pool,
                                                   PoolServerOptions options);
  ~PoolServer();  // Stops.
  // The bound address (with the real port).
  std::string address() const;
  // Closes the listener and every connection and joins the threads.
  void Stop();
  // Connections refused by authentication so far.
  int64_t auth_failures() const;

  class Impl;

 private:
  explicit PoolServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct RedisPoolOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;          // AUTH when non-empty
  int database = 0;              // SELECT when non-zero
  std::string key_prefix = "kvserve";  // namespace of every key
  double connect_timeout_seconds = 2.0;
  double command_timeout_seconds = 10.0;
  // After a connection error, reconnect attempts (with 100 ms doubling
  // back-off, capped at 1 s) before the request fails with Unavailable.
  int reconnect_attempts = 5;
  // Largest value accepted (Redis' own limit is 512 MiB).
  uint64_t max_value_bytes = uint64_t{512} << 20;
};

// A Redis-backed pool (hiredis). Values are stored binary-safe; a hash per
// prefix indexes its profiles. After Redis restarts, the next request
// reconnects and is retried; it fails with Unavailable ("redis at
// host:port: ...") when Redis stays down. Stats() reports what Redis holds
// under the prefix (entries, bytes) and this client's hit/miss counters.
// Requests are serialised over one connection.
Result<std::unique_ptr<KvPool>> NewRedisPool(RedisPoolOptions options);

struct RedisClusterPoolOptions {
  // "host:port" of one or more cluster nodes; the slot map is read from the
  // first that answers CLUSTER SLOTS.
  std::vector<std::string> seeds = {"127.0.0.1:7000"};
  std::string password;                // AUTH on every node when non-empty
  std::string key_prefix = "kvserve";  // namespace of every key, no ':'
  double connect_timeout_seconds = 1.0;
  double command_timeout_seconds = 10.0;
  // A request that meets a connection error, CLUSTERDOWN, TRYAGAIN or
  // MASTERDOWN (a master failing over) is retried this many times, the slot
  // map refreshed before each, with 100 ms doubling back-off capped at 1 s
  // (the default rides out a failover of up to about 8 s); then Unavailable.
  int retry_attempts = 10;
  // MOVED / ASK redirections followed per attempt.
  int max_redirects = 8;
  // A frame larger than this is split across keys of the same slot, written
  // in one MULTI/EXEC and read back in one pipeline. >= 1 KiB.
  uint64_t max_piece_bytes = uint64_t{8} << 20;
  // Largest frame accepted.
  uint64_t max_value_bytes = uint64_t{4} << 30;
};

// A Redis Cluster backed pool (hiredis, one connection per node). Keys map to
// slots by CRC16; an entry's index and frame pieces share a hash tag
// {<model>:<hash>}, so each Put/Delete is one transaction on one master.
// Follows MOVED (and refreshes the slot map) and ASK; retries across a
// failover. Each stored frame carries its size and XXH3-64 in the index and
// Get verifies both, so a frame half-lost in a failover (asynchronous
// replication) is reported NotFound (a piece missing) or Corruption (bytes
// differ), never returned. docs/transport.md §KV pool has the key scheme.
// Unavailable when no seed answers. Requests are serialised over the
// connections.
Result<std::unique_ptr<KvPool>> NewRedisClusterPool(RedisClusterPoolOptions options);

}  // namespace kvserve

#endif  // KVSERVE_POOL_H_
