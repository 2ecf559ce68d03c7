// What runs when a request's reply (or its local error) comes: a move-only function that keeps a
// callable of up to kInline bytes inside itself. A request's callback is made for every call a
// process sends; std::function would put one holding a shared pointer on the heap each time.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "wire.h"

namespace yard::detail {

// Why a request got no reply: its peer was lost or refused it, or its deadline passed.
struct LocalError {
  wire::ErrorCode code;
  std::string message;
  bool shutdown = false;  // this process is ending (IoLoop::closing): nothing is retried
};

class ReplyCallback {
 public:
  static constexpr size_t kInline = 48;

  ReplyCallback() = default;
  ReplyCallback(std::nullptr_t) {}
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ReplyCallback> &&
                                              !std::is_same_v<std::decay_t<F>, std::nullptr_t>>>
  ReplyCallback(F&& f) {  // NOLINT: made from any callable, as std::function is
    using T = std::decay_t<F>;
    if constexpr (sizeof(T) <= kInline && alignof(T) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<T>) {
      new (buf_) T(std::forward<F>(f));
      ops_ = &inline_ops<T>;
    } else {
      *reinterpret_cast<T**>(buf_) = new T(std::forward<F>(f));
      ops_ = &heap_ops<T>;
    }
  }
  ReplyCallback(ReplyCallback&& o) noexcept : ops_(o.ops_) {
    if (ops_) ops_->move(buf_, o.buf_);
    o.ops_ = nullptr;
  }
  ReplyCallback& operator=(ReplyCallback&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_) ops_->move(buf_, o.buf_);
      o.ops_ = nullptr;
    }
    return *this;
  }
  ReplyCallback(const ReplyCallback&) = delete;
  ReplyCallback& operator=(const ReplyCallback&) = delete;
  ~ReplyCallback() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()(std::unique_ptr<InMessage> reply, std::optional<LocalError> error) {
    ops_->call(buf_, std::move(reply), std::move(error));
  }

 private:
  struct Ops {
    void (*call)(void*, std::unique_ptr<InMessage>, std::optional<LocalError>);
    void (*move)(void* to, void* from);  // leaves `from` destroyed
    void (*destroy)(void*);
  };
  template <class T>
  static constexpr Ops inline_ops{
      [](void* p, std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
        (*static_cast<T*>(p))(std::move(r), std::move(e));
      },
      [](void* to, void* from) {
        new (to) T(std::move(*static_cast<T*>(from)));
        static_cast<T*>(from)->~T();
      },
      [](void* p) { static_cast<T*>(p)->~T(); }};
  template <class T>
  static constexpr Ops heap_ops{
      [](void* p, std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
        (**static_cast<T**>(p))(std::move(r), std::move(e));
      },
      [](void* to, void* from) { *static_cast<T**>(to) = *static_cast<T**>(from); },
      [](void* p) { delete *static_cast<T**>(p); }};

  void reset() {
    if (ops_) ops_->destroy(buf_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

}  // namespace yard::detail
