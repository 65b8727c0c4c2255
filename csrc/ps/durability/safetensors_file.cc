#include "ps/durability/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/error.h"

namespace pscore::ps {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;

uint64_t dtype_bytes(const std::string& d) {
  if (d == "F32" || d == "I32") return 4;
  if (d == "I64" || d == "F64") return 8;
  if (d == "U8" || d == "I8" || d == "BOOL") return 1;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd, c, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw Error(errno_message("checkpoint " + path + ": write", errno));
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
}

std::string dirname_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void make_directories(const std::string& path) {
  if (path.empty()) return;
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error(errno_message("cannot create directory " + prefix, errno));
  }
}

void SafetensorsWriter::write(const std::string& path) const {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const TensorEntry& e : entries_) {
    Json t = Json::object();
    t.set("dtype", e.dtype);
    Json shape = Json::array();
    for (int64_t d : e.shape) shape.push_back(d);
    t.set("shape", shape);
    Json offsets = Json::array();
    offsets.push_back(offset);
    offsets.push_back(offset + e.nbytes);
    t.set("data_offsets", offsets);
    header.set(e.name, t);
    offset += e.nbytes;
  }
  Json meta = Json::object();
  for (const auto& [k, v] : metadata_) meta.set(k, v);
  header.set("__metadata__", meta);
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  uint64_t header_len = text.size();

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(errno_message("cannot create checkpoint " + tmp, errno));
  try {
    write_all(fd, &header_len, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const TensorEntry& e : entries_) write_all(fd, e.data, e.nbytes, tmp);
    if (::fsync(fd) != 0) throw Error(errno_message("checkpoint " + tmp + ": fsync", errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(errno_message("cannot rename checkpoint to " + path, err));
  }
  int dfd = ::open(dirname_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(errno_message("cannot open checkpoint " + path, errno));
  struct stat st{};
  ::fstat(fd, &st);
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ < 8) {
    ::close(fd);
    invalid("shorter than 8 bytes");
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(errno_message("cannot map checkpoint " + path, errno));
  }
  try {
    read_header();
  } catch (...) {  // the destructor does not run for a constructor that throws
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

void SafetensorsReader::invalid(const std::string& why) const {
  throw std::invalid_argument("checkpoint " + path_ + " is not a valid safetensors file: " + why);
}

void SafetensorsReader::read_header() {
  auto* base = static_cast<const uint8_t*>(map_);
  auto bad = [&](const std::string& why) { invalid(why); };
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes || header_len > map_bytes_ - 8)
    bad("header length out of range");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_bytes = map_bytes_ - data_start;
  Json header = Json::parse(std::string(reinterpret_cast<const char*>(base + 8), header_len));
  for (const auto& [name, t] : header.as_object("safetensors header")) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : t.as_object("__metadata__")) metadata_[k] = v.as_string(k.c_str());
      continue;
    }
    TensorEntry e;
    e.name = name;
    e.dtype = t.at("dtype").as_string("dtype");
    uint64_t elem = dtype_bytes(e.dtype);
    if (elem == 0) bad("tensor " + name + " has unknown dtype " + e.dtype);
    uint64_t numel = 1;
    for (const Json& d : t.at("shape").as_array("shape")) {
      int64_t v = d.as_int("shape");
      if (v < 0 || v > (int64_t(1) << 40)) bad("tensor " + name + " has a bad shape");
      e.shape.push_back(v);
      // Checked before multiplying: a product that wrapped around could match a short range.
      if (v != 0 && numel > (uint64_t(1) << 42) / static_cast<uint64_t>(v))
        bad("tensor " + name + " is too large");
      numel *= static_cast<uint64_t>(v);
    }
    const auto& off = t.at("data_offsets").as_array("data_offsets");
    if (off.size() != 2) bad("tensor " + name + " needs two data offsets");
    int64_t begin = off[0].as_int("offset"), end = off[1].as_int("offset");
    if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_bytes)
      bad("tensor " + name + " lies outside the file");
    e.nbytes = static_cast<uint64_t>(end - begin);
    if (e.nbytes != numel * elem)
      bad("tensor " + name + " has a size that does not match its shape");
    e.data = base + data_start + begin;
    tensors_[name] = std::move(e);
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (map_) ::munmap(map_, map_bytes_);
}

const TensorEntry& SafetensorsReader::get(const std::string& name, const std::string& dtype) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw std::invalid_argument("checkpoint " + path_ + " has no tensor '" + name + "'");
  if (it->second.dtype != dtype)
    throw std::invalid_argument("checkpoint " + path_ + ": tensor '" + name + "' is " +
                                it->second.dtype + ", expected " + dtype);
  return it->second;
}

std::string SafetensorsReader::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end())
    throw std::invalid_argument("checkpoint " + path_ + " has no metadata '" + key + "'");
  return it->second;
}

}  // namespace pscore::ps
