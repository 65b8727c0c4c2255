// A shard's counters: requests by type, bytes in and out, sparse rows, queue depth, dropped
// connections and a request latency histogram (log-spaced buckets, lock-free) for p50/p99.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace pscore::ps {

class LatencyHistogram {
 public:
  void record(int64_t us);
  // The q-quantile (0..1) in microseconds, from bucket upper bounds; 0 when empty.
  double quantile(double q) const;
  uint64_t count() const;

 private:
  // Bucket i holds latencies below 2^(i/4) us: 4 buckets per doubling up to ~2^32 us.
  static constexpr int kBuckets = 128;
  static int bucket_of(int64_t us);
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
};

struct ServerStats {
  static constexpr int kTypes = 64;  // indexed by MsgType value
  std::array<std::atomic<uint64_t>, kTypes> requests{};
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0};
  std::atomic<uint64_t> rows_pushed{0}, rows_pulled{0};
  std::atomic<int64_t> queue_depth{0}, connections{0};
  std::atomic<uint64_t> connections_accepted{0}, dropped_connections{0}, auth_failures{0};
  std::atomic<uint64_t> errors{0};
  LatencyHistogram latency;

  void count_request(uint8_t type) { requests[type % kTypes].fetch_add(1); }
  // A JSON object with every counter, the latency quantiles and `extra` members appended.
  std::string to_json(const std::string& extra) const;
};

}  // namespace pscore::ps
