// SharedTable: a Hogwild parameter table (dense, or rows updated sparsely) in a shared-memory
// segment that many processes map, with in-place optimizer updates. Updates take no lock (as in
// HOGWILD!) unless the batch asks for the striped locks; every update method is safe to call
// from any number of threads and processes at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "hogwild/optimizer_options.h"
#include "hogwild/segment.h"
#include "hogwild/table_spec.h"

namespace pscore::hogwild {

struct LockStripes;
struct KernelCall;

// Gradients for some rows (row ids[i] gets grads[i*dim : (i+1)*dim]) or, when dense, for the
// whole table (grads has rows*dim elements, ids unused). Repeated ids apply one after another,
// or, with coalesce, once with their gradients summed.
struct UpdateBatch {
  bool dense = false;
  const void* ids = nullptr;
  uint64_t num_ids = 0;
  DType ids_dtype = DType::kInt64;  // int32 or int64
  const void* grads = nullptr;
  uint64_t grads_numel = 0;
  DType grads_dtype = DType::kFloat32;  // must be the table's dtype
  bool locked = false;                  // take each row's stripe lock around its update
  bool coalesce = false;                // sum repeated ids first, as torch's sparse optimizers
};

// How create() fills the new table before attachers can see it.
struct CreateOptions {
  SegmentOptions segment;
  const void* init = nullptr;  // rows*dim elements of the table's dtype, copied in; or zeros
  uint64_t init_nbytes = 0;
  double initial_accumulator = 0.0;  // Adagrad's starting accumulator value
};

class SharedTable {
 public:
  // Throws as Segment::create, plus std::invalid_argument for an init of the wrong size.
  static std::shared_ptr<SharedTable> create(const std::string& name, const TableSpec& spec,
                                             const CreateOptions& opts);
  // Throws as Segment::attach.
  static std::shared_ptr<SharedTable> attach(const std::string& name, const SegmentOptions& opts);

  // Updates in place, as torch.optim's SGD, Adagrad and Adam (optimizer_options.h). Everything is
  // checked (options, dtypes, sizes, every id in range, optimizer state present) before the first
  // write: a bad batch throws std::invalid_argument and writes nothing. A sparse batch applies the
  // dense update to the rows it names and leaves every other row (and its state) alone.
  void sgd(const UpdateBatch& batch, const SgdOptions& opts);
  void adagrad(const UpdateBatch& batch, const AdagradOptions& opts);
  void adam(const UpdateBatch& batch, const AdamOptions& opts);
  // table += alpha * x over the whole table (x has rows*dim elements of the table's dtype).
  void axpy(double alpha, const void* x, uint64_t numel, DType dtype, bool locked);

  // Detaches this handle (idempotent); later updates throw Error. The mapping stays valid while
  // this object lives, so views handed out earlier never dangle.
  void close();
  // Removes the segment's name now (attached handles keep working).
  void unlink() { segment_->unlink(); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  int live_attachments() { return segment_->live_attachments(); }

  const std::string& name() const { return segment_->name(); }
  std::vector<uint64_t> shape() const;
  DType dtype() const { return static_cast<DType>(header().dtype); }
  OptimizerState optimizer() const { return static_cast<OptimizerState>(header().optimizer); }
  uint64_t rows() const { return header().layout.rows; }
  uint64_t dim() const { return header().layout.dim; }
  uint32_t lock_stripes() const { return header().lock_stripes; }
  uint64_t array_nbytes() const { return rows() * dim() * dtype_size(dtype()); }
  bool is_creator() const { return segment_->is_creator(); }
  uint64_t update_count() const { return header().update_count.load(std::memory_order_relaxed); }
  // The global optimizer step: Adam and Adagrad calls that passed no step so far.
  uint64_t step() const { return header().step.load(std::memory_order_relaxed); }
  // The parameters (slot -1) or optimizer state slot 0..2; throws std::invalid_argument if absent.
  void* array(int slot) const;
  // kMomentum tables: one byte per row, 1 once the row's momentum buffer has started.
  uint8_t* row_flags() const;
  // The stripe lock that locked updates of `row` take (row < rows()).
  LockWord& row_lock(uint64_t row) const;
  // Who this handle's locked updates lock as.
  LockOwner& lock_owner() const { return *segment_; }

 private:
  explicit SharedTable(std::unique_ptr<Segment> segment) : segment_(std::move(segment)) {}
  SegmentHeader& header() const { return segment_->header(); }
  void check_batch(const UpdateBatch& batch, const char* op) const;
  void require_state(OptimizerState needed, const char* op) const;
  uint64_t next_step(uint64_t given);
  LockStripes lock_stripes_for(const UpdateBatch& batch, const char* what) const;
  KernelCall kernel_call(const UpdateBatch& batch, const LockStripes* locks) const;
  std::string what(const char* op) const;

  std::unique_ptr<Segment> segment_;
  std::atomic<bool> closed_{false};
};

}  // namespace pscore::hogwild
