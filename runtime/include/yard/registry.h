// The registry of remote functions and actor classes.
//
// Worker processes run the job's own binary, so the same registrations exist on both sides: a
// task names its function, an actor call names its class and method. YARD_REMOTE and YARD_ACTOR
// are thin sugar over Registry::add_function / add_actor, run during static initialisation.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <typeindex>
#include <utility>
#include <vector>

#include "yard/codec.h"
#include "yard/errors.h"
#include "yard/object_ref.h"

namespace yard {

// Names an actor class's constructor parameters: YARD_ACTOR(Counter, yard::ctor<int>, ...).
// A class registered without one is made with its default constructor.
template <class... Args>
struct ctor_t {};
template <class... Args>
inline constexpr ctor_t<Args...> ctor{};

namespace detail {

using Invoker = std::function<Bytes(const std::vector<Bytes>& args)>;
using MethodInvoker = std::function<Bytes(void* self, const std::vector<Bytes>& args)>;
using Factory = std::function<std::shared_ptr<void>(const std::vector<Bytes>& args)>;

struct ActorClass {
  std::string name;
  Factory factory;
  std::map<std::string, MethodInvoker> methods;
  std::map<std::string, std::string> method_by_key;  // member-pointer bytes -> method name
  // Whether each constructor parameter is an ObjectRef (it receives the ref; any other receives
  // the value of a ref passed for it), for yard::actor<T>(...) to pass each argument as it is taken.
  std::vector<bool> ref_params;
};

template <class T>
using ret_t = std::conditional_t<std::is_void_v<T>, Void, std::decay_t<T>>;

template <class Sig>
struct fn_traits;
template <class R, class... P>
struct fn_traits<R (*)(P...)> {
  using result = R;
  using params = std::tuple<std::decay_t<P>...>;
  static constexpr size_t arity = sizeof...(P);
};
template <class C, class R, class... P>
struct fn_traits<R (C::*)(P...)> {
  using klass = C;
  using result = R;
  using params = std::tuple<std::decay_t<P>...>;
  static constexpr size_t arity = sizeof...(P);
};
template <class C, class R, class... P>
struct fn_traits<R (C::*)(P...) const> : fn_traits<R (C::*)(P...)> {};

template <class Tuple, size_t... I>
Tuple decode_args(const std::vector<Bytes>& args, std::index_sequence<I...>) {
  return Tuple{yard::decode<std::tuple_element_t<I, Tuple>>(args[I])...};
}

template <class Tuple>
Tuple decode_all(const std::vector<Bytes>& args) {
  constexpr size_t n = std::tuple_size_v<Tuple>;
  if (args.size() != n)
    throw Error("expected " + std::to_string(n) + " arguments, got " + std::to_string(args.size()));
  return decode_args<Tuple>(args, std::make_index_sequence<n>{});
}

template <class F>
Bytes invoke_encoded(F&& call) {
  using R = decltype(call());
  if constexpr (std::is_void_v<R>) {
    call();
    return Codec<Void>::encode(Void{});
  } else if constexpr (!std::is_reference_v<R> && OwnedEncodable<std::decay_t<R>>) {
    return Codec<std::decay_t<R>>::encode_owned(call());  // a returned vector is not copied
  } else {
    return Codec<std::decay_t<R>>::encode(call());
  }
}

template <class Key>
std::string key_bytes(Key k) {
  std::string s(sizeof(k), '\0');
  std::memcpy(s.data(), &k, sizeof(k));
  return s;
}

// The names in a stringified argument list ("yard::ctor<int, X>, &C::a, &C::b": "ctor<int, X>", "a", "b").
std::vector<std::string> split_names(const char* stringified);

template <class T>
struct is_ctor_tag : std::false_type {};
template <class... A>
struct is_ctor_tag<ctor_t<A...>> : std::true_type {};

}  // namespace detail

class Registry {
 public:
  // The process-wide registry that YARD_REMOTE and YARD_ACTOR fill.
  static Registry& global();

  template <class R, class... P>
  bool add_function(const std::string& name, R (*fn)(P...)) {
    using Params = std::tuple<std::decay_t<P>...>;
    add_function_erased(name, detail::key_bytes(fn), [fn](const std::vector<detail::Bytes>& args) {
      Params p = detail::decode_all<Params>(args);
      return detail::invoke_encoded([&] { return std::apply(fn, std::move(p)); });
    });
    return true;
  }

  // YARD_ACTOR's arguments after the class: a yard::ctor<...> first (or none), then methods.
  template <class T, class... Args>
  bool add_actor(const std::string& name, const char* stringified, Args... args) {
    auto names = detail::split_names(stringified);
    if constexpr (sizeof...(Args) > 0 && detail::is_ctor_tag<std::tuple_element_t<0, std::tuple<Args...>>>::value) {
      names.erase(names.begin());
      return std::apply([&](auto tag, auto... methods) { return add_actor_with<T>(name, tag, names, methods...); },
                        std::make_tuple(args...));
    } else {
      static_assert(std::is_default_constructible_v<T>,
                    "YARD_ACTOR(Class, &Class::method, ...) makes the actor with its default constructor, "
                    "and this class has none: name the constructor's parameters first, as in "
                    "YARD_ACTOR(Class, yard::ctor<int, std::string>, &Class::method)");
      return add_actor_with<T>(name, ctor_t<>{}, names, args...);
    }
  }

  template <class T, class... CtorArgs, class... Methods>
  bool add_actor_with(const std::string& name, ctor_t<CtorArgs...>, const std::vector<std::string>& names,
                      Methods... methods) {
    static_assert(std::is_constructible_v<T, CtorArgs...>,
                  "YARD_ACTOR: the class has no constructor taking the parameters named in yard::ctor<...>");
    static_assert((std::is_member_function_pointer_v<Methods> && ...),
                  "YARD_ACTOR: after the class (and its yard::ctor<...>) come its methods, as &Class::method");
    detail::ActorClass cls;
    cls.name = name;
    cls.ref_params = {detail::is_object_ref<std::decay_t<CtorArgs>>::value...};
    cls.factory = [](const std::vector<detail::Bytes>& args) -> std::shared_ptr<void> {
      auto p = detail::decode_all<std::tuple<std::decay_t<CtorArgs>...>>(args);
      return std::apply([](auto&&... a) { return std::make_shared<T>(std::move(a)...); },
                        std::move(p));
    };
    size_t i = 0;
    (add_method<T>(cls, names.at(i++), methods), ...);
    add_actor_erased(typeid(T), std::move(cls));
    return true;
  }

  // Look-ups; nullptr / empty when absent.
  const detail::Invoker* function(const std::string& name) const;
  std::string function_name(const std::string& key) const;
  const detail::ActorClass* actor_class(const std::string& name) const;
  const detail::ActorClass* actor_class(std::type_index type) const;

  template <class F>
  std::string name_of_function(F fn) const {
    auto n = function_name(detail::key_bytes(fn));
    if (n.empty()) throw NotFoundError("function is not registered with YARD_REMOTE");
    return n;
  }

 private:
  template <class T, class M>
  static void add_method(detail::ActorClass& cls, const std::string& name, M m) {
    using Params = typename detail::fn_traits<M>::params;
    cls.methods[name] = [m](void* self, const std::vector<detail::Bytes>& args) {
      Params p = detail::decode_all<Params>(args);
      T* obj = static_cast<T*>(self);
      return detail::invoke_encoded([&] {
        return std::apply([&](auto&&... a) { return (obj->*m)(std::move(a)...); }, std::move(p));
      });
    };
    cls.method_by_key[detail::key_bytes(m)] = name;
  }

  void add_function_erased(const std::string& name, std::string key, detail::Invoker inv);
  void add_actor_erased(std::type_index type, detail::ActorClass cls);

  std::map<std::string, detail::Invoker> functions_;
  std::map<std::string, std::string> function_by_key_;
  std::map<std::string, detail::ActorClass> classes_;
  std::map<std::type_index, std::string> class_by_type_;
};

namespace detail {
template <class... Fns>
bool register_functions(const char* names, Fns... fns) {
  auto list = split_names(names);
  size_t i = 0;
  (Registry::global().add_function(list.at(i++), fns), ...);
  return true;
}
}  // namespace detail

}  // namespace yard

#define YARD_CONCAT_INNER(a, b) a##b
#define YARD_CONCAT(a, b) YARD_CONCAT_INNER(a, b)

// Registers one or more free functions as remote tasks: YARD_REMOTE(add, mul);
#define YARD_REMOTE(...)                                                                   \
  static const bool YARD_CONCAT(yard_remote_reg_, __LINE__) = ::yard::detail::register_functions( \
      #__VA_ARGS__, __VA_ARGS__)

// Registers an actor class, its constructor parameters and its remote methods:
//   YARD_ACTOR(Counter, yard::ctor<int>, &Counter::incr, &Counter::value);
//   YARD_ACTOR(Echo, &Echo::ping);   // made with its default constructor
#define YARD_ACTOR(Class, ...)                                  \
  static const bool YARD_CONCAT(yard_actor_reg_, __LINE__) =    \
      ::yard::Registry::global().add_actor<Class>(#Class, #__VA_ARGS__ __VA_OPT__(, ) __VA_ARGS__)
