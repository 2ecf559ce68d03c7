// yard/metrics.h: names and tags Prometheus would refuse are refused where they are made or
// used; what a process reports is every series, cumulative.
#include <catch2/catch.hpp>

#include <capnp/message.h>

#include <map>
#include <thread>
#include <vector>

#include "metrics/metrics_registry.h"
#include "metrics/task_events.h"
#include "yard/errors.h"
#include "yard/metrics.h"

using namespace yard::metrics;

TEST_CASE("metrics: bad names, tags, kinds and bounds are refused with the reason") {
  CHECK_THROWS_WITH(Counter("2fast", "x"), Catch::Contains("not a valid Prometheus name"));
  CHECK_THROWS_WITH(Counter("a-b", "x"), Catch::Contains("a-b"));
  CHECK_THROWS_WITH(Gauge("ok_name", "x", {"bad-key"}), Catch::Contains("tag key 'bad-key'"));
  CHECK_THROWS_WITH(Gauge("ok_name2", "x", {"__reserved"}), Catch::Contains("__reserved"));
  CHECK_THROWS_WITH(Gauge("ok_name3", "x", {"node"}), Catch::Contains("node"));
  CHECK_THROWS_WITH(Histogram("h_bad", "x", {1, 1}), Catch::Contains("increasing"));
  CHECK_THROWS_WITH(Histogram("h_empty", "x", {}), Catch::Contains("at least one"));
  Counter c("test_requests_total", "requests", {"path"});
  CHECK_THROWS_WITH(c.inc(1, {{"verb", "GET"}}), Catch::Contains("has tags {path}"));
  CHECK_THROWS_WITH(c.inc(-1, {{"path", "/"}}), Catch::Contains("only go up"));
  CHECK_THROWS_WITH(Gauge("test_requests_total", "again"), Catch::Contains("already defined as a counter"));
  CHECK_NOTHROW(Counter("test_requests_total", "the same again", {"path"}));  // same definition: the same family
}

TEST_CASE("metrics: a report holds every series with its tags, cumulative") {
  Counter c("test_report_total", "n", {"k"});
  Gauge g("test_report_gauge", "g");
  Histogram h("test_report_seconds", "h", {0.1, 1});
  c.inc(2, {{"k", "a"}});
  c.inc(3, {{"k", "a"}});
  c.inc(1, {{"k", "b"}});
  g.set(7);
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  auto& r = detail::Registry::instance();
  capnp::MallocMessageBuilder mb;
  auto report = mb.initRoot<yard::wire::MetricsReport>();
  REQUIRE(r.write_report(report, false));
  CHECK(report.getSeries().size() >= 4);
  std::map<std::string, double> values;
  for (auto s : report.getSeries()) {
    std::string name = s.getName().cStr();
    for (auto t : s.getTags()) name += "|" + std::string(t.getValue().cStr());
    values[name] = s.getValue();
    if (name == "test_report_seconds") {
      REQUIRE(s.getBuckets().size() == 3);
      CHECK(s.getBuckets()[0] == 1);
      CHECK(s.getBuckets()[1] == 1);
      CHECK(s.getBuckets()[2] == 1);
      CHECK(s.getCount() == 3);
      CHECK(s.getSum() == Approx(5.55));
    }
  }
  CHECK(values["test_report_total|a"] == 5);
  CHECK(values["test_report_total|b"] == 1);
  CHECK(values["test_report_gauge"] == 7);
  CHECK(values.count("test_report_seconds"));
  capnp::MallocMessageBuilder again;
  CHECK_FALSE(r.write_report(again.initRoot<yard::wire::MetricsReport>(), false));  // nothing changed
  CHECK(r.write_report(again.initRoot<yard::wire::MetricsReport>(), true));
}

TEST_CASE("metrics: task events counted from several threads at once all reach the report") {
  auto& r = detail::Registry::instance();
  auto* t = r.task_series("test_threads.call");
  constexpr int kThreads = 4, kEach = 5000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < kEach; ++k) {
        r.task_submitted(t);
        r.task_started(t);
        r.task_ended(t, k % 10 != 0, i == 0 ? 0.00005 : 0.5);  // every tenth fails
      }
    });
  r.task_started(t);  // one still running
  // Reports written while the threads count: each is consistent (never more ended than started).
  int reports = 0;
  auto read = [&](std::map<std::string, double>& values, std::vector<uint64_t>& buckets) {
    capnp::MallocMessageBuilder mb;
    auto report = mb.initRoot<yard::wire::MetricsReport>();
    if (!r.write_report(report, true)) return;
    ++reports;
    for (auto s : report.getSeries()) {
      bool ours = false;
      for (auto tag : s.getTags()) ours |= std::string(tag.getValue().cStr()) == "test_threads.call";
      if (!ours) continue;
      values[s.getName().cStr()] = s.getValue();
      if (std::string(s.getName().cStr()) == "yard_task_duration_seconds") {
        buckets.clear();
        for (auto b : s.getBuckets()) buckets.push_back(b);
        values["count"] = double(s.getCount());
        values["sum"] = s.getSum();
      }
    }
  };
  std::map<std::string, double> values;
  std::vector<uint64_t> buckets;
  for (int i = 0; i < 20; ++i) {
    read(values, buckets);
    CHECK(values["yard_tasks_running"] >= 1);
  }
  for (auto& th : threads) th.join();
  read(values, buckets);
  CHECK(reports == 21);
  const double n = double(kThreads) * kEach;
  CHECK(values["yard_tasks_submitted_total"] == n);
  CHECK(values["yard_tasks_failed_total"] == n / 10);
  CHECK(values["yard_tasks_finished_total"] == n - n / 10);
  CHECK(values["yard_tasks_running"] == 1);
  CHECK(values["count"] == n);
  REQUIRE(buckets.size() == 8);
  CHECK(buckets[0] == kEach);                    // 50 µs: under the first bound (100 µs)
  CHECK(buckets[4] == uint64_t(kEach) * (kThreads - 1));  // 0.5 s: under 1 s
  CHECK(values["sum"] == Approx(kEach * 0.00005 + (kThreads - 1) * kEach * 0.5));
  r.task_ended(t, true, 0.5);
}

TEST_CASE("timeline: spans past the budget are dropped and counted, and a span is kept again once the budget refills") {
  auto& ev = yard::detail::TaskEvents::instance();
  // Spans and drops in the reports written until nothing is left.
  auto drain = [&] {
    std::pair<size_t, uint64_t> kept_dropped{0, 0};
    for (;;) {
      capnp::MallocMessageBuilder mb;
      auto report = mb.initRoot<yard::wire::MetricsReport>();
      if (!ev.write(report)) return kept_dropped;
      for (auto e : report.getEvents()) kept_dropped.first += std::string(e.getName().cStr()) == "test_span";
      kept_dropped.second += report.getEventsDropped();
    }
  };
  drain();
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) ev.record("test_span", "task", 0, 1, true, 0, t);
  auto [kept, dropped] = drain();
  CHECK(kept <= 5000);  // the burst
  CHECK(kept + dropped == 10000);
  // 1 ms later two more spans' worth of budget has come: the next one is kept.
  ev.record("test_span", "task", 0, 1, true, 0, t + std::chrono::milliseconds(1));
  auto after = drain();
  CHECK(after.first == 1);
  CHECK(after.second == 0);
  // At that same moment: one more is kept, then the budget is spent again.
  for (int i = 0; i < 3; ++i) ev.record("test_span", "task", 0, 1, true, 0, t + std::chrono::milliseconds(1));
  auto last = drain();
  CHECK(last.first == 1);
  CHECK(last.second == 2);
  // A task's span, from moments of the steady clock: dropped while the budget is spent; kept once
  // it has come back, with its start on the epoch clock and its duration.
  ev.span("test_span", "task", t, t + std::chrono::milliseconds(1), true);
  auto spent = drain();
  CHECK(spent.first == 0);
  CHECK(spent.second == 1);
  int64_t before_us = yard::detail::TaskEvents::now_us();
  auto now = std::chrono::steady_clock::now();
  ev.span("test_span", "task", now - std::chrono::microseconds(250), now, false);
  capnp::MallocMessageBuilder mb;
  auto report = mb.initRoot<yard::wire::MetricsReport>();
  REQUIRE(ev.write(report));
  REQUIRE(report.getEvents().size() == 1);
  auto e = report.getEvents()[0];
  CHECK(e.getDurUs() == 250);
  CHECK_FALSE(e.getOk());
  CHECK(std::llabs(e.getStartUs() - (before_us - 250)) < 100000);  // the epoch clock, not the steady one
}
