// LibTorch tensors as task arguments, results and objects.
//
// A tensor travels as a small header (dtype, shape) and its elements, contiguous, in one buffer:
// a large one is written straight into the process's shared-memory pool, so a process on the
// same host receives it without another copy, and one on another host receives it as a frame.
// Received as `torch::Tensor`, it is decoded into a tensor of its own (the copy a value that the
// receiver may change needs). Received as `yard::TensorView`, it is the received bytes
// themselves (the sender's shared-memory segment, the frame): nothing is copied.
//
// A CUDA tensor is sent as its CPU copy; a tensor that requires grad is sent as its data. Sparse
// and quantized tensors are refused with an error that says so.
//
//   #include "yard/tensor_codec.h"
//   double total(yard::TensorView x) { return x.tensor().sum().item<double>(); }
//   torch::Tensor scaled(torch::Tensor x, double by) { return x.mul_(by); }
#pragma once

#include <ATen/core/Tensor.h>

#include "yard/codec.h"

namespace yard {

// A tensor that reads the bytes it arrived in. Treat it as read-only: writing to it would write
// into the sender's memory (to change it, clone() it first).
class TensorView {
 public:
  TensorView() = default;
  explicit TensorView(at::Tensor t) : t_(std::move(t)) {}
  const at::Tensor& tensor() const { return t_; }

 private:
  at::Tensor t_;
};

namespace detail {
Bytes encode_tensor(const at::Tensor& t);
// in_place: a tensor over `b`'s memory (kept alive by it) where the alignment allows; otherwise
// (and when !in_place) a tensor with its own storage. Throws yard::Error for malformed bytes.
at::Tensor decode_tensor(const Bytes& b, bool in_place);
}  // namespace detail

template <>
struct Codec<at::Tensor> {
  static detail::Bytes encode(const at::Tensor& t) { return detail::encode_tensor(t); }
  static at::Tensor decode_bytes(const detail::Bytes& b) { return detail::decode_tensor(b, false); }
  static at::Tensor decode(const char* data, size_t size) {
    return detail::decode_tensor(std::make_shared<detail::StringBuffer>(std::string(data, size)), false);
  }
};

template <>
struct Codec<TensorView> {
  static detail::Bytes encode(const TensorView& v) { return detail::encode_tensor(v.tensor()); }
  static TensorView decode_bytes(const detail::Bytes& b) { return TensorView(detail::decode_tensor(b, true)); }
  static TensorView decode(const char* data, size_t size) { return decode_bytes(detail::copy_bytes(data, size)); }
};

}  // namespace yard
