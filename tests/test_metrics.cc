// yard/metrics.h: names and tags Prometheus would refuse are refused where they are made or
// used; what a process reports is every series, cumulative.
#include <catch2/catch.hpp>

#include <capnp/message.h>

#include "metrics_registry.h"
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
