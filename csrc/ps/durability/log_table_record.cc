#include "ps/durability/log_table_record.h"

#include <cstdint>
#include <stdexcept>

#include "ps/durability/checkpoint_metadata.h"
#include "ps/durability/json.h"

namespace pscore::ps {

void write_log_table_record(WireWriter<>& w, const TableLayout& layout) {
  w.u32(kCheckpointFormatVersion).string(table_layout_json(layout).dump(), "table layout");
}

TableLayout read_log_table_record(WireReader& r, const std::string& where) {
  const uint32_t version = r.u32("table layout version");
  if (version != kCheckpointFormatVersion)
    throw std::invalid_argument(where + ": table layout version " + std::to_string(version) +
                                " is not one this build reads (" +
                                std::to_string(kCheckpointFormatVersion) + ")");
  const std::string text = r.string("table layout");
  Json json;
  try {
    json = Json::parse(text);
  } catch (const std::exception& e) {
    throw std::invalid_argument(where + ": table layout is not JSON: " + e.what());
  }
  return table_layout_from_json(MetadataValue(json, where, "table"));
}

}  // namespace pscore::ps
