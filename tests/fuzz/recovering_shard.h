// The shard the durable-file harnesses recover (and make_corpus fills): its options, with the
// recover directory in the fuzz scratch directory, and the two files recover() reads there.
#pragma once
#include <string>

#include "fuzz_support.h"
#include "ps/server/shard_state.h"

namespace pscore::fuzz {

struct RecoveringShard {
  ps::ShardOptions opts;  // shard 0 of 1, two workers
  std::string snapshot;   // <recover dir>/shard-00000-of-00001.safetensors
  std::string log;        // <recover dir>/shard-00000-of-00001.wal
};

inline const RecoveringShard& recovering_shard() {
  static const RecoveringShard shard = [] {
    RecoveringShard r;
    r.opts.recover_dir = scratch_dir();
    r.opts.num_workers = 2;
    r.snapshot = ps::ShardState(r.opts).snapshot_path(r.opts.recover_dir);
    r.log = r.snapshot.substr(0, r.snapshot.size() - std::string(".safetensors").size()) + ".wal";
    return r;
  }();
  return shard;
}

}  // namespace pscore::fuzz
