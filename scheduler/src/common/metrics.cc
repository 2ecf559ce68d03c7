#include "common/metrics.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <prometheus/exposer.h>

#include "link_security.h"
#include "yard/errors.h"

namespace yard::sched {

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port, const std::string& token)
    : registry_(std::make_shared<prometheus::Registry>()) {
  std::string bind = host + ":" + std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(bind, 1);
  } catch (const std::exception& e) {
    throw Error("cannot serve metrics on " + bind + ": " + e.what());
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterAuth([key = detail::web_key_for(token)](const std::string& user, const std::string& password) {
    return user == "yard" && password == key;
  }, "yard");
  auto ports = exposer_->GetListeningPorts();
  if (ports.empty()) throw Error("cannot serve metrics on " + bind + ": not listening");
  address_ = host + ":" + std::to_string(ports.front());
}

MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::add(const std::shared_ptr<prometheus::Collectable>& c) { exposer_->RegisterCollectable(c); }

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
