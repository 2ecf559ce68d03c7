#include "link_limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>

namespace yard::detail {

namespace {
int64_t env_number(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' && n > 0 ? n : fallback;
}
}  // namespace

const LinkLimits& link_limits() {
  static const LinkLimits limits = [] {
    LinkLimits l;
    l.max_message_bytes = env_number("YARD_MAX_MESSAGE_BYTES", l.max_message_bytes);
    l.max_connections_per_peer =
        static_cast<size_t>(env_number("YARD_MAX_CONNECTIONS_PER_PEER", int64_t(l.max_connections_per_peer)));
    l.silence_ms = std::max<int64_t>(100, env_number("YARD_LINK_SILENCE_MS", l.silence_ms));
    l.idle_link_s = std::max<int64_t>(1, env_number("YARD_IDLE_LINK_S", l.idle_link_s));
    // Three quarters of the descriptors: the rest stay for files, pipes, and the process's own
    // connections out.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      l.max_connections = static_cast<size_t>(rl.rlim_cur) * 3 / 4;
      l.max_links = std::max<size_t>(64, static_cast<size_t>(rl.rlim_cur) * 3 / 4);
    }
    l.max_links = static_cast<size_t>(std::max<int64_t>(1, env_number("YARD_MAX_LINKS", int64_t(l.max_links))));
    return l;
  }();
  return limits;
}

void raise_descriptor_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  // A link costs a descriptor (its connection), and each of its peers' links to it another: a
  // head linked to 10,000 nodes needs some 20,000. A process that may raise its hard limit (root,
  // CAP_SYS_RESOURCE) takes 262,144; any other the hard limit.
  constexpr rlim_t kMost = 262144;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < kMost) {
    rlimit more{kMost, kMost};
    if (setrlimit(RLIMIT_NOFILE, &more) == 0) return;
  }
  rlim_t want = rl.rlim_max == RLIM_INFINITY ? kMost : std::min<rlim_t>(rl.rlim_max, kMost);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rl.rlim_cur = want;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::optional<std::string> ConnectionCount::accept(int fd, const std::string& peer) {
  closed(fd);  // a descriptor reused before its close was heard of
  size_t n = open(peer);
  if (n >= limits_.max_connections_per_peer)
    return peer + " already has " + std::to_string(n) + " open connections (the limit per peer is " +
           std::to_string(limits_.max_connections_per_peer) + ", YARD_MAX_CONNECTIONS_PER_PEER)";
  if (by_fd_.size() >= limits_.max_connections)
    return "this process already has " + std::to_string(by_fd_.size()) + " open connections (its limit, from " +
           "its file descriptor limit)";
  ++by_peer_[peer];
  by_fd_[fd] = peer;
  return std::nullopt;
}

void ConnectionCount::closed(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  auto p = by_peer_.find(it->second);
  if (p != by_peer_.end() && --p->second == 0) by_peer_.erase(p);
  by_fd_.erase(it);
}

size_t ConnectionCount::open(const std::string& peer) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? 0 : it->second;
}

std::string socket_peer(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "unknown";
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, buf, sizeof buf);
  else
    return "unknown";
  return buf;
}

}  // namespace yard::detail
