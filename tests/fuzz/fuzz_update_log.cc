// A parameter server's write-ahead log as a recovering shard replays it: the input is written
// as the log in the recover directory (no snapshot) and ShardState::recover() reads every
// record (length-prefixed, checksummed) and applies it: table layouts (current and format-1),
// initial values, dense and sparse updates, assignments, finished workers, global steps.
#include <cstdio>

#include "ps/wire/ps_protocol.h"
#include "recovering_shard.h"

using namespace pscore;
using namespace pscore::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::RecoveringShard& files = fuzz::recovering_shard();
  std::remove(files.snapshot.c_str());
  fuzz::write_file(files.log, data, size);
  fuzz::expect_documented_errors([&] {
    ShardState shard(files.opts);
    try {
      shard.recover();
    } catch (const TableNotFound&) {  // a record for a table the log never created
    }
  });
  return 0;
}
