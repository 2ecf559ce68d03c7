// The actor class and the task simulated nodes run (`yard start --address HEAD --simulate N`).
//
// Simulated nodes run no worker processes: an actor placed on one is constructed inside the
// simulator's process and its calls are answered there, and a task sent to a worker leased from
// one runs there. Any class or function registered in the simulator's binary can run that way;
// `yard` itself registers these, so a driver that includes this header can use simulated nodes
// and check what they answer:
//
//   auto a = yard::actor<yard::SimulatedCounter>(int64_t{5}).remote();
//   a.call(&yard::SimulatedCounter::add).remote(int64_t{2}).get();              // 7
//   yard::task(yard::simulated_add).node_affinity(node).remote(int64_t{2}, int64_t{3}).get();  // 5
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "yard/registry.h"

namespace yard {

class SimulatedCounter {
 public:
  SimulatedCounter() = default;
  explicit SimulatedCounter(int64_t start) : value_(start) {}
  // Adds `x`; the new value.
  int64_t add(int64_t x) { return value_ += x; }
  int64_t value() { return value_; }
  std::string echo(std::string s) { return s; }

 private:
  int64_t value_ = 0;
};

YARD_ACTOR(SimulatedCounter, yard::ctor<int64_t>, &SimulatedCounter::add, &SimulatedCounter::value,
           &SimulatedCounter::echo);

inline int64_t simulated_add(int64_t a, int64_t b) { return a + b; }
// The process a task ran in: a simulator's for a task on a simulated node.
inline int64_t simulated_pid() { return static_cast<int64_t>(getpid()); }
YARD_REMOTE(simulated_add, simulated_pid);

}  // namespace yard
