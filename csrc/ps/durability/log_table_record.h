// How the write-ahead log records a table's layout (its kCatalogAdd and kCreatePart records):
// a u32 version, then the layout as the JSON of the checkpoint metadata of that version
// (checkpoint_metadata.h): one description of a table for everything durable, independent of
// the wire encoding of table specs, so a change on the wire cannot break recovery.
#pragma once

#include <string>

#include "common/wire_codec.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

// Appends the record of `layout` (the current checkpoint metadata version and its JSON).
void write_log_table_record(WireWriter<>& w, const TableLayout& layout);
// Reads a record written by write_log_table_record; throws std::invalid_argument naming
// `where` (the log and the record) and the field when it is not a layout this build reads.
TableLayout read_log_table_record(WireReader& r, const std::string& where);

}  // namespace pscore::ps
