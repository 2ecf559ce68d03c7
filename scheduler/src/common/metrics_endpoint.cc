#include "common/metrics_endpoint.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <openssl/crypto.h>

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include "yard/internal/messaging.h"
#include "yard/errors.h"

namespace yard::sched {

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port, const std::string& token, const WebIdentity& tls)
    : registry_(std::make_shared<prometheus::Registry>()) {
  collectables_.push_back(registry_);
  std::string bind = host + ":" + std::to_string(port);
  try {
    server_ = std::make_unique<WebServer>(tls, 1);
  } catch (const std::exception& e) {
    throw Error("cannot serve metrics on " + bind + ": " + e.what());
  }
  // Basic authentication: user "yard", the cluster's web key.
  std::string expected = httplib::make_basic_authentication_header("yard", detail::web_key_for(token)).second;
  server_->http().Get("/metrics", [this, expected](const httplib::Request& req, httplib::Response& res) {
    std::string given = req.get_header_value("Authorization");
    if (given.size() != expected.size() || CRYPTO_memcmp(given.data(), expected.data(), given.size()) != 0) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Basic realm=\"yard\"");
      return;
    }
    res.set_content(serialize(), "text/plain; version=0.0.4");
  });
  int bound = server_->listen(host, port);
  if (bound <= 0) throw Error("cannot serve metrics on " + bind + ": not listening");
  address_ = (tls.empty() ? "" : "https://") + host + ":" + std::to_string(bound);
}

MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::add(const std::shared_ptr<prometheus::Collectable>& c) {
  std::lock_guard lk(mu_);
  collectables_.push_back(c);
}

std::string MetricsEndpoint::serialize() {
  std::vector<prometheus::MetricFamily> families;
  {
    std::lock_guard lk(mu_);
    for (auto& weak : collectables_)
      if (auto c = weak.lock()) {
        auto f = c->Collect();
        families.insert(families.end(), std::make_move_iterator(f.begin()), std::make_move_iterator(f.end()));
      }
  }
  return prometheus::TextSerializer().Serialize(families);
}

GaugeTable::GaugeTable(prometheus::Registry& r, const std::string& name, const std::string& help,
                       const prometheus::Labels& constant)
    : family_(prometheus::BuildGauge().Name(name).Help(help).Labels(constant).Register(r)) {}

void GaugeTable::set(const Rows& rows) {
  std::map<prometheus::Labels, prometheus::Gauge*> next;
  for (auto& [labels, value] : rows) {
    auto it = series_.find(labels);
    auto* g = it != series_.end() ? it->second : &family_.Add(labels);
    g->Set(value);
    next[labels] = g;
  }
  for (auto& [labels, g] : series_)
    if (!next.count(labels)) family_.Remove(g);
  series_ = std::move(next);
}

std::pair<double, double> process_usage(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return {0, 0};
  auto close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return {0, 0};
  std::istringstream in(line.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0, rss_pages = 0;
  for (int i = 3; in >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
    if (i == 24) {
      rss_pages = std::stod(field);
      break;
    }
  }
  static const double tick = double(sysconf(_SC_CLK_TCK));
  static const double page = double(sysconf(_SC_PAGESIZE));
  return {(utime + stime) / tick, rss_pages * page};
}

ProcessMetrics::ProcessMetrics(prometheus::Registry& r, const prometheus::Labels& constant)
    : cpu_(prometheus::BuildCounter()
               .Name("process_cpu_seconds_total")
               .Help("CPU time this daemon has used")
               .Labels(constant)
               .Register(r)
               .Add({})),
      rss_(prometheus::BuildGauge()
               .Name("process_resident_memory_bytes")
               .Help("memory this daemon holds")
               .Labels(constant)
               .Register(r)
               .Add({})) {}

void ProcessMetrics::update() {
  auto [cpu, rss] = process_usage(getpid());
  if (cpu > cpu_seen_) cpu_.Increment(cpu - cpu_seen_);
  cpu_seen_ = std::max(cpu_seen_, cpu);
  rss_.Set(rss);
}

}  // namespace yard::sched
