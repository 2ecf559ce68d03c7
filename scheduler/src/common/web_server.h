// The HTTP servers of a daemon (its Prometheus endpoint, the head's dashboard): plain HTTP on
// loopback, HTTPS beyond it. A cluster whose head listens beyond loopback has one web identity
// (an EC key and a self-signed certificate for the name `kWebTlsName`), made by the head in
// <session>/web/ and handed to its node managers over the encrypted links with the control
// store's address; every web endpoint of the cluster serves it, so Prometheus trusts them all
// with one `ca_file` and `server_name: switchyard-web`.
#pragma once

#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace yard::sched {

inline constexpr const char* kWebTlsName = "switchyard-web";

struct WebIdentity {
  std::string key_path, cert_path;  // both empty: plain HTTP
  bool empty() const { return cert_path.empty(); }
  // "https" or "http"
  const char* scheme() const { return empty() ? "http" : "https"; }
};

// The cluster's web identity in `dir` (made there when it is not yet).
WebIdentity make_web_identity(const std::string& dir);
// Writes an identity received from the head into `dir` (the key 0600).
WebIdentity store_web_identity(const std::string& dir, const std::string& key_pem, const std::string& cert_pem);
// The identity's key and certificate as PEM ({"", ""} when empty).
std::pair<std::string, std::string> read_web_identity(const WebIdentity& id);

// An HTTP server, or an HTTPS one with the identity, serving on a thread of its own with
// `threads` handler threads; stopped and joined when destroyed (declare it after whatever its
// handlers use).
class WebServer {
 public:
  // Throws yard::Error when the identity cannot be loaded.
  WebServer(const WebIdentity& id, int threads);
  ~WebServer();
  WebServer(const WebServer&) = delete;
  WebServer& operator=(const WebServer&) = delete;
  // Where handlers are added, before listen().
  httplib::Server& http() { return *server_; }
  // Binds host:port (0: any free port) and starts serving. The bound port, or -1.
  int listen(const std::string& host, int port);

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace yard::sched
