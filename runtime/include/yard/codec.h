// yard::Codec<T>: how user values become bytes and back.
//
// The default codec is MessagePack (msgpack-cxx): arithmetic types, std::string, vectors, maps,
// tuples, pairs, std::optional and user structs that declare their fields with one line:
//
//   struct Point { double x, y; YARD_FIELDS(x, y); };
//
// Specialise yard::Codec<T> for a type to give it another encoding (e.g. raw tensor bytes).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <msgpack.hpp>

#define YARD_FIELDS(...) MSGPACK_DEFINE_ARRAY(__VA_ARGS__)

namespace yard {

// The value of a call that returns void.
struct Void {
  bool operator==(const Void&) const { return true; }
  MSGPACK_DEFINE_ARRAY();
};

namespace detail {

// Immutable bytes shared between the runtime's threads without copying.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual const char* data() const = 0;
  virtual size_t size() const = 0;
};
using Bytes = std::shared_ptr<const Buffer>;

class StringBuffer final : public Buffer {
 public:
  explicit StringBuffer(std::string s) : s_(std::move(s)) {}
  const char* data() const override { return s_.data(); }
  size_t size() const override { return s_.size(); }

 private:
  std::string s_;
};

// A small encoded value (a number, a short packed value) inside its own record: one allocation.
class SmallBuffer final : public Buffer {
 public:
  static constexpr size_t kMax = 32;  // with its count and the shared pointer's, one cache line
  SmallBuffer(const char* data, size_t size) : size_(size) { std::memcpy(data_, data, size); }  // size <= kMax
  const char* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  char data_[kMax];
  size_t size_;
};

// Room for an encoded value of `size` bytes: in this process's shared-memory pool when large (a
// process on the same host then reads it without a copy), on the heap otherwise.
struct WritableBytes {
  Bytes bytes;
  char* data;
};
WritableBytes allocate_bytes(size_t size);

inline Bytes copy_bytes(const void* data, size_t size) {
  auto w = allocate_bytes(size);
  if (size) std::memcpy(w.data, data, size);
  return w.bytes;
}

class SBuffer final : public Buffer {
 public:
  explicit SBuffer(msgpack::sbuffer&& b) : b_(std::move(b)) {}
  const char* data() const override { return b_.data(); }
  size_t size() const override { return b_.size(); }

 private:
  msgpack::sbuffer b_;
};

}  // namespace detail

namespace detail {
// msgpack's stream for a number: at most 9 bytes, packed on the stack.
struct ScalarStream {
  char data[SmallBuffer::kMax];
  size_t size = 0;
  void write(const char* p, size_t n) {
    std::memcpy(data + size, p, n);
    size += n;
  }
};

// Packs a number on the stack; anything else into a buffer this thread reuses. Either way it keeps
// exactly the bytes packed: a small value in a record of its own, a larger one as copy_bytes
// places it (in shared memory directly when large), never a fresh packing buffer (8 KiB).
template <class T>
Bytes pack_exact(const T& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    ScalarStream s;
    msgpack::pack(s, v);
    return std::make_shared<SmallBuffer>(s.data, s.size);
  } else {
    thread_local msgpack::sbuffer buf(256);
    buf.clear();
    msgpack::pack(buf, v);
    Bytes out = buf.size() <= SmallBuffer::kMax ? std::make_shared<SmallBuffer>(buf.data(), buf.size())
                                                : copy_bytes(buf.data(), buf.size());
    if (buf.size() > (1u << 20)) buf = msgpack::sbuffer(256);  // a large value's room is not kept
    return out;
  }
}
}  // namespace detail

namespace detail {
// The zone a decode builds its objects in: one per thread, reused, so a small value's decode
// allocates nothing. A decode inside another's (a user adaptor decoding a nested value) gets a
// zone of its own.
class ZoneLease {
 public:
  ZoneLease() : own_(busy()) {
    if (own_) extra_ = std::make_unique<msgpack::zone>();
    else busy() = true;
  }
  ~ZoneLease() {
    if (!own_) {
      shared().clear();
      busy() = false;
    }
  }
  ZoneLease(const ZoneLease&) = delete;
  ZoneLease& operator=(const ZoneLease&) = delete;
  msgpack::zone& get() { return own_ ? *extra_ : shared(); }

 private:
  static msgpack::zone& shared() {
    thread_local msgpack::zone z;
    return z;
  }
  static bool& busy() {
    thread_local bool b = false;
    return b;
  }
  bool own_;
  std::unique_ptr<msgpack::zone> extra_;
};

// Unpacks one MessagePack object into `zone`. Strings and binaries are referenced, not copied
// into the zone (as<T>() copies once). No count or length may exceed the bytes that would hold
// it: a few bytes declaring a huge array or map cannot make the decoder allocate for it (found
// by fuzz/codec_fuzz.cc).
inline msgpack::object unpack(msgpack::zone& zone, const char* data, size_t size) {
  auto no_copy = [](msgpack::type::object_type, std::size_t, void*) { return true; };
  msgpack::unpack_limit limit(size, size / 2, size, size, size, 256);
  size_t off = 0;
  bool referenced = false;
  return msgpack::unpack(zone, data, size, off, referenced, no_copy, nullptr, limit);
}
}  // namespace detail

namespace detail {
inline uint64_t read_big_endian(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// A number's or a bool's MessagePack encoding read directly: no parser, no zone, no allocation.
// Gives nullopt for every other input (another type, a value out of T's range, trailing bytes),
// which the general decoder then reads, or rejects as it would anyway.
template <class T>
std::optional<T> decode_scalar(const char* data, size_t size) {
  auto* p = reinterpret_cast<const unsigned char*>(data);
  if (size == 0) return std::nullopt;
  const unsigned t = p[0];
  if constexpr (std::is_same_v<T, bool>) {
    if (size == 1 && (t == 0xc2 || t == 0xc3)) return t == 0xc3;
    return std::nullopt;
  } else {
    size_t len = 0;  // the encoding's length, type byte included
    bool negative = false;
    uint64_t u = 0;  // the value, or its two's complement when negative
    if (t <= 0x7f) {
      len = 1, u = t;
    } else if (t >= 0xe0) {
      len = 1, negative = true, u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(t)));
    } else if (t >= 0xcc && t <= 0xcf) {  // uint 8 .. 64
      len = 1 + (size_t{1} << (t - 0xcc));
      if (size == len) u = read_big_endian(p + 1, len - 1);
    } else if (t >= 0xd0 && t <= 0xd3) {  // int 8 .. 64
      len = 1 + (size_t{1} << (t - 0xd0));
      if (size == len) {
        size_t bits = 8 * (len - 1);
        u = read_big_endian(p + 1, len - 1);
        if (bits < 64 && (u >> (bits - 1)) != 0) u |= ~uint64_t{0} << bits;  // sign-extended
        negative = static_cast<int64_t>(u) < 0;
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (t == 0xca && size == 5) {
        uint32_t bits = static_cast<uint32_t>(read_big_endian(p + 1, 4));
        float f;
        std::memcpy(&f, &bits, 4);
        return static_cast<T>(f);
      }
      if (t == 0xcb && size == 9) {
        uint64_t bits = read_big_endian(p + 1, 8);
        double d;
        std::memcpy(&d, &bits, 8);
        return static_cast<T>(d);
      }
      return std::nullopt;
    } else {
      return std::nullopt;
    }
    if (len != size) return std::nullopt;
    if constexpr (std::is_floating_point_v<T>) {
      return negative ? static_cast<T>(static_cast<int64_t>(u)) : static_cast<T>(u);
    } else {
      if (negative) {
        auto s = static_cast<int64_t>(u);
        if constexpr (std::is_unsigned_v<T>) return std::nullopt;
        else if (s < static_cast<int64_t>(std::numeric_limits<T>::min())) return std::nullopt;
        return static_cast<T>(s);
      }
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
      return static_cast<T>(u);
    }
  }
}
}  // namespace detail

template <class T, class Enable = void>
struct Codec {
  static detail::Bytes encode(const T& v) { return detail::pack_exact(v); }
  static T decode(const char* data, size_t size) {
    if constexpr (std::is_arithmetic_v<T>)
      if (auto v = detail::decode_scalar<T>(data, size)) return *v;
    detail::ZoneLease zone;
    return detail::unpack(zone.get(), data, size).as<T>();
  }
};

namespace detail {
// Owns a vector's storage: an rvalue vector becomes bytes without a copy.
template <class V>
class VectorBuffer final : public Buffer {
 public:
  explicit VectorBuffer(V v) : v_(std::move(v)) {}
  const char* data() const override { return reinterpret_cast<const char*>(v_.data()); }
  size_t size() const override { return v_.size() * sizeof(typename V::value_type); }

 private:
  V v_;
};
}  // namespace detail

// Contiguous vectors of arithmetic values and strings are their raw bytes: one memcpy each way
// (none when an rvalue is put), which is what large arrays and tensors need. Nested inside other
// types they are MessagePack like everything else.
template <class E, class A>
struct Codec<std::vector<E, A>, std::enable_if_t<std::is_arithmetic_v<E> && !std::is_same_v<E, bool>>> {
  using V = std::vector<E, A>;
  static detail::Bytes encode(const V& v) { return detail::copy_bytes(v.data(), v.size() * sizeof(E)); }
  static detail::Bytes encode_owned(V&& v) {
    return std::make_shared<detail::VectorBuffer<V>>(std::move(v));
  }
  static V decode(const char* data, size_t size) {
    if (size % sizeof(E) != 0) throw msgpack::type_error();
    V v;
    if (reinterpret_cast<uintptr_t>(data) % alignof(E) == 0) {  // one pass: no zeroing first
      auto* p = reinterpret_cast<const E*>(data);
      v.assign(p, p + size / sizeof(E));
    } else {
      v.resize(size / sizeof(E));
      if (size) std::memcpy(v.data(), data, size);
    }
    return v;
  }
};

template <>
struct Codec<std::string> {
  static detail::Bytes encode(const std::string& s) {
    if (s.size() < (1u << 20)) return std::make_shared<detail::StringBuffer>(s);
    return detail::copy_bytes(s.data(), s.size());
  }
  static detail::Bytes encode_owned(std::string&& s) {
    return std::make_shared<detail::StringBuffer>(std::move(s));
  }
  static std::string decode(const char* data, size_t size) { return std::string(data, size); }
};

// A read-only array of numbers that shares the bytes it came from instead of copying them: a
// task parameter or an object read as an ArrayView<float> is the argument's or object's memory
// (its shared-memory segment, its received frame) itself. On the wire it is the same as a
// std::vector<E>, so a vector (or an ObjectRef to one) can be passed where a view is taken.
template <class E>
class ArrayView {
  static_assert(std::is_arithmetic_v<E> && !std::is_same_v<E, bool>, "ArrayView holds numbers");

 public:
  ArrayView() = default;
  // Bytes whose size is a multiple of sizeof(E) and whose address is aligned for E.
  explicit ArrayView(detail::Bytes b) : b_(std::move(b)) {}
  const E* data() const { return b_ ? reinterpret_cast<const E*>(b_->data()) : nullptr; }
  size_t size() const { return b_ ? b_->size() / sizeof(E) : 0; }
  bool empty() const { return size() == 0; }
  const E& operator[](size_t i) const { return data()[i]; }
  const E* begin() const { return data(); }
  const E* end() const { return data() + size(); }
  std::vector<E> to_vector() const { return std::vector<E>(begin(), end()); }
  const detail::Bytes& bytes() const { return b_; }

 private:
  detail::Bytes b_;
};

template <class E>
struct Codec<ArrayView<E>> {
  static detail::Bytes encode(const ArrayView<E>& v) {  // the same bytes: nothing is copied
    return v.bytes() ? v.bytes() : std::make_shared<detail::StringBuffer>(std::string());
  }
  static ArrayView<E> decode_bytes(const detail::Bytes& b) {
    if (b->size() % sizeof(E) != 0) throw msgpack::type_error();
    if (reinterpret_cast<uintptr_t>(b->data()) % alignof(E) == 0) return ArrayView<E>(b);
    return ArrayView<E>(detail::copy_bytes(b->data(), b->size()));  // misaligned: one copy
  }
  static ArrayView<E> decode(const char* data, size_t size) {
    return decode_bytes(detail::copy_bytes(data, size));
  }
};

template <class T>
concept OwnedEncodable = requires(T&& v) { Codec<T>::encode_owned(std::move(v)); };

template <class T>
detail::Bytes encode(const T& v) {
  return Codec<T>::encode(v);
}

// Codecs that can keep the received bytes (ArrayView) get them whole; others decode a copy.
template <class T>
T decode(const detail::Bytes& b) {
  if constexpr (requires { Codec<T>::decode_bytes(b); })
    return Codec<T>::decode_bytes(b);
  else
    return Codec<T>::decode(b->data(), b->size());
}

}  // namespace yard
