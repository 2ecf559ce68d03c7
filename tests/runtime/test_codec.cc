#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <tuple>

#include "yard/codec.h"
#include "yard/registry.h"

namespace {
struct Point {
  double x = 0, y = 0;
  std::string label;
  YARD_FIELDS(x, y, label);
  bool operator==(const Point& o) const { return x == o.x && y == o.y && label == o.label; }
};

template <class T>
T round_trip(const T& v) {
  return yard::decode<T>(yard::encode(v));
}

int twice(int a) { return 2 * a; }
std::string join(std::string a, const std::string& b) { return a + b; }
void nothing() {}
YARD_REMOTE(twice, join, nothing);

struct Acc {
  explicit Acc(std::string p) : prefix(std::move(p)) {}
  std::string add(std::string s) { return prefix += s; }
  size_t size() const { return prefix.size(); }
  std::string prefix;
};
YARD_ACTOR(Acc, yard::ctor<std::string>, &Acc::add, &Acc::size);

// Without a yard::ctor<...>: the default constructor.
struct Ping {
  int ping() { return 7; }
};
YARD_ACTOR(Ping, &Ping::ping);

// Several constructor parameters, named in the macro itself.
struct Pair {
  Pair(int a, std::string b) : s(b + std::to_string(a)) {}
  std::string get() { return s; }
  std::string s;
};
YARD_ACTOR(Pair, yard::ctor<int, std::string>, &Pair::get);
}  // namespace

TEST_CASE("codec round-trips the documented value kinds", "[codec]") {
  CHECK(round_trip(42) == 42);
  CHECK(round_trip(-7LL) == -7LL);
  CHECK(round_trip(3.25) == 3.25);
  CHECK(round_trip(true) == true);
  CHECK(round_trip(std::string("héllo\0x", 7)) == std::string("héllo\0x", 7));
  CHECK(round_trip(std::vector<float>{1.5f, -2.f}) == std::vector<float>{1.5f, -2.f});
  CHECK(round_trip(std::map<std::string, int>{{"a", 1}, {"b", 2}}) == std::map<std::string, int>{{"a", 1}, {"b", 2}});
  CHECK(round_trip(std::tuple<int, std::string>{1, "x"}) == std::tuple<int, std::string>{1, "x"});
  CHECK(round_trip(std::optional<int>{}) == std::optional<int>{});
  CHECK(round_trip(std::optional<int>{5}) == std::optional<int>{5});
  CHECK(round_trip(Point{1, 2, "p"}) == Point{1, 2, "p"});
  CHECK(round_trip(std::vector<Point>{{1, 2, "a"}, {3, 4, "b"}}).size() == 2);
}

TEST_CASE("codec reports bytes of the wrong type", "[codec]") {
  auto b = yard::encode(std::map<std::string, int>{{"a", 1}});
  CHECK_THROWS_AS(yard::decode<int>(b), msgpack::type_error);
  auto odd = yard::encode(std::string("12345"));  // 5 bytes are no whole number of floats
  CHECK_THROWS_AS(yard::decode<std::vector<float>>(odd), msgpack::type_error);
}

// What the general decoder (MessagePack's parser and as<T>()) makes of `bytes`: a value, or
// nothing when it refuses them.
template <class T>
std::optional<T> general_decode(const std::string& bytes) {
  try {
    yard::detail::ZoneLease zone;
    return yard::detail::unpack(zone.get(), bytes.data(), bytes.size()).as<T>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

template <class T>
void check_scalar_agrees(const std::string& bytes, bool expect_fast) {
  auto fast = yard::detail::decode_scalar<T>(bytes.data(), bytes.size());
  auto general = general_decode<T>(bytes);
  if (fast) {
    REQUIRE(general.has_value());
    REQUIRE(*fast == *general);
  }
  if (expect_fast && general) REQUIRE(fast.has_value());
}

template <class V>
std::string packed(V v) {
  msgpack::sbuffer b;
  msgpack::pack(b, v);
  return std::string(b.data(), b.size());
}

TEST_CASE("numbers and bools decode without the parser, as the parser would", "[codec]") {
  std::vector<int64_t> signed_values = {0, 1, 5, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2147483647LL,
                                        2147483648LL, 4294967295LL, 4294967296LL, INT64_MAX, -1, -31, -32, -33,
                                        -127, -128, -129, -32768, -32769, -2147483648LL, -2147483649LL, INT64_MIN};
  std::vector<std::string> encodings;
  for (auto v : signed_values) {
    encodings.push_back(packed(v));
    if (v >= 0) encodings.push_back(packed(static_cast<uint64_t>(v)));
    // Signed formats holding non-negative values, as other encoders write them.
    encodings.push_back(std::string("\xd0", 1) + static_cast<char>(v & 0xff));
    encodings.push_back(std::string("\xd1", 1) + static_cast<char>((v >> 8) & 0xff) + static_cast<char>(v & 0xff));
  }
  encodings.push_back(packed(UINT64_MAX));
  encodings.push_back(packed(1.5f));
  encodings.push_back(packed(-2.25));
  encodings.push_back(packed(true));
  encodings.push_back(packed(false));
  encodings.push_back(packed(std::string("7")));
  for (auto& e : encodings) {
    check_scalar_agrees<int>(e, true);
    check_scalar_agrees<int8_t>(e, true);
    check_scalar_agrees<uint8_t>(e, true);
    check_scalar_agrees<int16_t>(e, true);
    check_scalar_agrees<uint32_t>(e, true);
    check_scalar_agrees<int64_t>(e, true);
    check_scalar_agrees<uint64_t>(e, true);
    check_scalar_agrees<double>(e, true);
    check_scalar_agrees<float>(e, true);
    check_scalar_agrees<bool>(e, true);
  }
  // Trailing bytes (which the parser ignores), a truncated number, nothing: the parser's answer.
  for (auto& e : {packed(7) + "x", std::string("\xcd\x01", 2), std::string()}) {
    check_scalar_agrees<int>(e, false);
    check_scalar_agrees<double>(e, false);
  }
  // Through the codec: the fast path's values, the parser's errors.
  REQUIRE(round_trip(-123456789) == -123456789);
  REQUIRE(round_trip(uint64_t{UINT64_MAX}) == UINT64_MAX);
  REQUIRE(round_trip(0.1) == 0.1);
  REQUIRE(round_trip(true));
  REQUIRE_THROWS_AS(yard::decode<uint8_t>(yard::encode(300)), msgpack::type_error);
  REQUIRE_THROWS_AS(yard::decode<int>(yard::encode(std::vector<std::string>{"x"})), msgpack::type_error);
}

TEST_CASE("vectors of numbers are raw bytes; rvalues are moved, not copied", "[codec]") {
  std::vector<float> v{1.f, 2.f, 3.f};
  auto b = yard::encode(v);
  CHECK(b->size() == 3 * sizeof(float));
  std::vector<int64_t> big(1000, 9);
  const void* storage = big.data();
  auto owned = yard::Codec<std::vector<int64_t>>::encode_owned(std::move(big));
  CHECK(static_cast<const void*>(owned->data()) == storage);
  CHECK(yard::decode<std::vector<int64_t>>(owned) == std::vector<int64_t>(1000, 9));
  CHECK(yard::decode<std::vector<bool>>(yard::encode(std::vector<bool>{true, false})) ==
        std::vector<bool>{true, false});
}

TEST_CASE("large values survive the codec unchanged", "[codec]") {
  std::vector<double> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) * 0.5;
  CHECK(round_trip(big) == big);
}

TEST_CASE("registry finds functions and actor methods by name and by pointer", "[registry]") {
  auto& r = yard::Registry::global();
  CHECK(r.name_of_function(&twice) == "twice");
  CHECK(r.name_of_function(&join) == "join");
  auto* inv = r.function("twice");
  REQUIRE(inv);
  auto out = (*inv)({yard::encode(21)});
  CHECK(yard::decode<int>(out) == 42);
  CHECK_THROWS_WITH((*inv)({}), Catch::Contains("expected 1 arguments, got 0"));
  auto v = (*r.function("nothing"))({});
  CHECK(yard::decode<yard::Void>(v) == yard::Void{});

  const auto* cls = r.actor_class(typeid(Acc));
  REQUIRE(cls);
  CHECK(cls->name == "Acc");
  CHECK(cls->methods.count("add") == 1);
  CHECK(cls->methods.count("size") == 1);
  CHECK(cls->method_by_key.at(yard::detail::key_bytes(&Acc::add)) == "add");
  auto obj = cls->factory({yard::encode(std::string("ab"))});
  auto res = cls->methods.at("add")(obj.get(), {yard::encode(std::string("c"))});
  CHECK(yard::decode<std::string>(res) == "abc");
}

TEST_CASE("actor classes register with their default constructor or named parameters", "[registry]") {
  auto& r = yard::Registry::global();
  const auto* ping = r.actor_class(typeid(Ping));
  REQUIRE(ping);
  REQUIRE(ping->methods.size() == 1);
  auto p = ping->factory({});
  CHECK(yard::decode<int>(ping->methods.at("ping")(p.get(), {})) == 7);
  CHECK_THROWS_WITH(ping->factory({yard::encode(1)}), Catch::Contains("expected 0 arguments, got 1"));
  const auto* pair = r.actor_class(typeid(Pair));
  REQUIRE(pair);
  CHECK(pair->methods.size() == 1);
  CHECK(pair->methods.count("get") == 1);
  auto q = pair->factory({yard::encode(3), yard::encode(std::string("x"))});
  CHECK(yard::decode<std::string>(pair->methods.at("get")(q.get(), {})) == "x3");
}

TEST_CASE("an ArrayView shares the bytes it is decoded from", "[codec]") {
  std::vector<float> v{1.5f, 2.5f, 3.5f};
  auto bytes = yard::encode(v);  // a vector's wire form is a view's
  auto view = yard::decode<yard::ArrayView<float>>(bytes);
  REQUIRE(view.size() == 3);
  CHECK(view[1] == 2.5f);
  CHECK(static_cast<const void*>(view.data()) == static_cast<const void*>(bytes->data()));  // no copy
  CHECK(yard::encode(view) == bytes);  // and none on the way back out
  CHECK(view.to_vector() == v);
  CHECK_THROWS_AS(yard::decode<yard::ArrayView<float>>(yard::encode(std::string("abcde"))), msgpack::type_error);
  // Misaligned bytes are copied once into aligned memory.
  auto odd = std::make_shared<yard::detail::StringBuffer>(std::string(1, 'x') + std::string(8, '\0'));
  struct Tail final : yard::detail::Buffer {
    yard::detail::Bytes b;
    const char* data() const override { return b->data() + 1; }
    size_t size() const override { return 8; }
  };
  auto tail = std::make_shared<Tail>();
  tail->b = odd;
  auto dv = yard::decode<yard::ArrayView<double>>(tail);
  CHECK(dv.size() == 1);
  CHECK(dv[0] == 0.0);
  CHECK(reinterpret_cast<uintptr_t>(dv.data()) % alignof(double) == 0);
}

TEST_CASE("split_names keeps template arguments together", "[registry]") {
  auto n = yard::detail::split_names("yard::ctor<int, std::map<int, int>>, &A::f");
  REQUIRE(n.size() == 2);
  CHECK(n[1] == "f");
  CHECK(yard::detail::split_names("").empty());
}

TEST_CASE("split_names strips class prefixes and ampersands", "[registry]") {
  auto n = yard::detail::split_names("&A::f, &ns::B::g,h");
  REQUIRE(n.size() == 3);
  CHECK(n[0] == "f");
  CHECK(n[1] == "g");
  CHECK(n[2] == "h");
}

TEST_CASE("numbers encode on the stack to msgpack's own bytes, and short values keep them inline", "[codec]") {
  auto bytes = [](const yard::detail::Bytes& b) { return std::string(b->data(), b->size()); };
  for (int64_t v : {int64_t{0}, int64_t{127}, int64_t{128}, int64_t{-33}, int64_t{65536}, INT64_MIN, INT64_MAX})
    CHECK(bytes(yard::encode(v)) == packed(v));
  CHECK(bytes(yard::encode(uint64_t{UINT64_MAX})) == packed(UINT64_MAX));
  CHECK(bytes(yard::encode(-2.25)) == packed(-2.25));
  CHECK(bytes(yard::encode(1.5f)) == packed(1.5f));
  CHECK(bytes(yard::encode(true)) == packed(true));
  CHECK(bytes(yard::encode('a')) == packed('a'));
  // A short packed value fits the inline record; a longer one does not, and both keep their bytes.
  std::map<std::string, int> few{{"a", 1}}, many;
  for (int i = 0; i < 10; ++i) many["key" + std::to_string(i)] = i;
  auto small = yard::encode(few);
  CHECK(dynamic_cast<const yard::detail::SmallBuffer*>(small.get()) != nullptr);
  CHECK(bytes(small) == packed(few));
  auto larger = yard::encode(many);
  CHECK(dynamic_cast<const yard::detail::SmallBuffer*>(larger.get()) == nullptr);
  CHECK(yard::decode<std::map<std::string, int>>(larger) == many);
}
