#include "common/web_server.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <httplib.h>

#include "yard/internal/tls_identity.h"
#include "yard/internal/session.h"
#include "yard/errors.h"

namespace yard::sched {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
}  // namespace

WebIdentity make_web_identity(const std::string& dir) {
  std::filesystem::create_directories(dir);
  WebIdentity id{dir + "/tls.key", dir + "/tls.crt"};
  std::error_code ec;
  if (!std::filesystem::exists(id.key_path, ec) || !std::filesystem::exists(id.cert_path, ec))
    sys::make_tls_identity(id.key_path, id.cert_path, "switchyard web", kWebTlsName);
  return id;
}

WebIdentity store_web_identity(const std::string& dir, const std::string& key_pem, const std::string& cert_pem) {
  if (cert_pem.empty() || key_pem.empty()) return {};
  std::filesystem::create_directories(dir);
  WebIdentity id{dir + "/tls.key", dir + "/tls.crt"};
  detail::write_private_file(id.key_path, key_pem);
  std::ofstream c(id.cert_path);
  if (!(c << cert_pem)) throw Error("cannot write " + id.cert_path);
  return id;
}

std::pair<std::string, std::string> read_web_identity(const WebIdentity& id) {
  if (id.empty()) return {};
  return {slurp(id.key_path), slurp(id.cert_path)};
}

WebServer::WebServer(const WebIdentity& id, int threads) {
  if (id.empty()) {
    server_ = std::make_unique<httplib::Server>();
  } else {
    auto s = std::make_unique<httplib::SSLServer>(id.cert_path.c_str(), id.key_path.c_str());
    if (!s->is_valid()) throw Error("cannot serve HTTPS with " + id.cert_path + " and " + id.key_path);
    server_ = std::move(s);
  }
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
}

WebServer::~WebServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

int WebServer::listen(const std::string& host, int port) {
  int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound > 0) thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound > 0 ? bound : -1;
}

}  // namespace yard::sched
