// libFuzzer target: yard::decode of every kind of value the codec supports, from arbitrary bytes.
// A decode may refuse its input (an exception); it must never crash, hang or read out of bounds.
// FUZZ_MAKE_SEEDS=DIR writes encodings of typical values to DIR and exits (scripts/fuzz seeds the
// corpus with them).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "yard/codec.h"

// The runtime's allocator puts large values in shared memory; here the heap is enough.
namespace yard::detail {
namespace {
class Heap final : public Buffer {
 public:
  explicit Heap(size_t n) : s_(n, '\0') {}
  const char* data() const override { return s_.data(); }
  size_t size() const override { return s_.size(); }
  char* mutable_data() { return s_.data(); }

 private:
  std::string s_;
};
}  // namespace
WritableBytes allocate_bytes(size_t size) {
  auto b = std::make_shared<Heap>(size);
  return {b, b->mutable_data()};
}
}  // namespace yard::detail

namespace {

struct Record {
  int id = 0;
  std::string name;
  std::vector<double> values;
  std::map<std::string, int> counts;
  std::optional<std::string> note;
  YARD_FIELDS(id, name, values, counts, note);
};

template <class T>
void attempt(const yard::detail::Bytes& b) {
  try {
    (void)yard::decode<T>(b);
  } catch (const std::exception&) {
  }
}

template <class T>
void seed(const std::string& dir, const std::string& name, const T& v) {
  auto b = yard::encode(v);
  std::ofstream(dir + "/" + name, std::ios::binary).write(b->data(), static_cast<std::streamsize>(b->size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_MAKE_SEEDS")) {
    seed(dir, "int", 42);
    seed(dir, "string", std::string("hello yard"));
    seed(dir, "doubles", std::vector<double>{1, 2.5, -3});
    seed(dir, "strings", std::vector<std::string>{"a", "bc", ""});
    seed(dir, "map", std::map<std::string, int>{{"x", 1}, {"y", 2}});
    seed(dir, "tuple", std::tuple<int, std::string, double>{7, "t", 0.5});
    seed(dir, "record", Record{3, "r", {1, 2}, {{"k", 4}}, std::string("n")});
    seed(dir, "nested", std::vector<std::vector<int>>{{1, 2}, {}, {3}});
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto b = yard::detail::copy_bytes(data, size);
  attempt<int>(b);
  attempt<int64_t>(b);
  attempt<double>(b);
  attempt<bool>(b);
  attempt<std::string>(b);
  attempt<std::vector<uint8_t>>(b);
  attempt<std::vector<float>>(b);
  attempt<std::vector<double>>(b);
  attempt<std::vector<std::string>>(b);
  attempt<std::vector<std::vector<int>>>(b);
  attempt<std::map<std::string, int>>(b);
  attempt<std::map<int, std::vector<double>>>(b);
  attempt<std::tuple<int, std::string, double>>(b);
  attempt<std::optional<std::string>>(b);
  attempt<yard::ArrayView<float>>(b);
  attempt<yard::ArrayView<int64_t>>(b);
  attempt<Record>(b);
  attempt<std::vector<Record>>(b);
  return 0;
}
