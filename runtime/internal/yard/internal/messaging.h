// What the daemons, the CLI and the fuzzers use of the runtime's transport (runtime/src/transport):
//  * the process's channel: Messenger (what a part of a process is handed), Channel (its owner's
//    handle on the I/O loop) and IoLoop (listeners, limits, stop);
//  * messages: OutMessage and InMessage over the Cap'n Proto envelope (wire.capnp), typed errors
//    (LocalError, describe), replies held in groups (HeldReplies);
//  * link security: which hosts' links are encrypted (CURVE keys derived from the cluster token)
//    and the sealed links between processes on other machines;
//  * link limits: the batch cap and the descriptor limit.
// Everything else in the transport (sockets, peers, the outbox, timers) stays behind these.
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include "transport/link_limits.h"
#include "transport/link_security.h"
#include "transport/messenger.h"
#include "transport/sealed_link.h"
#include "transport/wire.h"
