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

}  // namespace pscore::bindings
