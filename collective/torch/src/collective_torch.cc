#include "yard/collective_torch.h"

#include <ATen/ATen.h>

namespace yard::collective {

namespace {
void check(const at::Tensor& t, const Communicator& c, const char* what) {
  if (!t.defined()) throw CollectiveError(std::string(what) + ": undefined tensor");
  if (!t.is_contiguous())
    throw CollectiveError(std::string(what) + ": tensor is not contiguous (call .contiguous() first)");
  bool gpu = t.is_cuda();
  if (gpu != (c.backend() == Backend::kNccl))
    throw CollectiveError(std::string(what) + ": a " + (gpu ? "CUDA" : "CPU") + " tensor on group '" + c.name() +
                          "' whose backend is " + (c.backend() == Backend::kNccl ? "NCCL" : "Gloo"));
}
}  // namespace

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kByte: return DType::kUInt8;
    case at::kBFloat16: return DType::kBFloat16;
    default:
      throw CollectiveError(std::string("tensors of dtype ") + c10::toString(t.scalar_type()) +
                            " are not supported by yard::collective");
  }
}

std::unique_ptr<Communicator> create_group_for(GroupSpec spec, const at::Tensor& example) {
  spec.on_gpu = example.is_cuda();
  return create_group(spec);
}

void allreduce(Communicator& c, at::Tensor& t, ReduceOp op, const Options& o) {
  check(t, c, "allreduce");
  c.allreduce(t.data_ptr(), static_cast<size_t>(t.numel()), dtype_of(t), op, o);
}

WorkPtr allreduce_async(Communicator& c, at::Tensor t, ReduceOp op, const Options& o) {
  check(t, c, "allreduce");
  DType d = dtype_of(t);
  return c.async([t, d, op, o](Communicator& cc) mutable {
    cc.allreduce(t.data_ptr(), static_cast<size_t>(t.numel()), d, op, o);
  });
}

static std::vector<std::pair<void*, size_t>> buffers_of(std::vector<at::Tensor>& ts, Communicator& c, DType& d) {
  std::vector<std::pair<void*, size_t>> bufs;
  for (size_t i = 0; i < ts.size(); ++i) {
    check(ts[i], c, "allreduce_coalesced");
    DType di = dtype_of(ts[i]);
    if (i == 0) d = di;
    else if (di != d) throw CollectiveError("allreduce_coalesced: tensors of different dtypes");
    bufs.emplace_back(ts[i].data_ptr(), static_cast<size_t>(ts[i].numel()));
  }
  return bufs;
}

void allreduce_coalesced(Communicator& c, std::vector<at::Tensor>& ts, ReduceOp op, const Options& o) {
  if (ts.empty()) return;
  DType d;
  auto bufs = buffers_of(ts, c, d);
  c.allreduce_coalesced(bufs, d, op, o);
}

WorkPtr allreduce_coalesced_async(Communicator& c, std::vector<at::Tensor> ts, ReduceOp op, const Options& o) {
  DType d = DType::kFloat32;
  auto bufs = ts.empty() ? std::vector<std::pair<void*, size_t>>{} : buffers_of(ts, c, d);
  return c.async([ts = std::move(ts), bufs, d, op, o](Communicator& cc) {
    if (!bufs.empty()) cc.allreduce_coalesced(bufs, d, op, o);
  });
}

void broadcast(Communicator& c, at::Tensor& t, int root, const Options& o) {
  check(t, c, "broadcast");
  c.broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), dtype_of(t), root, o);
}

void allgather(Communicator& c, const at::Tensor& in, at::Tensor& out, const Options& o) {
  check(in, c, "allgather");
  check(out, c, "allgather");
  if (out.numel() != in.numel() * c.world_size() || out.scalar_type() != in.scalar_type())
    throw CollectiveError("allgather: the output needs world_size x input elements of the same dtype");
  c.allgather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), dtype_of(in), o);
}

void reduce_scatter(Communicator& c, const at::Tensor& in, at::Tensor& out, ReduceOp op, const Options& o) {
  check(in, c, "reduce_scatter");
  check(out, c, "reduce_scatter");
  if (in.numel() != out.numel() * c.world_size() || out.scalar_type() != in.scalar_type())
    throw CollectiveError("reduce_scatter: the input needs world_size x output elements of the same dtype");
  c.reduce_scatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), dtype_of(in), op, o);
}

void send(Communicator& c, const at::Tensor& t, int peer, const Options& o) {
  check(t, c, "send");
  c.send(t.data_ptr(), static_cast<size_t>(t.numel()), dtype_of(t), peer, o);
}

void recv(Communicator& c, at::Tensor& t, int peer, const Options& o) {
  check(t, c, "recv");
  c.recv(t.data_ptr(), static_cast<size_t>(t.numel()), dtype_of(t), peer, o);
}

}  // namespace yard::collective
