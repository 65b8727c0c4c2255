#include "hogwild/shared_table.h"

#include <cstring>
#include <stdexcept>

namespace pscore::hogwild {
namespace {

template <typename T>
void fill(void* p, uint64_t n, double value) {
  T* a = static_cast<T*>(p);
  const T v = static_cast<T>(value);
  for (uint64_t i = 0; i < n; ++i) a[i] = v;
}

}  // namespace

std::shared_ptr<SharedTable> SharedTable::create(const std::string& name, const TableSpec& spec,
                                                 const CreateOptions& opts) {
  // Check init before taking the name, so a bad init leaves nothing behind.
  const TableLayout layout = plan_layout(spec, sizeof(SegmentHeader));
  const uint64_t nbytes = layout.rows * layout.dim * dtype_size(spec.dtype);
  if (opts.init && opts.init_nbytes != nbytes) {
    throw std::invalid_argument("create shared table '" + name + "': init holds " +
                                std::to_string(opts.init_nbytes) + " bytes; shape " +
                                shape_string(spec.shape) + " " + dtype_name(spec.dtype) +
                                " needs " + std::to_string(nbytes));
  }
  std::shared_ptr<SharedTable> t(new SharedTable(Segment::create(name, spec, opts.segment)));
  if (opts.init) std::memcpy(t->array(-1), opts.init, nbytes);
  if (spec.optimizer == OptimizerState::kAdagrad && opts.initial_accumulator != 0.0) {
    const uint64_t n = layout.rows * layout.dim;
    if (spec.dtype == DType::kFloat32) {
      fill<float>(t->array(0), n, opts.initial_accumulator);
    } else {
      fill<double>(t->array(0), n, opts.initial_accumulator);
    }
  }
  t->segment_->publish();
  return t;
}

std::shared_ptr<SharedTable> SharedTable::attach(const std::string& name,
                                                 const SegmentOptions& opts) {
  return std::shared_ptr<SharedTable>(new SharedTable(Segment::attach(name, opts)));
}

void SharedTable::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  segment_->detach();
}

std::vector<uint64_t> SharedTable::shape() const {
  const SegmentHeader& h = header();
  return std::vector<uint64_t>(h.shape, h.shape + h.ndim);
}

void* SharedTable::array(int slot) const {
  const TableLayout& l = header().layout;
  if (slot == -1) return segment_->base() + l.data_offset;
  if (slot < 0 || static_cast<uint32_t>(slot) >= l.state_slots) {
    throw std::invalid_argument(
        what("state of") + ": no optimizer state slot " + std::to_string(slot) + " (optimizer '" +
        optimizer_name(optimizer()) + "' keeps " + std::to_string(l.state_slots) + ")");
  }
  return segment_->base() + l.state_offset[slot];
}

uint8_t* SharedTable::row_flags() const {
  if (optimizer() != OptimizerState::kMomentum) {
    throw std::invalid_argument(what("row flags of") +
                                ": only optimizer='momentum' tables have them");
  }
  return reinterpret_cast<uint8_t*>(segment_->base() + header().layout.row_flags_offset);
}

LockWord& SharedTable::row_lock(uint64_t row) const {
  const SegmentHeader& h = header();
  return segment_->locks()[(row / h.layout.granule_rows) % h.lock_stripes];
}

std::string SharedTable::what(const char* op) const {
  return std::string(op) + " shared table '" + name() + "'";
}

}  // namespace pscore::hogwild
