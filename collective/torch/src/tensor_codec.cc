#include "yard/tensor_codec.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>

#include "yard/errors.h"

namespace yard::detail {

namespace {

// "YTNS", format 1, dtype (c10::ScalarType), ndim, then at byte 8 the data's offset (the header
// rounded up to 64 bytes), then the sizes as int64 from byte 16. Host byte order: tensors move
// between hosts of one cluster.
constexpr char kMagic[4] = {'Y', 'T', 'N', 'S'};
constexpr uint8_t kFormat = 1;
constexpr size_t kMaxDims = 64;

size_t data_offset(size_t ndim) { return (16 + 8 * ndim + 63) / 64 * 64; }

bool plain(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kHalf:
    case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16: case at::kComplexFloat:
    case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void malformed(const std::string& why) { throw Error("a tensor value is malformed: " + why); }

}  // namespace

Bytes encode_tensor(const at::Tensor& in) {
  if (!in.defined()) throw Error("cannot send an undefined tensor");
  if (in.is_sparse() || in.is_quantized())
    throw Error("cannot send a sparse or quantized tensor: convert it to a dense one first (to_dense / dequantize)");
  if (!plain(in.scalar_type())) throw Error(std::string("cannot send a tensor of dtype ") + at::toString(in.scalar_type()));
  at::Tensor t = in.detach();
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  t = t.contiguous();
  size_t ndim = static_cast<size_t>(t.dim()), off = data_offset(ndim);
  size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  auto w = allocate_bytes(off + bytes);
  std::memset(w.data, 0, off);
  std::memcpy(w.data, kMagic, 4);
  w.data[4] = static_cast<char>(kFormat);
  w.data[5] = static_cast<char>(t.scalar_type());
  w.data[6] = static_cast<char>(ndim);
  uint32_t o = static_cast<uint32_t>(off);
  std::memcpy(w.data + 8, &o, 4);
  for (size_t i = 0; i < ndim; ++i) {
    int64_t d = t.size(static_cast<int64_t>(i));
    std::memcpy(w.data + 16 + 8 * i, &d, 8);
  }
  if (bytes) std::memcpy(w.data + off, t.data_ptr(), bytes);
  return w.bytes;
}

at::Tensor decode_tensor(const Bytes& b, bool in_place) {
  const char* p = b->data();
  size_t size = b->size();
  if (size < 16 || std::memcmp(p, kMagic, 4) != 0) malformed("it does not start with a tensor header (is the value a tensor?)");
  if (static_cast<uint8_t>(p[4]) != kFormat) malformed("format " + std::to_string(uint8_t(p[4])) + ", expected 1");
  auto type = static_cast<at::ScalarType>(static_cast<int8_t>(p[5]));
  size_t ndim = static_cast<uint8_t>(p[6]);
  if (ndim > kMaxDims) malformed(std::to_string(ndim) + " dimensions");
  if (static_cast<int8_t>(p[5]) < 0 || !plain(type)) malformed("unknown dtype " + std::to_string(int(p[5])));
  uint32_t off = 0;
  std::memcpy(&off, p + 8, 4);
  if (off != data_offset(ndim) || size < off) malformed("its header does not fit its " + std::to_string(size) + " bytes");
  std::vector<int64_t> sizes(ndim);
  size_t numel = 1;
  for (size_t i = 0; i < ndim; ++i) {
    std::memcpy(&sizes[i], p + 16 + 8 * i, 8);
    if (sizes[i] < 0 || __builtin_mul_overflow(numel, static_cast<size_t>(sizes[i]), &numel))
      malformed("dimension " + std::to_string(i) + " of size " + std::to_string(sizes[i]) + " does not fit its bytes");
  }
  size_t item = at::elementSize(type);
  size_t need = 0;
  if (__builtin_mul_overflow(numel, item, &need) || need != size - off)
    malformed(std::to_string(numel) + " elements of " + std::to_string(item) + " bytes in " + std::to_string(size - off) +
              " bytes");
  auto opts = at::TensorOptions().dtype(type);
  const char* data = p + off;
  if (in_place && reinterpret_cast<uintptr_t>(data) % item == 0)
    return at::from_blob(const_cast<char*>(data), sizes, [keep = b](void*) {}, opts);
  auto t = at::empty(sizes, opts);
  if (numel) std::memcpy(t.data_ptr(), data, numel * item);
  return t;
}

}  // namespace yard::detail
