// Typed object references: ObjectRef<T>, put, get and wait, and how references travel as
// arguments and inside values (vectors, maps, YARD_FIELDS structs). Included by yard/yard.h.
//
//   auto r = yard::put(std::vector<float>(1024, 1.f));   // owned by this process
//   auto v = r.get();                                      // std::shared_ptr<std::vector<float>>
//
// An object lives while any ObjectRef to it exists anywhere in the cluster; the process that made
// it owns it, and others fetch it from the owner on first get().
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "yard/codec.h"
#include "yard/errors.h"

namespace yard {

using Duration = std::chrono::milliseconds;
inline constexpr Duration kForever = Duration::max();

namespace detail {

// Keeps an object alive in its owner's store while any ObjectRef to it exists.
class ObjectHolder {
 public:
  // owner: empty when this process owns the object, else the owner's address (a borrowed ref).
  explicit ObjectHolder(std::string id, std::string owner = {})
      : id_(std::move(id)), owner_(std::move(owner)) {}
  ~ObjectHolder();
  ObjectHolder(const ObjectHolder&) = delete;
  ObjectHolder& operator=(const ObjectHolder&) = delete;
  const std::string& id() const { return id_; }
  const std::string& owner() const { return owner_; }

 private:
  std::string id_, owner_;
};
using Holder = std::shared_ptr<ObjectHolder>;

struct Arg {
  Bytes value;    // an inline value, or
  Holder ref;     // a reference, resolved before the call runs; with a value too, the call waits
                  // for it to be ready and receives the value (the reference itself, encoded)
};

Holder put_bytes(Bytes value);
Bytes get_bytes(const std::string& id, Duration timeout);
// Indices of ready objects once at least num_returns are ready or the timeout passed.
std::vector<size_t> wait_ids(const std::vector<std::string>& ids, size_t num_returns,
                             Duration timeout);
// The values of all, in order, waiting once for all of them; throws the first error in order.
std::vector<Bytes> get_all_bytes(const std::vector<std::string>& ids, Duration timeout);
// A ref leaving this process: (id, owner address); the owner keeps the object for borrowers.
std::pair<std::string, std::string> export_ref(const Holder& h);
// A ref arriving in this process.
Holder import_ref(const std::string& id, const std::string& owner);

template <class T>
struct is_object_ref : std::false_type {};

}  // namespace detail

// A typed reference to a value that exists (or will exist) somewhere in the cluster.
// Copies share the reference; the value is freed when the last copy is gone.
template <class T>
class ObjectRef {
 public:
  ObjectRef() = default;
  explicit ObjectRef(detail::Holder h) : h_(std::move(h)) {}

  // Blocks (this fiber only) until the value is ready. Throws the remote error, WorkerCrashed,
  // ActorDied, or TimeoutError after `timeout`.
  std::shared_ptr<T> get(Duration timeout = kForever) const { return decode_value(detail::get_bytes(id(), timeout)); }
  // This object's bytes as a T.
  std::shared_ptr<T> decode_value(const detail::Bytes& b) const {
    try {
      return std::make_shared<T>(yard::decode<T>(b));
    } catch (const msgpack::type_error& e) {
      throw Error("object " + id() + " does not decode as the requested type: " + e.what());
    }
  }
  // The value as a read-only view of the stored bytes, without a decode copy (an object of
  // numbers: T is std::vector<E>). The view keeps the bytes alive.
  template <class U = T>
  auto view(Duration timeout = kForever) const -> ArrayView<typename U::value_type> {
    using E = typename U::value_type;
    static_assert(std::is_same_v<U, std::vector<E>> && std::is_arithmetic_v<E>, "view() is for vectors of numbers");
    return Codec<ArrayView<E>>::decode_bytes(detail::get_bytes(id(), timeout));
  }
  const std::string& id() const {
    static const std::string empty;
    return h_ ? h_->id() : empty;
  }
  bool valid() const { return h_ != nullptr; }
  const detail::Holder& holder() const { return h_; }

 private:
  detail::Holder h_;
};

namespace detail {
template <class T>
struct is_object_ref<ObjectRef<T>> : std::true_type {};

template <class T>
struct vector_of {
  using element = char;  // not a vector: matches no ArrayView parameter below
};
template <class E, class Al>
struct vector_of<std::vector<E, Al>> {
  using element = std::conditional_t<std::is_arithmetic_v<E> && !std::is_same_v<E, bool>, E, char>;
};

template <class P, class A>
Arg make_arg(A&& a) {
  using D = std::decay_t<A>;
  if constexpr (is_object_ref<D>::value) {
    // A parameter declared as a ref receives the ref itself (the callee may pass it on, wait on
    // it or get it; the object lives while it holds it), once its object is ready, so a worker
    // never waits on a task queued behind it; any other receives the value, resolved first.
    if constexpr (is_object_ref<std::decay_t<P>>::value) {
      static_assert(std::is_same_v<D, std::decay_t<P>>, "an ObjectRef argument of another type than its parameter's");
      return Arg{Codec<D>::encode(a), a.holder()};
    } else {
      return Arg{nullptr, a.holder()};
    }
  } else if constexpr (std::is_same_v<D, std::decay_t<P>> || std::is_same_v<ArrayView<typename vector_of<D>::element>, std::decay_t<P>>) {
    // (a vector passed where an ArrayView is taken: the same bytes)
    if constexpr (!std::is_lvalue_reference_v<A> && OwnedEncodable<D>)
      return Arg{Codec<D>::encode_owned(std::move(a)), nullptr};
    else
      return Arg{Codec<D>::encode(a), nullptr};
  } else {
    return Arg{Codec<std::decay_t<P>>::encode(static_cast<std::decay_t<P>>(std::forward<A>(a))),
               nullptr};
  }
}

// A constructor's argument: the actor class's registration says whether its parameter takes a ref
// (`takes_ref`), which the caller of yard::actor<T>(...) cannot see. A ref passed for a parameter
// of value type is resolved first; any other argument is passed as its own type.
template <class A>
Arg make_ctor_arg(A&& a, bool takes_ref) {
  using D = std::decay_t<A>;
  if constexpr (is_object_ref<D>::value) {
    if (takes_ref) return Arg{Codec<D>::encode(a), a.holder()};
    return Arg{nullptr, a.holder()};
  } else {
    return make_arg<D>(std::forward<A>(a));
  }
}

template <class Params, class... A, size_t... I>
std::vector<Arg> make_args(std::index_sequence<I...>, A&&... a) {
  return {make_arg<std::tuple_element_t<I, Params>>(std::forward<A>(a))...};
}
}  // namespace detail

// ObjectRefs are values too: put them in containers, return them from tasks, pass them on. The
// process that made the object owns it; others fetch it from the owner on first get().
template <class T>
struct Codec<ObjectRef<T>> {
  static detail::Bytes encode(const ObjectRef<T>& r) {
    return Codec<std::pair<std::string, std::string>>::encode(detail::export_ref(r.holder()));
  }
  static ObjectRef<T> decode(const char* data, size_t size) {
    auto [id, owner] = Codec<std::pair<std::string, std::string>>::decode(data, size);
    return ObjectRef<T>(detail::import_ref(id, owner));
  }
};

// msgpack adaptor so ObjectRefs nest inside vectors, maps and YARD_FIELDS structs.
}  // namespace yard
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {
template <class T>
struct convert<yard::ObjectRef<T>> {
  const msgpack::object& operator()(const msgpack::object& o, yard::ObjectRef<T>& v) const {
    auto p = o.as<std::pair<std::string, std::string>>();
    v = yard::ObjectRef<T>(yard::detail::import_ref(p.first, p.second));
    return o;
  }
};
template <class T>
struct pack<yard::ObjectRef<T>> {
  template <class Stream>
  msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o, const yard::ObjectRef<T>& v) const {
    return o.pack(yard::detail::export_ref(v.holder()));
  }
};
}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
namespace yard {

// Stores a value in this process's object store. An rvalue vector or string is moved in, not copied.
template <class T>
ObjectRef<std::decay_t<T>> put(T&& value) {
  using D = std::decay_t<T>;
  if constexpr (!std::is_lvalue_reference_v<T> && OwnedEncodable<D>)
    return ObjectRef<D>(detail::put_bytes(Codec<D>::encode_owned(std::move(value))));
  else
    return ObjectRef<D>(detail::put_bytes(Codec<D>::encode(value)));
}

template <class T>
std::vector<std::shared_ptr<T>> get(const std::vector<ObjectRef<T>>& refs,
                                    Duration timeout = kForever) {
  std::vector<std::string> ids;
  ids.reserve(refs.size());
  for (const auto& r : refs) ids.push_back(r.id());
  auto bytes = detail::get_all_bytes(ids, timeout);
  std::vector<std::shared_ptr<T>> out;
  out.reserve(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) out.push_back(refs[i].decode_value(bytes[i]));
  return out;
}

template <class T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> not_ready;
};

// Returns once num_returns refs are ready (values or errors) or the timeout passed.
template <class T>
WaitResult<T> wait(const std::vector<ObjectRef<T>>& refs, size_t num_returns,
                   Duration timeout = kForever) {
  std::vector<std::string> ids;
  ids.reserve(refs.size());
  for (const auto& r : refs) ids.push_back(r.id());
  auto ready_idx = detail::wait_ids(ids, num_returns, timeout);
  std::vector<bool> is_ready(refs.size(), false);
  for (auto i : ready_idx) is_ready[i] = true;
  WaitResult<T> res;
  for (size_t i = 0; i < refs.size(); ++i) (is_ready[i] ? res.ready : res.not_ready).push_back(refs[i]);
  return res;
}

}  // namespace yard
