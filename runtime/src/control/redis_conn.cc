#include "redis_conn.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>

#include <hiredis/hiredis.h>

#include "yard/internal/session.h"
#include "yard/errors.h"

namespace yard::sys {

namespace {

timeval to_timeval(std::chrono::milliseconds t) {
  return timeval{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
}

std::vector<const char*> argv_of(const std::vector<std::string>& args, std::vector<size_t>& lens) {
  std::vector<const char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return argv;
}

class PlainConn final : public RedisConn {
 public:
  PlainConn(const std::string& host, int port, std::chrono::milliseconds timeout) {
    c_ = port < 0 ? redisConnectUnixWithTimeout(host.c_str(), to_timeval(timeout))
                  : redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout));
    if (!c_ || c_->err) {
      std::string why = c_ ? c_->errstr : "out of memory";
      if (c_) redisFree(c_);
      c_ = nullptr;
      throw ConnectionError(why);
    }
    redisSetTimeout(c_, to_timeval(timeout));
  }
  ~PlainConn() override {
    if (c_) redisFree(c_);
  }
  redisReply* command(const std::vector<std::string>& args) override {
    std::vector<size_t> lens;
    auto argv = argv_of(args, lens);
    return static_cast<redisReply*>(redisCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data()));
  }
  bool append(const std::vector<std::string>& args) override {
    std::vector<size_t> lens;
    auto argv = argv_of(args, lens);
    return redisAppendCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data()) == REDIS_OK;
  }
  redisReply* reply() override {
    void* raw = nullptr;
    return redisGetReply(c_, &raw) == REDIS_OK ? static_cast<redisReply*>(raw) : nullptr;
  }
  bool broken() const override { return c_->err != 0; }
  bool peer_closed() const override { return c_->fd >= 0 && socket_hung_up(c_->fd); }
  void set_timeout(std::chrono::milliseconds timeout) override { redisSetTimeout(c_, to_timeval(timeout)); }
  bool reconnect() override { return redisReconnect(c_) == REDIS_OK; }
  std::string error() const override { return c_->errstr[0] ? c_->errstr : "connection lost"; }

 private:
  redisContext* c_ = nullptr;
};

std::string ssl_error() {
  unsigned long e = ERR_get_error();
  if (!e) return "connection lost";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

class TlsConn final : public RedisConn {
 public:
  TlsConn(std::string host, int port, const std::string& cert_pem, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), timeout_(timeout) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (!ctx_) throw ConnectionError("cannot set up TLS: " + ssl_error());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION);
    BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (!cert || X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), cert) != 1) {
      if (cert) X509_free(cert);
      throw ConnectionError("the control store's certificate does not parse");
    }
    X509_free(cert);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (!open()) throw ConnectionError(error_);
  }
  ~TlsConn() override {
    close_conn();
    if (ctx_) SSL_CTX_free(ctx_);
  }
  redisReply* command(const std::vector<std::string>& args) override { return append(args) ? reply() : nullptr; }
  bool append(const std::vector<std::string>& args) override {
    if (broken_) return false;
    std::vector<size_t> lens;
    auto argv = argv_of(args, lens);
    char* cmd = nullptr;
    int n = redisFormatCommandArgv(&cmd, static_cast<int>(args.size()), argv.data(), lens.data());
    if (n < 0) return fail("cannot format a command");
    out_.append(cmd, static_cast<size_t>(n));
    redisFreeCommand(cmd);
    return true;
  }
  redisReply* reply() override {
    if (broken_) return nullptr;
    while (!out_.empty()) {
      int n = SSL_write(ssl_, out_.data(), static_cast<int>(out_.size()));
      if (n <= 0) return fail("writing: " + ssl_error()), nullptr;
      out_.erase(0, static_cast<size_t>(n));
    }
    for (;;) {
      void* r = nullptr;
      if (redisReaderGetReply(reader_, &r) != REDIS_OK) return fail("a reply does not parse"), nullptr;
      if (r) return static_cast<redisReply*>(r);
      char buf[16384];
      int n = SSL_read(ssl_, buf, sizeof buf);
      if (n <= 0) return fail("reading: " + ssl_error()), nullptr;
      redisReaderFeed(reader_, buf, static_cast<size_t>(n));
    }
  }
  bool broken() const override { return broken_; }
  bool peer_closed() const override { return fd_ >= 0 && socket_hung_up(fd_); }
  void set_timeout(std::chrono::milliseconds timeout) override {
    timeout_ = timeout;
    auto tv = to_timeval(timeout);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  bool reconnect() override {
    close_conn();
    return open();
  }
  std::string error() const override { return error_; }

 private:
  bool fail(const std::string& why) {
    broken_ = true;
    error_ = why;
    return false;
  }
  bool open() {
    broken_ = false;
    out_.clear();
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res) != 0 || !res)
      return fail("cannot resolve " + host_);
    fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto tv = to_timeval(timeout_);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bool ok = connect(fd_, res->ai_addr, res->ai_addrlen) == 0;
    freeaddrinfo(res);
    if (!ok) return fail(std::string("cannot connect: ") + strerror(errno));
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) return fail("the TLS handshake failed: " + ssl_error());
    if (SSL_get_verify_result(ssl_) != X509_V_OK) return fail("its certificate is not the cluster's control store's");
    reader_ = redisReaderCreate();
    return true;
  }
  void close_conn() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    if (reader_) redisReaderFree(reader_);
    ssl_ = nullptr;
    fd_ = -1;
    reader_ = nullptr;
  }
  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  redisReader* reader_ = nullptr;
  std::string out_, error_;
  bool broken_ = false;
};

}  // namespace

bool socket_hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

std::unique_ptr<RedisConn> plain_conn(const std::string& host, int port, std::chrono::milliseconds timeout) {
  return std::make_unique<PlainConn>(host, port, timeout);
}

std::unique_ptr<RedisConn> tls_conn(const std::string& host, int port, const std::string& cert_pem,
                                    std::chrono::milliseconds timeout) {
  return std::make_unique<TlsConn>(host, port, cert_pem, timeout);
}

std::string make_tls_identity(const std::string& key_path, const std::string& cert_path, const std::string& common_name,
                              const std::string& dns_name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  if (!key || !x) throw Error("cannot make a TLS key: " + ssl_error());
  X509_set_version(x, 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(x, name);
  if (!dns_name.empty()) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, "DNS:" + dns_name},
                              std::pair{NID_basic_constraints, std::string("critical,CA:TRUE")}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
      if (!ext || !X509_add_ext(x, ext, -1)) throw Error("cannot make a TLS certificate: " + ssl_error());
      X509_EXTENSION_free(ext);
    }
  }
  if (!X509_sign(x, key, EVP_sha256())) throw Error("cannot sign the TLS certificate: " + ssl_error());
  auto pem_of = [](auto write) {
    BIO* mem = BIO_new(BIO_s_mem());
    write(mem);
    char* data = nullptr;
    long n = BIO_get_mem_data(mem, &data);
    std::string pem(data, static_cast<size_t>(n));
    BIO_free(mem);
    return pem;
  };
  std::string key_pem = pem_of([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
  std::string cert_pem = pem_of([&](BIO* b) { PEM_write_bio_X509(b, x); });
  X509_free(x);
  EVP_PKEY_free(key);
  detail::write_private_file(key_path, key_pem);
  std::ofstream cf(cert_path);
  if (!(cf << cert_pem)) throw Error("cannot write " + cert_path);
  return cert_pem;
}

}  // namespace yard::sys
