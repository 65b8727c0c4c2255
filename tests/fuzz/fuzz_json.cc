// The strict JSON parser behind safetensors headers and checkpoint metadata, and the reading of
// a table layout from that JSON (the version-2 "tables" entries of checkpoints and the
// write-ahead log's table records) with errors naming the field.
#include <string>

#include "fuzz_support.h"
#include "ps/durability/checkpoint_metadata.h"
#include "ps/durability/json.h"

using namespace pscore::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pscore::fuzz::expect_documented_errors([&] {
    Json j = Json::parse(text);
    Json again = Json::parse(j.dump());
    pscore::fuzz::require(again.dump() == j.dump(), "dump() does not parse back to itself");
    table_layout_from_json(MetadataValue(j, "fuzz checkpoint", "tables[0]"));
  });
  return 0;
}
