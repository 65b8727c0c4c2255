// Walks a batch of rows and applies one row kernel to each: sparse batches prefetch the rows a
// few ids ahead (random rows of a big table are cache misses), dense batches are one long span.
// With a LockStripes every row (or granule of rows) is updated under its stripe's lock.
#pragma once

#include <cstdint>

#include "hogwild/pid_lock.h"

namespace pscore::hogwild {

#ifndef PSCORE_PREFETCH_AHEAD
#define PSCORE_PREFETCH_AHEAD 6
#endif
constexpr uint64_t kPrefetchAhead = PSCORE_PREFETCH_AHEAD;  // ids ahead of the one being updated
constexpr uint64_t kPrefetchLines = 8;  // per row and array; the hardware streams the rest

// The locked variant's stripes: row r is guarded by words[(r / granule_rows) % count].
struct LockStripes {
  LockWord* words;
  uint64_t count;
  uint64_t granule_rows;
  int64_t timeout_ms;
  const char* what;
  LockWord& for_row(uint64_t row) const { return words[(row / granule_rows) % count]; }
};

// The arrays one update touches, each rows x dim: parameters and up to two state arrays.
template <typename T>
struct RowArrays {
  T* w;
  T* s0;
  T* s1;
  uint64_t dim;
};

// Up to kPrefetchLines lines from p. Always inlined: GCC finds a function that only prefetches
// to be "const" and deletes the calls to it that it has not inlined.
#define PSCORE_ALWAYS_INLINE inline __attribute__((always_inline))

PSCORE_ALWAYS_INLINE void prefetch_bytes(const void* p, uint64_t nbytes) {
  const char* c = static_cast<const char*>(p);
  for (uint64_t k = 0; k < kPrefetchLines; ++k) {
    if (k * 64 < nbytes) __builtin_prefetch(c + k * 64, 1, 3);
  }
}

template <typename T>
PSCORE_ALWAYS_INLINE void prefetch_row(const RowArrays<T>& a, uint64_t row) {
  const uint64_t off = row * a.dim;
  const uint64_t nbytes = a.dim * sizeof(T);
  prefetch_bytes(a.w + off, nbytes);
  if (a.s0) prefetch_bytes(a.s0 + off, nbytes);
  if (a.s1) prefetch_bytes(a.s1 + off, nbytes);
}

// fn(offset, grad, count) updates `count` elements starting at element `offset` of each array.
template <typename T, typename Id, typename Fn>
void apply_sparse(const RowArrays<T>& a, const Id* ids, uint64_t n, const T* grads,
                  const LockStripes* locks, Fn fn) {
  for (uint64_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) prefetch_row(a, static_cast<uint64_t>(ids[i + kPrefetchAhead]));
    const uint64_t row = static_cast<uint64_t>(ids[i]);
    const T* g = grads + i * a.dim;
    if (locks) {
      LockGuard guard(locks->for_row(row), locks->timeout_ms, locks->what);
      fn(row * a.dim, g, a.dim);
    } else {
      fn(row * a.dim, g, a.dim);
    }
  }
}

// Every row in order: one span when lock-free, one granule at a time under its lock otherwise.
template <typename T, typename Fn>
void apply_dense(const RowArrays<T>& a, uint64_t rows, const T* grads, const LockStripes* locks,
                 Fn fn) {
  if (!locks) {
    fn(0, grads, rows * a.dim);
    return;
  }
  for (uint64_t r = 0; r < rows; r += locks->granule_rows) {
    const uint64_t count = (rows - r < locks->granule_rows ? rows - r : locks->granule_rows);
    LockGuard guard(locks->for_row(r), locks->timeout_ms, locks->what);
    fn(r * a.dim, grads + r * a.dim, count * a.dim);
  }
}

}  // namespace pscore::hogwild
