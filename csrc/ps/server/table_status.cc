#include "ps/server/table_status.h"

#include "common/clock.h"
#include "ps/durability/json.h"

namespace pscore::ps {

std::string table_status_json(ServerTable& t, int num_workers) {
  auto lk = t.lock();
  const ConsistencyState& c = t.consistency();
  Json pushed = Json::array(), waiting = Json::array(), done = Json::array(),
       clocks = Json::array(), parked = Json::array();
  for (int w = 0; w < num_workers; ++w) {
    if (c.done(w))
      done.push_back(w);
    else if (c.contributed(w))
      pushed.push_back(w);
    else
      waiting.push_back(w);
    clocks.push_back(c.clock(w));
  }
  for (int w : c.parked_workers()) parked.push_back(w);
  const int64_t since =
      t.spec().consistency.mode == Consistency::kSync ? c.round_opened_us() : c.oldest_parked_us();
  Json j = Json::object();
  j.set("table", t.spec().name);
  j.set("consistency", consistency_name(t.spec().consistency.mode));
  j.set("round", c.round());
  j.set("pushed", std::move(pushed));
  j.set("waiting_for", std::move(waiting));
  j.set("done", std::move(done));
  j.set("clocks", std::move(clocks));
  j.set("parked", std::move(parked));
  j.set("waited_ms", since ? (now_us() - since) / 1000 : 0);
  return j.dump();
}

}  // namespace pscore::ps
