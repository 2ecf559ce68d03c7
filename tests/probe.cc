// A helper program for the CLI tests.
//   probe embedded   starts an embedded cluster, prints "ready <address>", then waits to be killed
//   probe actor      joins YARD_ADDRESS, starts a named actor, prints "ready", waits for stdin EOF
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "yard/yard.h"

class Holder {
 public:
  Holder() = default;
  int ping() { return 1; }
};
YARD_ACTOR(Holder, yard::ctor<>, &Holder::ping);

int main(int argc, char** argv) {
  yard::init(argc, argv);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "embedded") {
    std::printf("ready %s\n", yard::cluster_address().c_str());
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "actor") {
    auto h = yard::actor<Holder>().name("probe-holder").remote();
    if (*h.call(&Holder::ping).remote().get(std::chrono::seconds(30)) != 1) return 1;
    std::printf("ready\n");
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    return *h.call(&Holder::ping).remote().get(std::chrono::seconds(30)) == 1 ? 0 : 3;
  }
  return 2;
}
