// Links between hosts: CurveZMQ encryption and authentication, and bounded reports of peers that
// are refused.
//
// Every process of a cluster holds the cluster token; the cluster's CURVE key pair is derived
// from it (SHA-256 of a label and the token as the secret key), so the keys reach a joining node
// with its token and never travel themselves. A socket that listens on an address other than
// loopback is a CURVE server with that key; a connection to such an address is a CURVE client
// with it, and the listening side's ZAP handler admits only clients that hold the same key. A
// peer without the token cannot complete the handshake: it can neither read nor inject. On
// loopback the links stay plain (the token in every message still authenticates them).
// YARD_CURVE=0 turns encryption off everywhere (for measuring its cost; not for use).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

namespace yard::detail {

struct CurveKeys {
  std::string public_z85, secret_z85;  // 40 characters each
};

// The cluster's key pair for this token.
CurveKeys curve_keys_for(const std::string& token);
// The cluster's key pair for a process's token, made when first needed (most loops of a
// process, such as simulated nodes', never encrypt).
class CurveIdentity {
 public:
  explicit CurveIdentity(std::string token) : token_(std::move(token)) {}
  const CurveKeys& keys() {
    if (!keys_) keys_ = curve_keys_for(token_);
    return *keys_;
  }

 private:
  std::string token_;
  std::optional<CurveKeys> keys_;
};
// The key that opens the cluster's web endpoints (Prometheus metrics, the dashboard): derived
// from the token (32 hex digits), so the token itself never travels over HTTP, and a key seen
// there opens only those read-only pages. The head writes it to <session>/web_key (0600).
std::string web_key_for(const std::string& token);
// Key material (64 hex digits) for a part that seals its own traffic between hosts, one per
// `purpose` (the collective groups': "collective"); unrelated to the other keys and the token.
std::string link_key_for(const std::string& token, const std::string& purpose);
// 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);
// Whether links to or from `host` are encrypted (not loopback, and YARD_CURVE is not 0).
bool curve_for_host(const std::string& host);
// The host part of "host:port".
std::string host_of(const std::string& address);

// Answers the ZAP requests waiting on `zap` (a REP socket bound at inproc://zeromq.zap.01):
// CURVE clients holding `allowed` (Z85) are admitted, every other one refused. Calls
// `refused(address, why)` for each refusal.
void answer_zap(zmq::socket_t& zap, const std::string& allowed,
                const std::function<void(const std::string& address, const std::string& why)>& refused);
// The verdict on one ZAP request: nullopt to admit, else why not. Sets *address (the peer's).
std::optional<std::string> zap_verdict(const std::vector<zmq::message_t>& request, const std::string& allowed,
                                       std::string* address);

// Counts refusals and malformed messages per peer, and says which to log: the first of a peer
// at once, then at most one line per peer per interval (with how many were left out). Holds at
// most kMaxPeers peers; the rest share one entry.
class PeerFaults {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxPeers = 1024;
  explicit PeerFaults(std::chrono::seconds every = std::chrono::seconds(30)) : every_(every) {}
  // The line to log for this fault now; none when it is left out.
  std::optional<std::string> note(const std::string& peer, const std::string& what, Clock::time_point now);
  uint64_t total() const { return total_; }

 private:
  struct Entry {
    uint64_t count = 0, left_out = 0;
    Clock::time_point logged{};
  };
  std::chrono::seconds every_;
  std::unordered_map<std::string, Entry> peers_;
  uint64_t total_ = 0;
};

}  // namespace yard::detail
