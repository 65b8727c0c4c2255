// Reads and writes the safetensors layout (8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw bytes): a checkpoint format
// that loads with no code execution. Writes are atomic: temp file, fsync, rename, fsync dir.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps/durability/json.h"

namespace pscore::ps {

struct TensorEntry {
  std::string name;
  std::string dtype;  // "F32", "I64", "U8"
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;
};

class SafetensorsWriter {
 public:
  // The data pointers must stay valid until write() returns.
  void add(TensorEntry e) { entries_.push_back(std::move(e)); }
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Writes everything to `path` atomically; throws pscore::Error naming the path on failure.
  void write(const std::string& path) const;

 private:
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Maps a safetensors file read-only and validates its header before anything is read.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor `name`, checking its dtype; throws std::invalid_argument when absent or mistyped.
  const TensorEntry& get(const std::string& name, const std::string& dtype) const;
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::string metadata_value(const std::string& key) const;
  const std::string& path() const { return path_; }

 private:
  void read_header();  // validates the mapped header and fills tensors_ and metadata_
  [[noreturn]] void invalid(const std::string& why) const;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Creates a directory and its parents (mkdir -p); throws Error on failure.
void make_directories(const std::string& path);

}  // namespace pscore::ps
