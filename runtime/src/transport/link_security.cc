#include "link_security.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <cstring>

#include "yard/errors.h"
#include "yard/process.h"

namespace yard::detail {

CurveKeys curve_keys_for(const std::string& token) {
  std::string input = std::string("switchyard curve key 1") + '\0' + token;
  unsigned char secret[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), secret, &len, EVP_sha256(), nullptr);
  char sk[41], pk[41];
  if (len != 32 || !zmq_z85_encode(sk, secret, 32) || zmq_curve_public(pk, sk) != 0)
    throw Error("cannot make the cluster's CURVE keys (is libzmq built with CURVE?)");
  return {pk, sk};
}

std::string web_key_for(const std::string& token) {
  std::string input = std::string("switchyard web access 1") + '\0' + token;
  return sys::sha256_hex(input.data(), input.size()).substr(0, 32);
}

std::string link_key_for(const std::string& token, const std::string& purpose) {
  std::string input = std::string("switchyard link key 1") + '\0' + purpose + '\0' + token;
  return sys::sha256_hex(input.data(), input.size());
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

bool curve_for_host(const std::string& host) {
  static const bool off = [] {
    const char* v = std::getenv("YARD_CURVE");
    return v && std::string(v) == "0";
  }();
  return !off && !is_loopback_host(host);
}

std::string host_of(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// ZAP 1.0 (RFC 27): version, request id, domain, address, identity, mechanism, credentials.
std::optional<std::string> zap_verdict(const std::vector<zmq::message_t>& req, const std::string& allowed,
                                       std::string* address) {
  if (req.size() < 6 || req[0].to_string() != "1.0") return "malformed ZAP request";
  *address = req[3].to_string();
  if (req[5].to_string() != "CURVE") return "not a CURVE client";
  if (req.size() < 7 || req[6].size() != 32) return "no client key";
  char z85[41];
  if (!zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32)) return "bad client key";
  if (allowed != z85) return "its key is not the cluster's (wrong cluster token)";
  return std::nullopt;
}

void answer_zap(zmq::socket_t& zap, const std::string& allowed,
                const std::function<void(const std::string& address, const std::string& why)>& refused) {
  for (;;) {
    std::vector<zmq::message_t> req;
    zmq::message_t m;
    if (!zap.recv(m, zmq::recv_flags::dontwait)) return;
    bool more = m.more();
    req.push_back(std::move(m));
    while (more) {
      zmq::message_t n;
      (void)zap.recv(n, zmq::recv_flags::none);
      more = n.more();
      req.push_back(std::move(n));
    }
    std::string address;
    auto why = zap_verdict(req, allowed, &address);
    std::string id = req.size() > 1 ? req[1].to_string() : std::string();
    zap.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(id), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string(why ? "400" : "200")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(why ? *why : std::string("OK")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string()), zmq::send_flags::none);
    if (why) refused(address, *why);
  }
}

std::optional<std::string> PeerFaults::note(const std::string& peer, const std::string& what, Clock::time_point now) {
  ++total_;
  auto it = peers_.find(peer);
  if (it == peers_.end()) it = peers_.size() < kMaxPeers ? peers_.emplace(peer, Entry{}).first : peers_.emplace("others", Entry{}).first;
  auto& e = it->second;
  ++e.count;
  if (e.count > 1 && now - e.logged < every_) {
    ++e.left_out;
    return std::nullopt;
  }
  std::string line = what + " (from " + it->first + (e.count > 1 ? ", " + std::to_string(e.count) + " so far" : "") +
                     (e.left_out ? ", " + std::to_string(e.left_out) + " not logged since the last line" : "") + ")";
  e.left_out = 0;
  e.logged = now;
  return line;
}

}  // namespace yard::detail
