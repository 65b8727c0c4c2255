#include "ps/server/server_stats.h"

#include <cmath>

#include "ps/durability/json.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {

int LatencyHistogram::bucket_of(int64_t us) {
  if (us < 1) return 0;
  int b = static_cast<int>(std::ceil(4.0 * std::log2(static_cast<double>(us) + 1.0)));
  return b >= kBuckets ? kBuckets - 1 : b;
}

void LatencyHistogram::record(int64_t us) {
  counts_[bucket_of(us)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

double LatencyHistogram::quantile(double q) const {
  uint64_t total = count();
  if (total == 0) return 0;
  uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  if (want == 0) want = 1;
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i].load(std::memory_order_relaxed);
    if (seen >= want) return std::pow(2.0, i / 4.0) - 1.0;
  }
  return std::pow(2.0, (kBuckets - 1) / 4.0);
}

std::string ServerStats::to_json(const std::string& extra) const {
  Json j = Json::object();
  uint64_t total = 0;
  Json by_type = Json::object();
  for (int t = 0; t < kTypes; ++t) {
    uint64_t n = requests[t].load();
    if (n == 0) continue;
    total += n;
    by_type.set(msg_type_name(static_cast<uint8_t>(t)), n);
  }
  j.set("requests", total);
  j.set("requests_by_type", by_type);
  j.set("bytes_in", bytes_in.load());
  j.set("bytes_out", bytes_out.load());
  j.set("rows_pushed", rows_pushed.load());
  j.set("rows_pulled", rows_pulled.load());
  j.set("queue_depth", static_cast<int64_t>(queue_depth.load()));
  j.set("connections", static_cast<int64_t>(connections.load()));
  j.set("connections_accepted", connections_accepted.load());
  j.set("dropped_connections", dropped_connections.load());
  j.set("auth_failures", auth_failures.load());
  j.set("errors", errors.load());
  j.set("latency_p50_us", latency.quantile(0.5));
  j.set("latency_p99_us", latency.quantile(0.99));
  j.set("latency_count", latency.count());
  std::string s = j.dump();
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

}  // namespace pscore::ps
