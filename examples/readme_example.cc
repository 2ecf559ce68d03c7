// The README's example, word for word (tests/meson.build runs it, so the README cannot rot).
#include <cstdio>

#include "yard/yard.h"

int add(int a, int b) { return a + b; }
YARD_REMOTE(add);

class Counter {
 public:
  explicit Counter(int start) : n_(start) {}
  int incr(int by) { return n_ += by; }
 private:
  int n_;
};
YARD_ACTOR(Counter, yard::ctor<int>, &Counter::incr);

int main(int argc, char** argv) {
  try {
    yard::init(argc, argv);                      // first thing: workers run this same binary
  } catch (const yard::Error& e) {               // no cluster at YARD_ADDRESS, a wrong token...
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  auto sum = yard::task(add).remote(1, 2);       // ObjectRef<int>
  auto c = yard::actor<Counter>(10).name("counter").resources({{"CPU", 1}}).remote();
  auto r = c.call(&Counter::incr).remote(sum);   // a ref as argument: resolved before the call
  return *r.get() == 13 ? 0 : 1;
}
