// A TLS identity of the cluster's own: the control store's Redis and the web endpoints serve
// with one. Part of the internal header set (yard/internal/); not installed.
#pragma once

#include <string>

namespace yard::sys {

// A self-signed certificate and its key (EC P-256): for the Redis server, or with a DNS name
// (a subjectAltName) for the cluster's web endpoints. The key file is 0600. Returns the
// certificate (PEM). Throws yard::Error naming the file that cannot be written.
std::string make_tls_identity(const std::string& key_path, const std::string& cert_path,
                              const std::string& common_name = "switchyard control store",
                              const std::string& dns_name = "");

}  // namespace yard::sys
