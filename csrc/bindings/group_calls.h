// The ProcessGroup's collectives as the bindings call them: on the caller's objects (numpy arrays,
// tensors, BufferViews, lists of them; bindings/user_buffer.h), checked, and run on host memory,
// CUDA memory staged through pinned blocks (gpu/staging.h). Each takes the group, its arguments
// in the order Python passes them and async_op, and returns the Work, or null when it blocked.
// pscore._C binds each twice: as a ProcessGroup method (core_module.cc) and as a function of the
// group's latency path (fast_calls.cc).
#pragma once

#include "bindings/rank_blocks.h"
#include "bindings/user_buffer.h"
#include "collectives/process_group.h"
#include "common/dtype.h"

namespace pscore::bindings::group_calls {

using WorkPtr = ProcessGroup::WorkPtr;
using Tensor = UserBuffer<kTensorArg>;
using Input = UserBuffer<kInputArg>;
using Output = UserBuffer<kOutputArg>;
using ReadTensor = UserBuffer<kReadTensorArg>;
using TensorList = UserBuffers<kTensorListArg>;
using InputList = UserBuffers<kInputListArg>;
using GatherList = UserBuffers<kGatherListArg>;
using ScatterList = UserBuffers<kScatterListArg>;
using OutputTensorList = UserBuffers<kOutputTensorListArg>;
using InputTensorList = UserBuffers<kInputTensorListArg>;

WorkPtr allreduce(ProcessGroup& g, const Tensor& tensor, ReduceOp op, bool async);
WorkPtr broadcast(ProcessGroup& g, const Tensor& tensor, int root, bool async);
WorkPtr reduce(ProcessGroup& g, const Tensor& tensor, ReduceOp op, int root, bool async);
WorkPtr allgather(ProcessGroup& g, const ReadTensor& tensor, const TensorList& tensor_list,
                  bool async);
WorkPtr reduce_scatter(ProcessGroup& g, const Output& output, const InputList& input_list,
                       ReduceOp op, bool async);
WorkPtr gather(ProcessGroup& g, const ReadTensor& tensor, const GatherList& gather_list, int root,
               bool async);
WorkPtr scatter(ProcessGroup& g, const Tensor& tensor, const ScatterList& scatter_list, int root,
                bool async);
WorkPtr all_to_all(ProcessGroup& g, const OutputTensorList& output_list,
                   const InputTensorList& input_list, bool async);
WorkPtr allgather_into(ProcessGroup& g, const Input& input, const Output& output, bool async);
WorkPtr reduce_scatter_from(ProcessGroup& g, const Input& input, const Output& output, ReduceOp op,
                            bool async);
WorkPtr all_to_all_single(ProcessGroup& g, const Input& input, const Output& output,
                          const RankCounts& input_counts, const RankCounts& output_counts,
                          bool async);
WorkPtr barrier(ProcessGroup& g, bool async);
WorkPtr send(ProcessGroup& g, const BufferView& b, int dst, uint32_t tag, bool async);
WorkPtr recv(ProcessGroup& g, const BufferView& b, int src, uint32_t tag, bool async);
WorkPtr recv_any(ProcessGroup& g, const BufferView& b, uint32_t tag, bool async);

}  // namespace pscore::bindings::group_calls
