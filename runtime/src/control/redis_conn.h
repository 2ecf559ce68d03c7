// The two ways yard::sys::Redis talks to a server: hiredis' own connection (TCP or a Unix
// socket), and TLS 1.3 over TCP with a pinned certificate (hiredis formats the commands and
// parses the replies; OpenSSL carries the bytes).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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

}  // namespace yard::sys
