// The metadata of a shard checkpoint: its format version and each table's layout as JSON with
// named fields (name, kind, dtype, shape, initializer, optimizer and its hyper-parameters,
// consistency, parts), written and read here, independent of the wire encoding of table specs.
//
// Versions: 1 ("format": "pscore.ps.shard/1") stored each layout as the hex of its wire
// encoding, read by checkpoint_legacy_v1; 2 ("format": "pscore.ps.shard", "format_version":
// "2") stores the JSON described in docs/ps.md. Every error names the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/durability/json.h"
#include "ps/durability/safetensors_file.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

constexpr int kCheckpointFormatVersion = 2;

// One value of a checkpoint's metadata (or of a write-ahead log's table record), read with
// errors that name the source and the value's path: "checkpoint F: metadata field
// 'tables[0].optimizer.lr': expected a number". It refers to `json`, which must outlive it.
class MetadataValue {
 public:
  MetadataValue(const Json& json, std::string source, std::string path);

  MetadataValue operator[](const std::string& key) const;  // a member; throws when missing
  bool has(const std::string& key) const { return json_.find(key) != nullptr; }
  int64_t integer() const;
  double number() const;  // the strings "inf", "-inf" and "nan" stand for what JSON cannot spell
  bool flag() const;
  const std::string& text() const;
  std::vector<int64_t> integers() const;
  std::vector<MetadataValue> elements() const;  // of an array, each with its path ("tables[2]")
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const Json& json_;
  std::string source_;  // "checkpoint F"
  std::string path_;
};

// The metadata of one checkpoint file: its format version and its entries.
class CheckpointMetadata {
 public:
  // Checks the format; throws std::invalid_argument naming the file and the field when the
  // file is not a shard checkpoint or is of a version this build does not read.
  explicit CheckpointMetadata(const SafetensorsReader& file);

  int version() const { return version_; }
  const std::string& text(const std::string& key) const;  // throws when missing
  int64_t integer(const std::string& key) const;
  // The JSON-valued entry `key`, parsed into `root` (which must outlive the value).
  MetadataValue parsed(const std::string& key, Json& root) const;
  // The layout of an element of "tables" or of "catalog".
  TableLayout table_layout(const MetadataValue& table) const;
  TableLayout catalog_layout(const MetadataValue& entry) const;

 private:
  const SafetensorsReader& file_;
  int version_ = 0;
};

// A JSON array of integers (shapes, sequence numbers, clocks).
template <typename T>
Json integer_list(const std::vector<T>& v) {
  Json a = Json::array();
  for (T x : v) a.push_back(static_cast<int64_t>(x));
  return a;
}

// Writes the format keys of the current version.
void write_checkpoint_format(SafetensorsWriter& w);
// A layout as version-2 JSON: the named fields above.
Json table_layout_json(const TableLayout& layout);
// Reads version-2 JSON written by table_layout_json.
TableLayout table_layout_from_json(const MetadataValue& j);

}  // namespace pscore::ps
