#include "ps/wire/byte_buffer.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace pscore::ps {
namespace {

struct Pooled {
  std::unique_ptr<uint8_t[]> block;
  size_t capacity;
};

std::mutex g_mu;
std::vector<Pooled>* g_free = new std::vector<Pooled>();  // leaked: outlives static destructors
size_t g_free_bytes = 0;

}  // namespace

BufferPool& BufferPool::instance() {
  static BufferPool pool;
  return pool;
}

std::unique_ptr<uint8_t[]> BufferPool::take(size_t n, size_t* capacity) {
  if (n >= kMinBytes) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto best = g_free->end();
    for (auto it = g_free->begin(); it != g_free->end(); ++it)
      if (it->capacity >= n && it->capacity <= 2 * n &&
          (best == g_free->end() || it->capacity < best->capacity))
        best = it;
    if (best != g_free->end()) {
      *capacity = best->capacity;
      auto block = std::move(best->block);
      g_free_bytes -= best->capacity;
      g_free->erase(best);
      return block;
    }
  }
  *capacity = n;
  return std::unique_ptr<uint8_t[]>(new uint8_t[n]);
}

void BufferPool::give(std::unique_ptr<uint8_t[]> block, size_t capacity) {
  if (!block || capacity < kMinBytes) return;
  std::lock_guard<std::mutex> lk(g_mu);
  while (!g_free->empty() && (g_free_bytes + capacity > kMaxBytes || g_free->size() >= 16)) {
    g_free_bytes -= g_free->front().capacity;  // evict the oldest
    g_free->erase(g_free->begin());
  }
  if (capacity > kMaxBytes) return;
  g_free_bytes += capacity;
  g_free->push_back(Pooled{std::move(block), capacity});
}

void ByteBuffer::grow(size_t need, size_t want) {
  size_t cap = 0;
  auto bigger = BufferPool::instance().take(std::max(need, want), &cap);
  if (size_) std::memcpy(bigger.get(), data_.get(), size_);
  release();
  data_ = std::move(bigger);
  capacity_ = cap;
}

void ByteBuffer::release() {
  if (data_) BufferPool::instance().give(std::move(data_), capacity_);
  data_.reset();
  capacity_ = 0;
}

}  // namespace pscore::ps
