#include "metrics/metrics_registry.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>

#include "yard/errors.h"

namespace yard::metrics::detail {

namespace {

bool valid_name(const std::string& s) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s, re);
}

bool valid_key(const std::string& s) {
  static const std::regex re("[a-zA-Z_][a-zA-Z0-9_]*");
  return std::regex_match(s, re) && s.rfind("__", 0) != 0 && s != "node" && s != "le";
}

const char* kind_name(Kind k) {
  return k == Kind::kCounter ? "counter" : k == Kind::kGauge ? "gauge" : "histogram";
}

}  // namespace

Registry& Registry::instance() {
  static Registry* r = new Registry();  // never destroyed: used until the process ends
  return *r;
}

Registry::Registry() {
  const char* e = std::getenv("YARD_METRICS");
  enabled_ = !(e && std::string(e) == "0");
}

Family* Registry::define(const std::string& name, const std::string& help, Kind kind,
                         const std::vector<std::string>& keys, const std::vector<double>& bounds) {
  if (!valid_name(name))
    throw Error("metric name '" + name + "' is not a valid Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  for (auto& k : keys)
    if (!valid_key(k))
      throw Error("metric " + name + ": tag key '" + k +
                  "' is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not __..., node or le)");
  if (kind == Kind::kHistogram) {
    if (bounds.empty()) throw Error("histogram " + name + " needs at least one bucket bound");
    for (size_t i = 0; i < bounds.size(); ++i)
      if (!std::isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
        throw Error("histogram " + name + ": bucket bounds must be finite and increasing");
  }
  std::lock_guard lk(mu_);
  auto& f = families_[name];
  if (f) {
    if (f->kind != kind || f->keys != keys || f->bounds != bounds)
      throw Error("metric " + name + " is already defined as a " + kind_name(f->kind) + " with other tags or bounds");
    return f.get();
  }
  f = std::make_unique<Family>();
  f->name = name;
  f->help = help;
  f->kind = kind;
  f->keys = keys;
  f->bounds = bounds;
  return f.get();
}

std::vector<std::string> Registry::values(const Family& f, const Tags& tags) const {
  std::vector<std::string> v;
  v.reserve(f.keys.size());
  for (auto& k : f.keys) {
    auto it = tags.find(k);
    v.push_back(it == tags.end() ? std::string() : it->second);
  }
  if (tags.size() > f.keys.size() || std::any_of(tags.begin(), tags.end(), [&](auto& kv) {
        return std::find(f.keys.begin(), f.keys.end(), kv.first) == f.keys.end();
      })) {
    std::string declared;
    for (auto& k : f.keys) declared += (declared.empty() ? "" : ", ") + k;
    throw Error("metric " + f.name + " has tags {" + declared + "}; it was given others");
  }
  return v;
}

void Registry::add(Family* f, const Tags& tags, double v) {
  if (!enabled_) return;
  if (f->kind == Kind::kCounter && !(v >= 0)) throw Error("counter " + f->name + " can only go up (given " + std::to_string(v) + ")");
  auto key = values(*f, tags);
  std::lock_guard lk(mu_);
  f->series[key].value += v;
  mark_dirty();
}

void Registry::set(Family* f, const Tags& tags, double v) {
  if (!enabled_) return;
  auto key = values(*f, tags);
  std::lock_guard lk(mu_);
  f->series[key].value = v;
  mark_dirty();
}

size_t Registry::bucket_of(const std::vector<double>& bounds, double v) {
  return std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
}

void Registry::observe(const Family& f, Series& s, double v) {
  if (s.buckets.empty()) s.buckets.assign(f.bounds.size() + 1, 0);
  ++s.buckets[bucket_of(f.bounds, v)];
  s.sum += v;
  ++s.count;
}

void Registry::observe(Family* f, const Tags& tags, double v) {
  if (!enabled_) return;
  auto key = values(*f, tags);
  std::lock_guard lk(mu_);
  observe(*f, f->series[key], v);
  mark_dirty();
}

Registry::TaskSeries* Registry::task_series(const std::string& function) {
  auto& b = Builtin::get();
  std::lock_guard lk(mu_);
  auto& t = tasks_[function];
  if (!t) {
    std::vector<std::string> key{function};
    t = std::make_unique<TaskSeries>();
    t->submitted = &b.submitted->series[key];
    t->running = &b.running->series[key];
    t->finished = &b.finished->series[key];
    t->failed = &b.failed->series[key];
    t->duration = &b.duration->series[key];
    t->duration->buckets.assign(kDurationBuckets, 0);  // a valid histogram before any run
  }
  return t.get();
}

void Registry::task_submitted(TaskSeries* t) {
  t->n_submitted.fetch_add(1, std::memory_order_relaxed);
  mark_dirty();
}

void Registry::task_started(TaskSeries* t) {
  t->n_started.fetch_add(1, std::memory_order_relaxed);
  mark_dirty();
}

void Registry::task_ended(TaskSeries* t, bool ok, double seconds) {
  (ok ? t->n_finished : t->n_failed).fetch_add(1, std::memory_order_release);  // after its start
  t->n_buckets[bucket_of(Builtin::get().duration->bounds, seconds)].fetch_add(1, std::memory_order_relaxed);
  t->sum_ns.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e9), std::memory_order_relaxed);
  mark_dirty();
}

// A call's end is counted after its start, so a report that reads the ends first never shows
// more ended than started (a negative number running).
void Registry::fold_tasks() {
  for (auto& [name, t] : tasks_) {
    uint64_t finished = t->n_finished.load(std::memory_order_acquire);
    uint64_t failed = t->n_failed.load(std::memory_order_acquire);
    uint64_t count = 0;
    for (size_t i = 0; i < kDurationBuckets; ++i) {
      t->duration->buckets[i] = t->n_buckets[i].load(std::memory_order_relaxed);
      count += t->duration->buckets[i];
    }
    t->duration->sum = double(t->sum_ns.load(std::memory_order_relaxed)) / 1e9;
    t->duration->count = count;
    uint64_t started = t->n_started.load(std::memory_order_relaxed);
    t->submitted->value = double(t->n_submitted.load(std::memory_order_relaxed));
    t->finished->value = double(finished);
    t->failed->value = double(failed);
    t->running->value = double(started >= finished + failed ? started - finished - failed : 0);
  }
}

bool Registry::write_report(wire::MetricsReport::Builder out, bool force) {
  std::lock_guard lk(mu_);
  if (!dirty_.exchange(false, std::memory_order_acq_rel) && !force) return false;
  fold_tasks();
  size_t n = 0;
  for (auto& [name, f] : families_) n += f->series.size();
  auto list = out.initSeries(static_cast<unsigned>(n));
  unsigned i = 0;
  for (auto& [name, f] : families_)
    for (auto& [vals, s] : f->series) {
      auto m = list[i++];
      m.setName(f->name);
      m.setHelp(f->help);
      m.setKind(static_cast<uint8_t>(f->kind));
      auto tags = m.initTags(static_cast<unsigned>(f->keys.size()));
      for (unsigned t = 0; t < f->keys.size(); ++t) {
        tags[t].setKey(f->keys[t]);
        tags[t].setValue(vals[t]);
      }
      m.setValue(s.value);
      if (f->kind != Kind::kHistogram) continue;
      auto b = m.initBounds(static_cast<unsigned>(f->bounds.size()));
      for (unsigned k = 0; k < f->bounds.size(); ++k) b.set(k, f->bounds[k]);
      auto c = m.initBuckets(static_cast<unsigned>(s.buckets.size()));
      for (unsigned k = 0; k < s.buckets.size(); ++k) c.set(k, s.buckets[k]);
      m.setSum(s.sum);
      m.setCount(s.count);
    }
  return true;
}

Builtin& Builtin::get() {
  static Builtin* b = [] {
    auto& r = Registry::instance();
    auto* x = new Builtin;
    x->submitted = r.define("yard_tasks_submitted_total", "tasks, actor calls and actor creations submitted",
                            Kind::kCounter, {"function"});
    x->running = r.define("yard_tasks_running", "tasks and actor calls running now", Kind::kGauge, {"function"});
    x->finished = r.define("yard_tasks_finished_total", "tasks and actor calls that returned", Kind::kCounter, {"function"});
    x->failed = r.define("yard_tasks_failed_total", "tasks and actor calls that threw", Kind::kCounter, {"function"});
    x->duration = r.define("yard_task_duration_seconds", "how long tasks and actor calls ran", Kind::kHistogram,
                           {"function"}, {Registry::kDurationBounds.begin(), Registry::kDurationBounds.end()});
    x->shm_bytes = r.define("yard_shm_pool_bytes", "shared memory held by processes' object pools", Kind::kGauge, {});
    return x;
  }();
  return *b;
}

}  // namespace yard::metrics::detail

namespace yard::metrics {

using detail::Kind;
using detail::Registry;

Counter::Counter(const std::string& name, const std::string& help, const std::vector<std::string>& keys)
    : family_(Registry::instance().define(name, help, Kind::kCounter, keys)) {}
void Counter::inc(double value, const Tags& tags) { Registry::instance().add(family_, tags, value); }

Gauge::Gauge(const std::string& name, const std::string& help, const std::vector<std::string>& keys)
    : family_(Registry::instance().define(name, help, Kind::kGauge, keys)) {}
void Gauge::set(double value, const Tags& tags) { Registry::instance().set(family_, tags, value); }

Histogram::Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                     const std::vector<std::string>& keys)
    : family_(Registry::instance().define(name, help, Kind::kHistogram, keys, bounds)) {}
void Histogram::observe(double value, const Tags& tags) { Registry::instance().observe(family_, tags, value); }

}  // namespace yard::metrics
