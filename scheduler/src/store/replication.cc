#include "store/replication.h"

#include <sstream>

namespace yard::sched::store {

using json = nlohmann::json;

namespace {

// "k=v,k=v" as a map.
std::map<std::string, std::string> fields_of(const std::string& list) {
  std::map<std::string, std::string> out;
  std::stringstream ss(list);
  std::string kv;
  while (std::getline(ss, kv, ','))
    if (auto eq = kv.find('='); eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
  return out;
}

long long number(const std::string& s) {
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

json parse_replicas(const std::string& info) {
  json out = json::array();
  long long primary_offset = 0;
  std::stringstream ss(info);
  std::string line;
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(ss, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    if (key == "master_repl_offset") primary_offset = number(value);
    if (key.rfind("slave", 0) == 0 && key.size() > 5 && std::isdigit(static_cast<unsigned char>(key[5])))
      rows.push_back(fields_of(value));
  }
  for (auto& f : rows)
    out.push_back({{"address", f["ip"] + ":" + f["port"]},
                   {"state", f["state"]},
                   {"lag_s", number(f["lag"])},
                   {"bytes_behind", std::max(0LL, primary_offset - number(f["offset"]))}});
  return out;
}

json replication_status(sys::Redis& primary, const std::string& password) {
  json out;
  std::string info = primary.cmd({"INFO", "replication"}).str();
  out["primary"] = primary.address();
  out["replicas"] = parse_replicas(info);
  out["sentinels"] = json::array();
  int ok = 0;
  for (auto& [host, port] : primary.endpoint().sentinels) {
    json s{{"address", host + ":" + std::to_string(port)}};
    try {
      sys::Redis c(host, port, password, std::chrono::milliseconds(300));
      s["says"] = c.cmd({"SENTINEL", "CKQUORUM", primary.endpoint().primary_name}).str();
      s["ok"] = true;
      ++ok;
    } catch (const std::exception& e) {
      s["says"] = e.what();
      s["ok"] = false;
    }
    out["sentinels"].push_back(s);
  }
  out["quorum"] = ok > 0;  // CKQUORUM answers OK only when a failover could be authorised
  return out;
}

}  // namespace yard::sched::store
