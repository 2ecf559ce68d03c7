// The two ways yard::sys::Redis talks to a server: hiredis' own connection (TCP or a Unix
// socket), and TLS 1.3 over TCP with a pinned certificate (hiredis formats the commands and
// parses the replies; OpenSSL carries the bytes).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "yard/internal/redis.h"
#include "yard/internal/tls_identity.h"

struct redisReply;

namespace yard::sys {

class RedisConn {
 public:
  virtual ~RedisConn() = default;
  // One command; nullptr when the connection broke (error() says why).
  virtual redisReply* command(const std::vector<std::string>& args) = 0;
  // Queues a command for pipeline(); false when the connection broke.
  virtual bool append(const std::vector<std::string>& args) = 0;
  // Sends what was appended and reads one reply; nullptr when the connection broke.
  virtual redisReply* reply() = 0;
  virtual bool broken() const = 0;
  // How long a command may wait for its reply from now on.
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  // The server closed the connection while it was idle (a restart, CLIENT KILL, a timeout):
  // seen without sending anything, so no command is lost or sent twice.
  virtual bool peer_closed() const = 0;
  // Connects again; false when it cannot (error() says why).
  virtual bool reconnect() = 0;
  virtual std::string error() const = 0;
};

// hiredis' connection: TCP to host:port, or the Unix socket at path (port < 0).
std::unique_ptr<RedisConn> plain_conn(const std::string& host, int port, std::chrono::milliseconds timeout);
// TLS to host:port, accepting only `cert_pem`. Throws yard::ConnectionError when the handshake
// or the verification fails.
std::unique_ptr<RedisConn> tls_conn(const std::string& host, int port, const std::string& cert_pem,
                                    std::chrono::milliseconds timeout);

// Whether the socket's peer has hung up (nothing sent, nothing read).
bool socket_hung_up(int fd);

// The connection to the primary that `at`'s Sentinels name, authenticated and checked with ROLE,
// and its address; the Sentinels those Sentinels know of are added to `at`. Tries until one
// answers or `wait` passes (a failover in progress), then throws ConnectionError.
std::pair<std::unique_ptr<RedisConn>, std::string> connect_primary(RedisEndpoint& at, const std::string& password,
                                                                   std::chrono::milliseconds timeout,
                                                                   std::chrono::milliseconds wait);

}  // namespace yard::sys
