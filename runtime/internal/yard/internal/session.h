// Where a local cluster keeps its session: the token file, logs, and the address record that
// lets `yard` commands and programs on this machine find it.
//
//   $YARD_HOME (default /tmp/yard-<uid>)/clusters/<port>.json   one per running head
//   $YARD_HOME/latest.json                                      the most recent head
//   <session dir>/token (mode 0600), <session dir>/logs/, <session dir>/redis/
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace yard::detail {

struct ClusterRecord {
  std::string address;     // host:port of the head
  std::string session_dir;
  std::string log_dir;
  std::string token_file;
  int pid = 0;             // the head daemon
};

std::string yard_home();
void write_record(const ClusterRecord& r, bool latest);
void remove_record(const ClusterRecord& r);
std::optional<ClusterRecord> read_record_file(const std::string& path);
std::optional<ClusterRecord> latest_record();
std::optional<ClusterRecord> record_for(const std::string& address);

// Keeps the logs of a session that has ended (an embedded cluster's: its workers', node
// manager's and head's output) as $YARD_HOME/logs/<session name>/, points $YARD_HOME/logs/latest
// at them, and removes the oldest kept sessions past `keep`. Returns where the logs are now, or
// nullopt when the session wrote none or they could not be moved (they stay where they were).
std::optional<std::string> keep_session_logs(const std::string& session_dir, size_t keep = 20);

// Writes `text` to a file only its owner can read or write (mode 0600, also when it existed).
void write_private_file(const std::string& path, const std::string& text);
// Writes a fresh token with mode 0600 and returns it.
std::string create_token(const std::string& path);
std::string read_token(const std::string& path);

struct Endpoint {
  std::string address;  // "host:port", or several ("A,B,C": a head and its standbys)
  std::string token;
};
// The cluster to talk to: the explicit address, else YARD_ADDRESS, else the latest local head;
// the token: explicit, else YARD_TOKEN, else the local session's token file (of the first
// address). A list of addresses (a head and its standbys) stays a list, each one host:port.
// Throws ConnectionError saying what is missing.
Endpoint resolve_endpoint(const std::string& address, const std::string& token);
// The addresses of a list ("A,B,C"), in order.
std::vector<std::string> address_list(const std::string& addresses);

}  // namespace yard::detail
