// Joining a cluster: the head is asked where its control store is and how to reach it.
#pragma once

#include <string>

#include "yard/internal/messaging.h"
#include "yard/internal/control_client.h"

namespace yard::sched {

// Redis as this host reaches it (address, password), and the cluster's web identity (beyond
// loopback).
struct ControlStoreAccess : detail::ControlStoreAccess {
  std::string web_tls_key, web_tls_cert;
  std::string redis_tls_cert;  // PEM of the control store's TLS certificate ("" : plain)
  std::string head;            // the head that answered
};

// Asks the head at `head`; a head that listens everywhere names its Redis by loopback, which is
// rewritten to the head's host, and Redis' TLS certificate (if any) is trusted for that address.
// Throws ConnectionError when the head cannot be reached, AuthError when it refuses the token.
// `head` may list a head and its standbys ("A,B,C"): the first that serves answers.
ControlStoreAccess ask_control_store(detail::Messenger& io, const std::string& head, const std::string& token);

}  // namespace yard::sched
