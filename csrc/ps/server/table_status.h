// A table's consistency state on this shard as JSON: what kTableStatus replies and what the
// stall inspector of a served shard reads (PsServer::tables_status_json).
#pragma once

#include <string>

#include "ps/storage/server_table.h"

namespace pscore::ps {

// The open sync round, the workers whose push it holds and those it still waits for, the
// finished workers, the ssp clocks and the workers parked behind the staleness bound, and
// waited_ms: how long the open round (sync) or the oldest parked push (ssp) has waited, 0 when
// nothing waits. Locks the table.
std::string table_status_json(ServerTable& t, int num_workers);

}  // namespace pscore::ps
