// The transport alone at a cluster's fan-out: the peer of the scale bench's creation rates.
//
// A creation in batches sends one message to each of up to 1,000 nodes; with 100 nodes ten go to
// each node together, with 1,000 each goes alone, over a connection of its own, to a node served by
// a thread of its own. What that costs libzmq and the kernel on these cores, with nothing of
// Switchyard in the way, is measured here: echo "nodes" laid out as the simulators lay out theirs
// (so many per process, a thread each, sharing one context with two I/O threads), and one ROUTER that
// connects to them all and sends each request to its node by name (libzmq's cheapest fan-out).
// SCALE_ECHO_ONE_THREAD=1 serves each process's nodes from one thread (zmq_poll over them all)
// instead, to see what the nodes' threads cost.
#pragma once

#include <string>
#include <vector>

namespace yard::bench::fanout {

// The echo process (`scale_bench --echo-nodes K --ready-fd N`): K ROUTER sockets on loopback,
// each echoing on its own thread. Reports "port1,port2,..." on the ready fd and serves until it is
// signalled (its parent's death sends SIGTERM).
int serve_echo(int nodes, int ready_fd);

// Round trips per second to `nodes` echo nodes, `per_process` in each echo process (started here,
// stopped before it returns):
// `total` 64-byte requests in batches of `batch`, spread round robin over the nodes, each batch
// sent at once and all its replies awaited before the next; the median of three such runs. And
// the CPU a round trip cost the sender and the echo processes (µs, over the three runs).
struct Figures {
  double per_s = 0, sender_cpu_us = 0, echo_cpu_us = 0;
};
Figures round_trips(int nodes, int per_process, int total, int batch);

}  // namespace yard::bench::fanout
