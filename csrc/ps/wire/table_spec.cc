#include "ps/wire/table_spec.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pscore::ps {
namespace {

void require(bool ok, const std::string& table, const std::string& what) {
  if (!ok) throw std::invalid_argument("table '" + table + "': " + what);
}

// The shortest text that reads back as v exactly (so two values that differ never show alike).
std::string shown(double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string shown(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// "zeros", "uniform(low=0, high=1)", "normal(mean=0, std=0.1)", "constant(value=2)".
std::string init_shown(const InitializerSpec& i) {
  switch (i.kind) {
    case InitKind::kZeros:
      return "zeros";
    case InitKind::kUniform:
      return "uniform(low=" + shown(i.a) + ", high=" + shown(i.b) + ")";
    case InitKind::kNormal:
      return "normal(mean=" + shown(i.a) + ", std=" + shown(i.b) + ")";
    case InitKind::kConstant:
      return "constant(value=" + shown(i.a) + ")";
  }
  return "?";
}

constexpr int64_t kMaxNumel = int64_t(1) << 40;

}  // namespace

int OptimizerSpec::num_slots() const {
  switch (kind) {
    case OptimizerKind::kSgd:
      return momentum != 0 ? 1 : 0;
    case OptimizerKind::kAdagrad:
      return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return amsgrad ? 3 : 2;
    case OptimizerKind::kRmsprop:
      return 1 + (centered ? 1 : 0) + (momentum != 0 ? 1 : 0);
  }
  return 0;
}

void OptimizerSpec::validate() const {
  const std::string t = std::string("optimizer ") + optimizer_name(kind);
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(t + ": " + what);
  };
  check(static_cast<int>(kind) <= static_cast<int>(OptimizerKind::kRmsprop), "unknown kind");
  check(std::isfinite(lr) && lr >= 0, "invalid lr " + shown(lr));
  check(std::isfinite(weight_decay) && weight_decay >= 0,
        "invalid weight_decay " + shown(weight_decay));
  check(std::isfinite(momentum) && momentum >= 0, "invalid momentum " + shown(momentum));
  check(!(nesterov && (momentum <= 0 || dampening != 0)),
        "nesterov momentum requires a momentum and zero dampening");
  check(beta1 >= 0 && beta1 < 1, "invalid beta1 " + shown(beta1));
  check(beta2 >= 0 && beta2 < 1, "invalid beta2 " + shown(beta2));
  check(eps >= 0, "invalid eps " + shown(eps));
  check(lr_decay >= 0, "invalid lr_decay " + shown(lr_decay));
  check(initial_accumulator_value >= 0,
        "invalid initial_accumulator_value " + shown(initial_accumulator_value));
  check(alpha >= 0, "invalid alpha " + shown(alpha));
  check(clip_norm >= 0 && clip_value >= 0, "clip_norm and clip_value must be >= 0");
}

int64_t TableSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TableSpec::dim() const { return shape.empty() ? 0 : shape[0]; }

void TableSpec::validate(int num_workers) const {
  require(!name.empty() && name.size() <= 256, name, "name must have 1 to 256 characters");
  require(name.find(':') == std::string::npos, name, "name may not contain ':'");
  require(kind == TableKind::kDense || kind == TableKind::kSparse, name, "unknown table kind");
  require(shape.size() <= 16, name, "at most 16 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    require(d >= 0 && d <= kMaxNumel, name, "bad dimension " + std::to_string(d));
    require(d == 0 || n <= kMaxNumel / d, name, "too many elements");  // before n * d overflows
    n *= d;
  }
  require(capacity >= 0 && capacity <= kMaxNumel, name, "bad capacity " + std::to_string(capacity));
  require(max_rows_per_shard >= 0 && max_rows_per_shard < (int64_t{1} << 32), name,
          "max_rows_per_shard must lie in [0, 2^32), got " + std::to_string(max_rows_per_shard));
  require(max_rows_per_shard == 0 || kind == TableKind::kSparse, name,
          "max_rows_per_shard applies to sparse tables");
  if (kind == TableKind::kSparse)
    require(shape.size() == 1 && shape[0] > 0 && shape[0] <= (1 << 20), name,
            "a sparse table needs a row width (dim) between 1 and 1048576");
  require(static_cast<int>(init.kind) <= static_cast<int>(InitKind::kConstant), name,
          "unknown initializer");
  if (init.kind == InitKind::kUniform)
    require(init.a <= init.b, name, "uniform initializer needs low <= high");
  if (init.kind == InitKind::kNormal)
    require(init.b >= 0, name, "normal initializer needs std >= 0");
  optimizer.validate();
  const auto& c = consistency;
  require(static_cast<int>(c.mode) <= static_cast<int>(Consistency::kSsp), name,
          "unknown consistency mode");
  require(c.staleness >= 0, name, "staleness must be >= 0");
  require(c.backup_workers >= 0 && c.backup_workers < std::max(1, num_workers), name,
          "backup_workers " + std::to_string(c.backup_workers) + " must be below num_workers " +
              std::to_string(num_workers));
}

std::vector<TableSetting> TableSpec::settings() const {
  std::vector<TableSetting> out;
  auto add = [&](const char* key, std::string value, bool of_optimizer = false) {
    out.push_back({key, std::move(value), of_optimizer});
  };
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  add("kind", kind == TableKind::kDense ? "dense" : "sparse");
  if (kind == TableKind::kSparse)
    add("dim", std::to_string(dim()));
  else
    add("shape", shown(shape));
  add("initializer", init_shown(init));
  add("seed", std::to_string(init.seed));
  const OptimizerSpec& o = optimizer;
  add("optimizer", optimizer_name(o.kind));
  for (const auto& [key, field] : kOptimizerHyperParameters) add(key, shown(o.*field), true);
  for (const auto& [key, field] : kOptimizerFlags) add(key, flag(o.*field), true);
  for (const auto& [key, field] : kGradientClipping) add(key, shown(o.*field));
  add("consistency", consistency_name(consistency.mode));
  add("staleness", std::to_string(consistency.staleness));
  add("backup_workers", std::to_string(consistency.backup_workers));
  add("capacity", std::to_string(capacity));
  add("max_rows_per_shard", std::to_string(max_rows_per_shard));
  return out;
}

// Settings are compared by their text, which shows every value exactly. Hyper-parameters are
// compared only between equal optimizers (another optimizer's defaults differ anyway), and a
// table's shape only between tables of one kind.
std::vector<std::string> TableSpec::differences(const TableSpec& o) const {
  std::vector<std::string> out;
  if (name != o.name) out.push_back("name: " + name + " vs " + o.name);
  const bool same_optimizer = optimizer.kind == o.optimizer.kind;
  const std::vector<TableSetting> theirs = o.settings();
  for (const TableSetting& mine : settings()) {
    if (mine.of_optimizer && !same_optimizer) continue;
    for (const TableSetting& other : theirs)
      if (other.key == mine.key && other.value != mine.value)
        out.push_back(mine.key + ": " + mine.value + " vs " + other.value);
  }
  return out;
}

bool TableSpec::same_as(const TableSpec& o) const { return differences(o).empty(); }

std::string TableSpec::describe_differences(const TableSpec& requested) const {
  std::string s;
  for (const std::string& d : differences(requested)) s += (s.empty() ? "" : "; ") + d;
  return s;
}

uint32_t table_id_for(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  return h == 0 ? 1 : h;
}

const char* consistency_name(Consistency c) {
  switch (c) {
    case Consistency::kAsync:
      return "async";
    case Consistency::kSync:
      return "sync";
    case Consistency::kSsp:
      return "ssp";
  }
  return "?";
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kRmsprop:
      return "rmsprop";
  }
  return "?";
}

void encode_spec(WireWriter<ByteBuffer&>& w, const TableSpec& s) {
  w.string(s.name, "table name");
  w.u8(static_cast<uint8_t>(s.kind));
  w.u32(static_cast<uint32_t>(s.shape.size()));
  for (int64_t d : s.shape) w.i64(d);
  w.u8(static_cast<uint8_t>(s.init.kind)).f64(s.init.a).f64(s.init.b).u64(s.init.seed);
  const OptimizerSpec& o = s.optimizer;
  w.u8(static_cast<uint8_t>(o.kind));
  w.u8((o.nesterov ? 1 : 0) | (o.amsgrad ? 2 : 0) | (o.centered ? 4 : 0));
  for (double v : {o.lr, o.momentum, o.dampening, o.weight_decay, o.beta1, o.beta2, o.eps,
                   o.lr_decay, o.initial_accumulator_value, o.alpha, o.clip_norm, o.clip_value})
    w.f64(v);
  w.u8(static_cast<uint8_t>(s.consistency.mode));
  w.i32(s.consistency.staleness).i32(s.consistency.backup_workers);
  w.i64(s.capacity).i64(s.max_rows_per_shard);
}

TableSpec decode_spec(WireReader& r) {
  TableSpec s;
  s.name = r.string("table name", 256);
  s.kind = static_cast<TableKind>(r.u8("table kind"));
  uint32_t ndim = r.u32("dimension count");
  if (ndim > 16) r.fail("table spec: " + std::to_string(ndim) + " dimensions");
  for (uint32_t i = 0; i < ndim; ++i) s.shape.push_back(r.i64("dimension"));
  s.init.kind = static_cast<InitKind>(r.u8("initializer"));
  s.init.a = r.f64("initializer a");
  s.init.b = r.f64("initializer b");
  s.init.seed = r.u64("seed");
  OptimizerSpec& o = s.optimizer;
  o.kind = static_cast<OptimizerKind>(r.u8("optimizer"));
  uint8_t flags = r.u8("optimizer flags");
  o.nesterov = flags & 1;
  o.amsgrad = flags & 2;
  o.centered = flags & 4;
  for (double* v :
       {&o.lr, &o.momentum, &o.dampening, &o.weight_decay, &o.beta1, &o.beta2, &o.eps, &o.lr_decay,
        &o.initial_accumulator_value, &o.alpha, &o.clip_norm, &o.clip_value})
    *v = r.f64("optimizer hyper-parameter");
  s.consistency.mode = static_cast<Consistency>(r.u8("consistency"));
  s.consistency.staleness = r.i32("staleness");
  s.consistency.backup_workers = r.i32("backup_workers");
  s.capacity = r.i64("capacity");
  s.max_rows_per_shard = r.i64("max_rows_per_shard");
  return s;
}

void encode_layout(WireWriter<ByteBuffer&>& w, const TableLayout& l) {
  w.u32(l.id);
  encode_spec(w, l.spec);
  w.u32(static_cast<uint32_t>(l.parts.size()));
  for (const DensePart& p : l.parts) w.i32(p.shard).i64(p.offset).i64(p.numel);
}

TableLayout decode_layout(WireReader& r) {
  TableLayout l;
  l.id = r.u32("table id");
  l.spec = decode_spec(r);
  uint32_t n = r.u32("part count");
  if (n > (1u << 16)) r.fail("table layout: " + std::to_string(n) + " parts");
  for (uint32_t i = 0; i < n; ++i) {
    DensePart p;
    p.shard = r.i32("part shard");
    p.offset = r.i64("part offset");
    p.numel = r.i64("part numel");
    l.parts.push_back(p);
  }
  return l;
}

}  // namespace pscore::ps
