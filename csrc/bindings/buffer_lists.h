// The checks on the list arguments of all_gather, reduce_scatter, gather, scatter and all_to_all,
// made where the bindings read the lists: a mismatch is a ValueError (std::invalid_argument) or a
// TypeError (DTypeError) naming the operation or the entry.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/buffer_view.h"
#include "common/dtype.h"
#include "common/error.h"

namespace pscore::bindings {

// One entry per rank in the list `what` of `op`.
inline void check_entries(const std::vector<BufferView>& list, const char* what, size_t ranks,
                          const char* op) {
  if (list.size() == ranks) return;
  throw std::invalid_argument(std::string(op) + ": " + what + " has " +
                              std::to_string(list.size()) + " entries, the group has " +
                              std::to_string(ranks) + " ranks");
}

// Every entry of the list `what` holds `like`'s element type and count.
inline void check_like(const std::vector<BufferView>& list, const char* what,
                       const BufferView& like) {
  auto entry = [&](size_t i) { return std::string(what) + "[" + std::to_string(i) + "]"; };
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].dtype != like.dtype)
      throw DTypeError(entry(i) + " is " + dtype_name(list[i].dtype) + ", expected " +
                       dtype_name(like.dtype));
    if (list[i].numel != like.numel)
      throw std::invalid_argument(entry(i) + " has " + std::to_string(list[i].numel) +
                                  " elements, expected " + std::to_string(like.numel));
  }
}

// A root's list (gather's destination, scatter's source; `root_role` names it): one entry like
// `like` per rank there, and none elsewhere (an empty list is none).
inline void check_root_list(const std::vector<BufferView>& list, bool given, bool at_root,
                            const char* what, const BufferView& like, size_t ranks, const char* op,
                            const char* root_role) {
  if (!at_root) {
    if (!list.empty())
      throw std::invalid_argument(std::string(op) + ": only the " + root_role + " rank passes a " +
                                  what);
    return;
  }
  if (!given || list.size() != ranks)
    throw std::invalid_argument(std::string(op) + ": the " + root_role + " needs a " + what +
                                " of " + std::to_string(ranks) + " tensors");
  check_like(list, what, like);
}

// The checks of each list collective, one function per operation: the core's bindings call them
// on every group, and Python's NCCL path (collectives/functions.py) on its views.
using BufferViews = std::vector<BufferView>;

inline void check_all_gather(const BufferView& tensor, const BufferViews& tensor_list,
                             size_t ranks) {
  check_entries(tensor_list, "tensor_list", ranks, "all_gather");
  check_like(tensor_list, "tensor_list", tensor);
}

inline void check_reduce_scatter(const BufferView& output, const BufferViews& input_list,
                                 size_t ranks) {
  check_entries(input_list, "input_list", ranks, "reduce_scatter");
  check_like(input_list, "input_list", output);
}

// `given`: the caller passed a list (None is none).
inline void check_gather(const BufferView& tensor, const BufferViews& gather_list, bool given,
                         bool at_root, size_t ranks) {
  check_root_list(gather_list, given, at_root, "gather_list", tensor, ranks, "gather",
                  "destination");
}

inline void check_scatter(const BufferView& tensor, const BufferViews& scatter_list, bool given,
                          bool at_root, size_t ranks) {
  check_root_list(scatter_list, given, at_root, "scatter_list", tensor, ranks, "scatter", "source");
}

// One entry per rank in both lists, all of one dtype (sizes may differ: an uneven all_to_all).
inline void check_all_to_all(const BufferViews& outputs, const BufferViews& inputs, size_t ranks) {
  if (inputs.size() != ranks || outputs.size() != ranks)
    throw std::invalid_argument("all_to_all: need " + std::to_string(ranks) + " input and " +
                                std::to_string(ranks) + " output tensors");
  const DType d = inputs.front().dtype;
  for (const BufferViews* list : {&inputs, &outputs})
    for (const auto& v : *list)
      if (v.dtype != d)
        throw DTypeError(std::string("all_to_all: mixed dtypes ") + dtype_name(v.dtype) + " and " +
                         dtype_name(d));
}

}  // namespace pscore::bindings
