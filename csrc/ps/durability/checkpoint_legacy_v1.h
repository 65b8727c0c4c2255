// LEGACY, FROZEN: the table layouts of format-1 checkpoints ("format": "pscore.ps.shard/1",
// written up to commit d0a3da7), which stored each layout as the hex of the wire encoding of
// the day, and of the kCatalogAddWireV1 / kCreatePartWireV1 records of write-ahead logs written
// up to commit 780a580 (the same encoding, in binary). This is a copy of that decoding,
// independent of the live wire code in table_spec.cc: never change it with the wire.
// tests/data/ps_checkpoint_v1 is such a checkpoint, tests/data/ps_wal_v1 such logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ps/wire/table_spec.h"

namespace pscore::ps::legacy_v1 {

// Decodes one layout; throws std::invalid_argument starting with `where` (the file and the
// field) when the text is not the hex of a whole, valid layout.
TableLayout decode_layout_hex(const std::string& hex, const std::string& where);
// Decodes the layout at the front of bytes[0, n), where more fields may follow it; *used
// receives its length. Throws like decode_layout_hex.
TableLayout decode_layout_prefix(const uint8_t* bytes, size_t n, size_t* used,
                                 const std::string& where);

}  // namespace pscore::ps::legacy_v1
