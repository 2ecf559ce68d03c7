#include <atomic>

#include "gloo_communicator.h"
#include "yard/collective.h"

namespace yard::collective {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

std::unique_ptr<Communicator> create_group(const GroupSpec& spec) {
  if (spec.name.empty()) throw CollectiveError("a group needs a name");
  if (spec.redis_address.empty())
    throw CollectiveError("group '" + spec.name + "': no rendezvous store address");
  Backend b = spec.backend;
  if (b == Backend::kAuto) b = spec.on_gpu ? Backend::kNccl : Backend::kGloo;
  if (b == Backend::kNccl)
    throw CollectiveError("group '" + spec.name +
                          "': the NCCL backend is not part of this build (CPU tensors use Gloo)");
  return create_gloo(spec);
}

}  // namespace yard::collective
