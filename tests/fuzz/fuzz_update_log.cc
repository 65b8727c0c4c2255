// A parameter server's write-ahead log as a recovering shard replays it: the input is written
// as the log in the recover directory (no snapshot) and ShardState::recover() reads every
// record (length-prefixed, checksummed) and applies it: table layouts (current and format-1),
// initial values, dense and sparse updates, assignments, finished workers, global steps.
#include <cstdio>
#include <string>

#include "fuzz_support.h"
#include "ps/server/shard_state.h"
#include "ps/wire/ps_protocol.h"

using namespace pscore;
using namespace pscore::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ShardOptions opts;
  opts.recover_dir = fuzz::scratch_dir();
  opts.num_workers = 2;
  ShardState probe(opts);
  const std::string snapshot = probe.snapshot_path(opts.recover_dir);
  const std::string log = snapshot.substr(0, snapshot.size() - 12) + ".wal";
  std::remove(snapshot.c_str());
  fuzz::write_file(log, data, size);
  fuzz::expect_documented_errors([&] {
    ShardState shard(opts);
    try {
      shard.recover();
    } catch (const TableNotFound&) {  // a record for a table the log never created
    }
  });
  return 0;
}
