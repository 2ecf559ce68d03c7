#include "yard/internal/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "yard/process.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::detail {

std::string yard_home() {
  if (const char* h = getenv("YARD_HOME"); h && *h) return h;
  return "/tmp/yard-" + std::to_string(getuid());
}

static std::string record_path(const std::string& address) {
  auto [host, port] = split_address(address);
  return yard_home() + "/clusters/" + host + "_" + std::to_string(port) + ".json";
}

void write_record(const ClusterRecord& r, bool latest) {
  fs::create_directories(yard_home() + "/clusters");
  nlohmann::json j = {{"address", r.address}, {"session_dir", r.session_dir},
                      {"log_dir", r.log_dir}, {"token_file", r.token_file}, {"pid", r.pid}};
  auto write = [&](const std::string& path) {
    std::string tmp = path + ".tmp" + std::to_string(getpid());
    { std::ofstream(tmp) << j.dump(2) << "\n"; }
    fs::rename(tmp, path);
  };
  write(record_path(r.address));
  if (latest) write(yard_home() + "/latest.json");
}

std::optional<std::string> keep_session_logs(const std::string& session_dir, size_t keep) {
  std::error_code ec;
  fs::path from = fs::path(session_dir) / "logs";
  if (!fs::is_directory(from, ec) || fs::is_empty(from, ec)) return std::nullopt;
  fs::path kept = fs::path(yard_home()) / "logs";
  fs::create_directories(kept, ec);
  fs::path to = kept / fs::path(session_dir).filename();
  fs::rename(from, to, ec);
  if (ec) return std::nullopt;
  fs::last_write_time(to, fs::file_time_type::clock::now(), ec);  // the order of keeping, for pruning
  fs::path link = kept / "latest", tmp = kept / (".latest." + std::to_string(getpid()));
  fs::create_directory_symlink(to.filename(), tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  std::vector<std::pair<fs::file_time_type, fs::path>> sessions;
  for (auto& e : fs::directory_iterator(kept, ec))
    if (e.is_directory() && !e.is_symlink()) sessions.emplace_back(e.last_write_time(ec), e.path());
  std::sort(sessions.begin(), sessions.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = keep; i < sessions.size(); ++i) fs::remove_all(sessions[i].second, ec);
  return to.string();
}

void remove_record(const ClusterRecord& r) {
  std::error_code ec;
  fs::remove(record_path(r.address), ec);
  auto l = read_record_file(yard_home() + "/latest.json");
  if (l && l->address == r.address) fs::remove(yard_home() + "/latest.json", ec);
}

std::optional<ClusterRecord> read_record_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(in);
    ClusterRecord r;
    r.address = j.at("address");
    r.session_dir = j.at("session_dir");
    r.log_dir = j.at("log_dir");
    r.token_file = j.at("token_file");
    r.pid = j.at("pid");
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<ClusterRecord> latest_record() { return read_record_file(yard_home() + "/latest.json"); }

std::optional<ClusterRecord> record_for(const std::string& address) {
  try {
    return read_record_file(record_path(address));
  } catch (const Error&) {
    return std::nullopt;
  }
}

void write_private_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot write " + path);
  fchmod(fd, 0600);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) throw Error("cannot write " + path);
}

std::string create_token(const std::string& path) {
  std::string token = random_hex(24);
  write_private_file(path, token);
  return token;
}

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw AuthError("cannot read the cluster token file " + path);
  std::string t;
  std::getline(in, t);
  return t;
}

std::vector<std::string> address_list(const std::string& addresses) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= addresses.size()) {
    size_t end = addresses.find(',', at);
    if (end == std::string::npos) end = addresses.size();
    if (end > at) out.push_back(addresses.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

Endpoint resolve_endpoint(const std::string& address, const std::string& token) {
  Endpoint ep;
  ep.address = address;
  std::optional<ClusterRecord> rec;
  if (ep.address.empty()) {
    if (const char* a = getenv("YARD_ADDRESS"); a && *a) ep.address = a;
  }
  if (ep.address.empty()) {
    rec = latest_record();
    if (!rec)
      throw ConnectionError("no cluster address given and no local cluster found in " + yard_home() +
                            " (start one with `yard start --head`, or pass --address / set YARD_ADDRESS)");
    ep.address = rec->address;
  }
  std::string normal;
  for (auto& one : address_list(ep.address)) {
    auto [host, port] = split_address(one);
    normal += (normal.empty() ? "" : ",") + host + ":" + std::to_string(port);
  }
  if (normal.empty()) throw ConnectionError("no cluster address in '" + ep.address + "'");
  ep.address = normal;
  ep.token = token;
  if (ep.token.empty())
    if (const char* t = getenv("YARD_TOKEN"); t && *t) ep.token = t;
  if (ep.token.empty()) {
    for (auto& one : address_list(ep.address))
      if (!rec) rec = record_for(one);
    if (rec) ep.token = read_token(rec->token_file);
  }
  if (ep.token.empty())
    throw AuthError("no cluster token for " + ep.address +
                    " (pass --token or set YARD_TOKEN; `yard start --head` prints where the token file is)");
  return ep;
}

}  // namespace yard::detail
