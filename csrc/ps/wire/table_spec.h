// What a table is: its kind and shape, initializer, server-side optimizer and consistency mode,
// and (for dense tables) how its elements are laid out over the shards. Encoded on the wire.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/optimizer_formulas.h"
#include "common/wire_codec.h"
#include "ps/wire/byte_buffer.h"

namespace pscore::ps {

enum class TableKind : uint8_t { kDense = 0, kSparse = 1 };
using pscore::OptimizerKind;  // common/optimizer_formulas.h
enum class InitKind : uint8_t { kZeros = 0, kUniform = 1, kNormal = 2, kConstant = 3 };
enum class Consistency : uint8_t { kAsync = 0, kSync = 1, kSsp = 2 };

// Hyper-parameters use torch.optim's names and meanings; the Python layer fills in its defaults.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.01;
  double momentum = 0;   // SGD, RMSprop
  double dampening = 0;  // SGD
  double weight_decay = 0;
  bool nesterov = false;                               // SGD
  double beta1 = 0.9, beta2 = 0.999;                   // Adam, AdamW
  double eps = 1e-8;                                   // Adam, AdamW, RMSprop, Adagrad
  bool amsgrad = false;                                // Adam, AdamW
  double lr_decay = 0, initial_accumulator_value = 0;  // Adagrad
  double alpha = 0.99;                                 // RMSprop
  bool centered = false;                               // RMSprop
  double clip_norm = 0;   // > 0: scale each pushed gradient to this L2 norm at most
  double clip_value = 0;  // > 0: clamp each pushed gradient element to [-v, v]

  // Per-element state slots the optimizer keeps (momentum buffers, moments, ...).
  int num_slots() const;
  void validate() const;  // throws std::invalid_argument naming the bad hyper-parameter
};

// The fields of an OptimizerSpec under torch.optim's names, for the settings a table reports
// and the checkpoint metadata.
inline constexpr std::pair<const char*, double OptimizerSpec::*> kOptimizerHyperParameters[] = {
    {"lr", &OptimizerSpec::lr},
    {"momentum", &OptimizerSpec::momentum},
    {"dampening", &OptimizerSpec::dampening},
    {"weight_decay", &OptimizerSpec::weight_decay},
    {"beta1", &OptimizerSpec::beta1},
    {"beta2", &OptimizerSpec::beta2},
    {"eps", &OptimizerSpec::eps},
    {"lr_decay", &OptimizerSpec::lr_decay},
    {"initial_accumulator_value", &OptimizerSpec::initial_accumulator_value},
    {"alpha", &OptimizerSpec::alpha}};
inline constexpr std::pair<const char*, bool OptimizerSpec::*> kOptimizerFlags[] = {
    {"nesterov", &OptimizerSpec::nesterov},
    {"amsgrad", &OptimizerSpec::amsgrad},
    {"centered", &OptimizerSpec::centered}};
inline constexpr std::pair<const char*, double OptimizerSpec::*> kGradientClipping[] = {
    {"clip_norm", &OptimizerSpec::clip_norm}, {"clip_value", &OptimizerSpec::clip_value}};

// uniform: U[a, b); normal: N(mean a, std b); constant: a. Values depend only on (seed, row id,
// column), never on creation order, so a recovered server recreates identical rows.
struct InitializerSpec {
  InitKind kind = InitKind::kZeros;
  double a = 0, b = 0;
  uint64_t seed = 0;
};

struct ConsistencySpec {
  Consistency mode = Consistency::kAsync;
  int32_t staleness = 0;       // ssp: a worker may be this many steps ahead of the slowest
  int32_t backup_workers = 0;  // sync: apply a round after num_workers - backup_workers pushes
};

// One setting of a table as text ("dim", "64"); of_optimizer: a hyper-parameter of its optimizer.
struct TableSetting {
  std::string key;
  std::string value;
  bool of_optimizer = false;
};

struct TableSpec {
  std::string name;
  TableKind kind = TableKind::kDense;
  std::vector<int64_t> shape;  // dense: the full tensor's shape; sparse: {dim}
  int64_t capacity = 0;        // sparse: rows to make room for up front (over all shards); 0: grow
  int64_t max_rows_per_shard = 0;  // sparse: the most rows one shard holds; 0: no limit
  InitializerSpec init;
  OptimizerSpec optimizer;
  ConsistencySpec consistency;

  int64_t numel() const;  // dense: product of shape
  int64_t dim() const;    // sparse: row width
  void validate(int num_workers) const;
  bool same_as(const TableSpec& o) const;      // equal in every field that changes behaviour
  std::vector<TableSetting> settings() const;  // every setting, in a fixed order
  // Each setting that differs, as "setting: mine vs other" ("dim: 64 vs 32").
  std::vector<std::string> differences(const TableSpec& o) const;
  // differences(requested) joined with "; ", for errors.
  std::string describe_differences(const TableSpec& requested) const;
};

// One contiguous slice [offset, offset + numel) of a dense table, held by `shard`.
struct DensePart {
  int32_t shard = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

struct TableLayout {
  uint32_t id = 0;
  TableSpec spec;
  std::vector<DensePart> parts;  // dense only; sparse rows hash to shards
};

// A stable 32-bit id for a table name (FNV-1a, never 0).
uint32_t table_id_for(const std::string& name);
const char* consistency_name(Consistency c);
const char* optimizer_name(OptimizerKind k);

// The wire encoding of specs and layouts (docs/wire.md); durable files describe tables in
// their own format (checkpoint_metadata.h, log_table_record.h).
void encode_spec(WireWriter<ByteBuffer&>& w, const TableSpec& s);
TableSpec decode_spec(WireReader& r);
void encode_layout(WireWriter<ByteBuffer&>& w, const TableLayout& l);
TableLayout decode_layout(WireReader& r);

}  // namespace pscore::ps
