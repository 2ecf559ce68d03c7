// The actor class simulated nodes host (`yard start --address HEAD --simulate N`).
//
// Simulated nodes run no worker processes: an actor placed on one is constructed inside the
// simulator's process and its calls are answered there. Any class registered in the simulator's
// binary can be hosted that way; `yard` itself registers this one, so a driver that includes this
// header can create actors on simulated nodes and check what they answer:
//
//   auto a = yard::actor<yard::SimulatedCounter>(yard::ActorOptions{}, int64_t{5});
//   a.call(&yard::SimulatedCounter::add, int64_t{2}).get();   // 7
#pragma once

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

}  // namespace yard
