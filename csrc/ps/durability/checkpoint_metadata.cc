#include "ps/durability/checkpoint_metadata.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "ps/durability/checkpoint_legacy_v1.h"

namespace pscore::ps {
namespace {

constexpr const char* kFormatName = "pscore.ps.shard";
constexpr const char* kFormatV1 = "pscore.ps.shard/1";  // had no "format_version" key

constexpr TableKind kTableKinds[] = {TableKind::kDense, TableKind::kSparse};
constexpr InitKind kInitKinds[] = {InitKind::kZeros, InitKind::kUniform, InitKind::kNormal,
                                   InitKind::kConstant};
constexpr OptimizerKind kOptimizerKinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                             OptimizerKind::kAdam, OptimizerKind::kAdamW,
                                             OptimizerKind::kRmsprop};
constexpr Consistency kConsistencyModes[] = {Consistency::kAsync, Consistency::kSync,
                                             Consistency::kSsp};

const char* init_name(InitKind k) {
  switch (k) {
    case InitKind::kZeros:
      return "zeros";
    case InitKind::kUniform:
      return "uniform";
    case InitKind::kNormal:
      return "normal";
    case InitKind::kConstant:
      return "constant";
  }
  return "?";
}

const char* kind_name(TableKind k) { return k == TableKind::kDense ? "dense" : "sparse"; }

// The enum value of `v` whose name(e) is v's text; fails listing the names it accepts.
template <typename E, size_t N, typename NameFn>
E named(const MetadataValue& v, const E (&all)[N], NameFn name) {
  std::string known;
  for (E e : all) {
    if (v.text() == name(e)) return e;
    known += std::string(known.empty() ? "" : ", ") + name(e);
  }
  v.fail("unknown value '" + v.text() + "' (known: " + known + ")");
}

// A double as JSON; what JSON has no number for as a string ("inf", "-inf", "nan").
Json number_json(double v) {
  if (std::isnan(v)) return Json("nan");
  if (std::isinf(v)) return Json(v > 0 ? "inf" : "-inf");
  return Json(v);
}

// The initializer's parameters under the names the Python API gives them.
Json initializer_json(const InitializerSpec& i) {
  Json j = Json::object();
  j.set("kind", init_name(i.kind));
  switch (i.kind) {
    case InitKind::kZeros:
      break;
    case InitKind::kUniform:
      j.set("low", number_json(i.a));
      j.set("high", number_json(i.b));
      break;
    case InitKind::kNormal:
      j.set("mean", number_json(i.a));
      j.set("std", number_json(i.b));
      break;
    case InitKind::kConstant:
      j.set("value", number_json(i.a));
      break;
  }
  j.set("seed", std::to_string(i.seed));  // a string: 64-bit seeds exceed a double's precision
  return j;
}

InitializerSpec initializer_from(const MetadataValue& j) {
  InitializerSpec i;
  i.kind = named(j["kind"], kInitKinds, init_name);
  switch (i.kind) {
    case InitKind::kZeros:
      break;
    case InitKind::kUniform:
      i.a = j["low"].number();
      i.b = j["high"].number();
      break;
    case InitKind::kNormal:
      i.a = j["mean"].number();
      i.b = j["std"].number();
      break;
    case InitKind::kConstant:
      i.a = j["value"].number();
      break;
  }
  const MetadataValue seed = j["seed"];
  const std::string& text = seed.text();
  size_t used = 0;
  try {
    if (!text.empty() && text[0] != '-') i.seed = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) seed.fail("expected an unsigned 64-bit integer as text");
  return i;
}

Json optimizer_json(const OptimizerSpec& o) {
  Json j = Json::object();
  j.set("name", optimizer_name(o.kind));
  for (const auto& [key, field] : kOptimizerHyperParameters) j.set(key, number_json(o.*field));
  for (const auto& [key, field] : kGradientClipping) j.set(key, number_json(o.*field));
  for (const auto& [key, field] : kOptimizerFlags) j.set(key, o.*field);
  return j;
}

OptimizerSpec optimizer_from(const MetadataValue& j) {
  OptimizerSpec o;
  o.kind = named(j["name"], kOptimizerKinds, optimizer_name);
  for (const auto& [key, field] : kOptimizerHyperParameters) o.*field = j[key].number();
  for (const auto& [key, field] : kGradientClipping) o.*field = j[key].number();
  for (const auto& [key, field] : kOptimizerFlags) o.*field = j[key].flag();
  return o;
}

Json consistency_json(const ConsistencySpec& c) {
  Json j = Json::object();
  j.set("mode", consistency_name(c.mode));
  j.set("staleness", static_cast<int64_t>(c.staleness));
  j.set("backup_workers", static_cast<int64_t>(c.backup_workers));
  return j;
}

int32_t int32_from(const MetadataValue& v) {
  const int64_t x = v.integer();
  if (x < INT32_MIN || x > INT32_MAX) v.fail(std::to_string(x) + " does not fit 32 bits");
  return static_cast<int32_t>(x);
}

ConsistencySpec consistency_from(const MetadataValue& j) {
  ConsistencySpec c;
  c.mode = named(j["mode"], kConsistencyModes, consistency_name);
  c.staleness = int32_from(j["staleness"]);
  c.backup_workers = int32_from(j["backup_workers"]);
  return c;
}

}  // namespace

MetadataValue::MetadataValue(const Json& json, std::string source, std::string path)
    : json_(json), source_(std::move(source)), path_(std::move(path)) {}

void MetadataValue::fail(const std::string& why) const {
  throw std::invalid_argument(source_ + ": metadata field '" + path_ + "': " + why);
}

MetadataValue MetadataValue::operator[](const std::string& key) const {
  if (!json_.is_object()) fail("expected a JSON object");
  const Json* v = json_.find(key);
  if (!v) fail("has no member '" + key + "'");
  return MetadataValue(*v, source_, path_ + "." + key);
}

int64_t MetadataValue::integer() const {
  if (json_.type() != Json::Type::kInt) fail("expected an integer");
  return json_.as_int();
}

double MetadataValue::number() const {
  if (json_.type() == Json::Type::kString) {
    const std::string& s = json_.as_string();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  } else if (json_.type() == Json::Type::kInt || json_.type() == Json::Type::kDouble) {
    return json_.as_double();
  }
  fail("expected a number (or \"inf\", \"-inf\", \"nan\")");
}

bool MetadataValue::flag() const {
  if (json_.type() != Json::Type::kBool) fail("expected true or false");
  return json_.as_bool();
}

const std::string& MetadataValue::text() const {
  if (json_.type() != Json::Type::kString) fail("expected a string");
  return json_.as_string();
}

std::vector<MetadataValue> MetadataValue::elements() const {
  if (json_.type() != Json::Type::kArray) fail("expected a JSON array");
  std::vector<MetadataValue> out;
  const Json::Array& a = json_.as_array();
  for (size_t i = 0; i < a.size(); ++i)
    out.emplace_back(a[i], source_, path_ + "[" + std::to_string(i) + "]");
  return out;
}

std::vector<int64_t> MetadataValue::integers() const {
  std::vector<int64_t> out;
  for (const MetadataValue& v : elements()) out.push_back(v.integer());
  return out;
}

CheckpointMetadata::CheckpointMetadata(const SafetensorsReader& file) : file_(file) {
  auto bad = [&](const std::string& key, const std::string& why) {
    throw std::invalid_argument("checkpoint " + file.path() + ": metadata field '" + key +
                                "': " + why);
  };
  const auto& meta = file.metadata();
  auto format = meta.find("format");
  if (format == meta.end()) bad("format", "missing: not a pscore shard checkpoint");
  if (format->second == kFormatV1 && !meta.count("format_version")) {
    version_ = 1;
    return;
  }
  if (format->second != kFormatName)
    bad("format", "'" + format->second + "' is not a pscore shard checkpoint");
  auto v = meta.find("format_version");
  if (v == meta.end()) bad("format_version", "missing");
  if (v->second != std::to_string(kCheckpointFormatVersion))
    bad("format_version", "version '" + v->second + "' is not one this build reads (1 to " +
                              std::to_string(kCheckpointFormatVersion) + ")");
  version_ = kCheckpointFormatVersion;
}

const std::string& CheckpointMetadata::text(const std::string& key) const {
  auto it = file_.metadata().find(key);
  if (it == file_.metadata().end())
    throw std::invalid_argument("checkpoint " + file_.path() + ": metadata field '" + key +
                                "' is missing");
  return it->second;
}

int64_t CheckpointMetadata::integer(const std::string& key) const {
  const std::string& t = text(key);
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size())
    throw std::invalid_argument("checkpoint " + file_.path() + ": metadata field '" + key +
                                "': expected an integer, got '" + t + "'");
  return v;
}

MetadataValue CheckpointMetadata::parsed(const std::string& key, Json& root) const {
  try {
    root = Json::parse(text(key));
  } catch (const std::invalid_argument& e) {
    if (!file_.metadata().count(key)) throw;
    throw std::invalid_argument("checkpoint " + file_.path() + ": metadata field '" + key +
                                "': " + e.what());
  }
  return MetadataValue(root, "checkpoint " + file_.path(), key);
}

TableLayout CheckpointMetadata::table_layout(const MetadataValue& table) const {
  if (version_ == 1) {
    const MetadataValue hex = table["layout"];
    return legacy_v1::decode_layout_hex(
        hex.text(), "checkpoint " + file_.path() + ": metadata field '" + hex.path() + "'");
  }
  return table_layout_from_json(table);
}

TableLayout CheckpointMetadata::catalog_layout(const MetadataValue& entry) const {
  if (version_ == 1)
    return legacy_v1::decode_layout_hex(
        entry.text(), "checkpoint " + file_.path() + ": metadata field '" + entry.path() + "'");
  return table_layout_from_json(entry);
}

void write_checkpoint_format(SafetensorsWriter& w) {
  w.set_metadata("format", kFormatName);
  w.set_metadata("format_version", std::to_string(kCheckpointFormatVersion));
}

Json table_layout_json(const TableLayout& l) {
  const TableSpec& s = l.spec;
  Json j = Json::object();
  j.set("name", s.name);
  j.set("id", static_cast<int64_t>(l.id));
  j.set("kind", kind_name(s.kind));
  j.set("dtype", "F32");
  j.set("shape", integer_list(s.shape));
  j.set("capacity", s.capacity);
  j.set("max_rows_per_shard", s.max_rows_per_shard);
  j.set("initializer", initializer_json(s.init));
  j.set("optimizer", optimizer_json(s.optimizer));
  j.set("consistency", consistency_json(s.consistency));
  Json parts = Json::array();
  for (const DensePart& p : l.parts) {
    Json part = Json::object();
    part.set("shard", static_cast<int64_t>(p.shard));
    part.set("offset", p.offset);
    part.set("numel", p.numel);
    parts.push_back(part);
  }
  j.set("parts", parts);
  return j;
}

TableLayout table_layout_from_json(const MetadataValue& j) {
  TableLayout l;
  TableSpec& s = l.spec;
  s.name = j["name"].text();
  const MetadataValue id = j["id"];
  if (id.integer() <= 0 || id.integer() > UINT32_MAX) id.fail("expected an id in [1, 2^32)");
  l.id = static_cast<uint32_t>(id.integer());
  s.kind = named(j["kind"], kTableKinds, kind_name);
  const MetadataValue dtype = j["dtype"];
  if (dtype.text() != "F32") dtype.fail("unsupported dtype '" + dtype.text() + "' (known: F32)");
  s.shape = j["shape"].integers();
  s.capacity = j["capacity"].integer();
  s.max_rows_per_shard = j["max_rows_per_shard"].integer();
  s.init = initializer_from(j["initializer"]);
  s.optimizer = optimizer_from(j["optimizer"]);
  s.consistency = consistency_from(j["consistency"]);
  for (const MetadataValue& p : j["parts"].elements())
    l.parts.push_back({int32_from(p["shard"]), p["offset"].integer(), p["numel"].integer()});
  return l;
}

}  // namespace pscore::ps
