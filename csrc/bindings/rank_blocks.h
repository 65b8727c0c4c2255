// The per-rank blocks of one whole buffer, for the collectives that take a single tensor split by
// rank (all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single). The bindings split the
// host memory (the buffer's own, or the pinned block standing for a CUDA buffer), so Python passes
// one view instead of building one per rank. Sizes are checked here, the last line before the
// transport: a mismatch is a std::invalid_argument (ValueError) naming the operation.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/buffer_view.h"
#include "common/error.h"

namespace pscore::bindings {

// Element counts per rank as Python passes them: None (`given` false) or a sequence of ints >= 0.
struct RankCounts {
  std::vector<size_t> values;
  bool given = false;
};

// DTypeError (TypeError) unless `a` and `b` hold one element type.
inline void check_same_dtype(const BufferView& a, const char* a_name, const BufferView& b,
                             const char* b_name, const char* op) {
  if (a.dtype == b.dtype) return;
  throw DTypeError(std::string(op) + ": " + a_name + " is " + dtype_name(a.dtype) + ", " + b_name +
                   " is " + dtype_name(b.dtype));
}

// std::invalid_argument unless `whole` holds `parts` blocks of `block`'s size (`whole` is
// `role`, e.g. "output" for all_gather_into_tensor).
inline void check_stacks(const BufferView& whole, const char* role, const BufferView& block,
                         size_t parts, const char* op) {
  if (whole.numel == block.numel * parts) return;
  throw std::invalid_argument(std::string(op) + ": " + role + " has " +
                              std::to_string(whole.numel) + " elements, expected " +
                              std::to_string(parts) + " x " + std::to_string(block.numel));
}

// Element counts of `buffer` per rank: `counts` (one per rank, summing to its size), or equal
// blocks when none are given (None or empty).
inline std::vector<size_t> rank_counts(const BufferView& buffer, const char* role,
                                       const RankCounts& counts, size_t parts, const char* op) {
  const std::vector<size_t>& given = counts.values;
  if (given.empty()) {  // equal blocks of rows, as torch splits along the first dimension
    const int64_t rows = buffer.shape.empty() ? 1 : buffer.shape[0];
    if (parts == 0 || rows % static_cast<int64_t>(parts)) {
      throw std::invalid_argument(std::string(op) + ": " + role + "'s first dimension " +
                                  std::to_string(rows) + " is not divisible by the group size " +
                                  std::to_string(parts));
    }
    return std::vector<size_t>(parts, static_cast<size_t>(buffer.numel / parts));
  }
  const uint64_t sum = std::accumulate(given.begin(), given.end(), uint64_t{0});
  if (given.size() != parts || sum != buffer.numel) {
    throw std::invalid_argument(
        std::string(op) + ": " + role + " of " + std::to_string(buffer.numel) +
        " elements: " + std::to_string(given.size()) + " counts summing to " + std::to_string(sum) +
        ", expected " + std::to_string(parts) + " summing to " + std::to_string(buffer.numel));
  }
  return given;
}

// The addresses of `parts` consecutive blocks of `block_bytes` from `base`.
template <class Ptr>
std::vector<Ptr> equal_blocks(Ptr base, size_t parts, size_t block_bytes) {
  std::vector<Ptr> out(parts);
  auto* at = static_cast<const char*>(base);
  for (size_t i = 0; i < parts; ++i)
    out[i] = static_cast<Ptr>(const_cast<char*>(at + i * block_bytes));
  return out;
}

// The addresses of consecutive blocks of counts[i] elements of `itemsize` bytes from `base`.
template <class Ptr>
std::vector<Ptr> blocks(Ptr base, const std::vector<size_t>& counts, size_t itemsize) {
  std::vector<Ptr> out;
  out.reserve(counts.size());
  auto* at = static_cast<const char*>(base);
  for (size_t n : counts) {
    out.push_back(static_cast<Ptr>(const_cast<char*>(at)));
    at += n * itemsize;
  }
  return out;
}

}  // namespace pscore::bindings

namespace pybind11::detail {

// RankCounts from None or a sequence of non-negative ints, read through the C API: pybind11's
// std::vector conversion costs ~0.15 us a list on the latency path.
template <>
struct type_caster<pscore::bindings::RankCounts> {
  PYBIND11_TYPE_CASTER(pscore::bindings::RankCounts,
                       const_name("collections.abc.Sequence[int] | None"));

  bool load(handle src, bool) {
    if (src.is_none()) return true;
    if (!PyList_Check(src.ptr()) && !PyTuple_Check(src.ptr())) return false;
    PyObject* const* items = PySequence_Fast_ITEMS(src.ptr());
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(src.ptr());
    value.values.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!load_count(items[i], &value.values[static_cast<size_t>(i)])) return false;
    }
    value.given = true;
    return true;
  }

 private:
  // An int >= 0, or an object with __index__ giving one (numpy's integers).
  static bool load_count(PyObject* item, size_t* count) {
    object index = reinterpret_steal<object>(PyNumber_Index(item));
    if (index) *count = PyLong_AsSize_t(index.ptr());
    if (!index || (*count == static_cast<size_t>(-1) && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    return true;
  }
};

}  // namespace pybind11::detail
