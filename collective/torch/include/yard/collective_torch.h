// LibTorch tensors on yard::collective: the tensor's dtype and device pick the element type and
// the backend (CPU: Gloo or the shared-memory path; CUDA: NCCL). Tensors must be contiguous.
// Only files that move tensors include this header (it pulls in ATen).
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "yard/collective.h"

namespace yard::collective {

// The collective dtype of a tensor; throws CollectiveError for unsupported dtypes.
DType dtype_of(const at::Tensor& t);

// A group whose backend follows the device of `example` when spec.backend is kAuto.
std::unique_ptr<Communicator> create_group_for(GroupSpec spec, const at::Tensor& example);

void allreduce(Communicator& c, at::Tensor& t, ReduceOp op = ReduceOp::kSum, const Options& o = {});
// The tensors stay alive until the Work is done.
WorkPtr allreduce_async(Communicator& c, at::Tensor t, ReduceOp op = ReduceOp::kSum, const Options& o = {});
// All tensors in one operation (they must share a dtype): what gradient buckets use.
void allreduce_coalesced(Communicator& c, std::vector<at::Tensor>& ts, ReduceOp op = ReduceOp::kSum,
                         const Options& o = {});
WorkPtr allreduce_coalesced_async(Communicator& c, std::vector<at::Tensor> ts, ReduceOp op = ReduceOp::kSum,
                                  const Options& o = {});
void broadcast(Communicator& c, at::Tensor& t, int root, const Options& o = {});
// out: world_size * in.numel() elements, rank r's input at r * in.numel().
void allgather(Communicator& c, const at::Tensor& in, at::Tensor& out, const Options& o = {});
// in: world_size * out.numel() elements.
void reduce_scatter(Communicator& c, const at::Tensor& in, at::Tensor& out, ReduceOp op = ReduceOp::kSum,
                    const Options& o = {});
void send(Communicator& c, const at::Tensor& t, int peer, const Options& o = {});
void recv(Communicator& c, at::Tensor& t, int peer, const Options& o = {});

}  // namespace yard::collective
