// A shard checkpoint file (safetensors: header length, JSON header, tensors) as a recovering
// parameter server reads it: the input is written as the snapshot in the recover directory and
// ShardState::recover() loads it (header, metadata JSON, table layouts, tensor sizes, values).
// The safetensors reader's own contract is checked too: every tensor it accepts lies inside the
// file and has exactly the bytes its dtype and shape call for.
#include <cstdio>
#include <string>

#include "ps/durability/safetensors_file.h"
#include "recovering_shard.h"

using namespace pscore;
using namespace pscore::ps;

namespace {

uint64_t element_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "I64" || dtype == "F64") return 8;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 1;
}

// The reader's contract for every tensor it accepts: inside the file, and exactly the bytes its
// dtype and shape call for (counted without overflow).
void check_tensor(const TensorEntry& e) {
  unsigned __int128 bytes = element_bytes(e.dtype);
  for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
  fuzz::require(bytes == e.nbytes, "a tensor's bytes do not match its shape");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::RecoveringShard& files = fuzz::recovering_shard();
  fuzz::write_file(files.snapshot, data, size);
  fuzz::expect_documented_errors([&] {
    SafetensorsReader file(files.snapshot);
    for (const auto& [name, value] : file.metadata()) file.metadata_value(name);
    for (const auto& [name, tensor] : file.tensors()) check_tensor(tensor);
  });
  std::remove(files.log.c_str());
  fuzz::expect_documented_errors([&] {
    ShardState shard(files.opts);
    shard.recover();
  });
  return 0;
}
