// A second reference for the async cases: the runtime's threads and hand-offs with none of its
// work. The driver's caller thread hands each 64-byte request to a loop thread (a locked queue and
// an eventfd wake, once per batch, as IoLoop::post) that owns the DEALER; the worker's loop thread
// owns the ROUTER and hands each request to an executor thread (a locked queue and a condition
// variable, as the worker's call queue), which hands the reply back to the loop the same way. Its
// rate over the raw DEALER -> ROUTER echo is the share of the transport that this structure leaves
// before any work (serialisation, ownership, futures) is done.
#pragma once

namespace bench {

// The worker side, in a process of its own: serves on 127.0.0.1:port until killed. `direct`: the
// thread that owns the ROUTER answers each request itself, as an actor's call port does
// (call_port.h), instead of handing it to an executor thread.
void handoff_server(int port, bool direct = false);
// `in_flight` requests handed over, then all replies awaited, in rounds for `seconds`; requests/s.
double handoff_pipelined(int port, int in_flight, double seconds);

}  // namespace bench
