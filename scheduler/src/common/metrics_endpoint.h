// A daemon's Prometheus endpoint: the registry its parts add metric families to, served at
// /metrics (prometheus-cpp's text format, cpp-httplib's server; HTTPS with the cluster's web
// identity beyond loopback, web_server.h) with basic authentication: user "yard", the cluster's
// web key as the password (Prometheus: `basic_auth` with `password_file` pointing at the
// session's web_key file). Names follow Prometheus' conventions: `yard_` prefix, base units,
// `_total` for counters.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <mutex>

#include "common/web_server.h"

namespace yard::sched {

class MetricsEndpoint {
 public:
  // Listens on host:port (0: any free port). Throws yard::Error when it cannot.
  MetricsEndpoint(const std::string& host, int port, const std::string& token, const WebIdentity& tls = {});
  ~MetricsEndpoint();
  prometheus::Registry& registry() { return *registry_; }
  // "host:port" that Prometheus scrapes ("https://host:port" when it serves HTTPS).
  const std::string& address() const { return address_; }
  // Served with the registry's families.
  void add(const std::shared_ptr<prometheus::Collectable>& c);

 private:
  std::string serialize();

  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex mu_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;  // the registry's and add()'s
  std::unique_ptr<WebServer> server_;  // after what its handler reads: stopped first
  std::string address_;
};

// A gauge family set all at once from a fresh count: label sets not in the new count go away
// (an actor class with no actors left is not reported as 0 forever).
class GaugeTable {
 public:
  using Rows = std::vector<std::pair<prometheus::Labels, double>>;
  GaugeTable(prometheus::Registry& r, const std::string& name, const std::string& help,
             const prometheus::Labels& constant = {});
  void set(const Rows& rows);

 private:
  prometheus::Family<prometheus::Gauge>& family_;
  std::map<prometheus::Labels, prometheus::Gauge*> series_;
};

// Reads this process's CPU seconds and resident bytes from /proc into the conventional
// process_cpu_seconds_total and process_resident_memory_bytes.
class ProcessMetrics {
 public:
  ProcessMetrics(prometheus::Registry& r, const prometheus::Labels& constant);
  void update();

 private:
  prometheus::Counter& cpu_;
  prometheus::Gauge& rss_;
  double cpu_seen_ = 0;
};

// CPU seconds and resident bytes of a process (from /proc/PID/stat); {0, 0} when it is gone.
std::pair<double, double> process_usage(int pid);

}  // namespace yard::sched
