// The autoscaling policy and its configuration as specifications: demand and nodes in, nodes to
// start and stop out; TOML in, node types or a refusal that names the file, key and reason. No
// processes (suite quick).
#include <catch2/catch.hpp>

#include "autoscale/config.h"
#include "policy/autoscale.h"

using namespace yard::sched;
using namespace yard::sched::policy;

namespace {

NodeType type(std::string name, Res r, int min, int max) { return {std::move(name), std::move(r), min, max}; }

Demand need(Res r, std::string what = "actor") { return {std::move(r), std::move(what), false, {}}; }

ScaleInput two_types() {
  ScaleInput in;
  in.types = {type("small", {{"CPU", 2}}, 0, 3), type("big", {{"CPU", 8}, {"GPU", 1}}, 0, 2)};
  in.idle_timeout_s = 60;
  return in;
}

}  // namespace

TEST_CASE("demand the cluster cannot meet starts the smallest type that holds it") {
  auto in = two_types();
  in.pending = {need({{"CPU", 1}}), need({{"GPU", 1}}, "trainer")};
  auto d = autoscale(in);
  REQUIRE(d.launch.size() == 2);
  CHECK(d.launch[0].type == "small");
  CHECK(d.launch[1].type == "big");
  CHECK(d.launch[1].why.find("trainer") != std::string::npos);
  CHECK(d.unmet.empty());
}

TEST_CASE("demand is packed onto the nodes it starts, then onto launching ones") {
  auto in = two_types();
  in.pending = {need({{"CPU", 1}}), need({{"CPU", 1}}), need({{"CPU", 1}})};
  auto d = autoscale(in);
  REQUIRE(d.launch.size() == 2);  // 2 CPUs per small node: 3 one-CPU actors need two
  in.nodes = {{"auto-small-1", "small", true, false, {{"CPU", 2}}, 0}, {"auto-small-2", "small", true, false, {{"CPU", 2}}, 0}};
  CHECK(autoscale(in).launch.empty());  // once they are launching, nothing more starts
}

TEST_CASE("room on running nodes is used before anything starts") {
  auto in = two_types();
  in.nodes = {{"node-a", "", false, false, {{"CPU", 1}}, 0}};
  in.pending = {need({{"CPU", 1}})};
  CHECK(autoscale(in).launch.empty());
}

TEST_CASE("max_nodes is never exceeded, and what cannot start is reported with the reason") {
  auto in = two_types();
  for (int i = 0; i < 100; ++i) in.pending.push_back(need({{"CPU", 2}}));
  in.pending.push_back(need({{"TPU", 1}}, "odd"));
  auto d = autoscale(in);
  int small = 0, big = 0;
  for (auto& l : d.launch) (l.type == "small" ? small : big) += 1;
  CHECK(small == 3);
  CHECK(big == 2);
  REQUIRE(d.unmet.size() == 100 - 3 - 2 * 4 + 1);
  CHECK(d.unmet.front().why.find("max_nodes") != std::string::npos);
  CHECK(d.unmet.back().what == "odd");
  CHECK(d.unmet.back().why.find("no node type offers") != std::string::npos);
}

TEST_CASE("min_nodes are kept, counting nodes already there") {
  auto in = two_types();
  in.types[0].min_nodes = 2;
  in.nodes = {{"auto-small-1", "small", false, false, {{"CPU", 2}}, 0}};
  auto d = autoscale(in);
  REQUIRE(d.launch.size() == 1);
  CHECK(d.launch[0].why.find("min_nodes") != std::string::npos);
}

TEST_CASE("idle nodes past the timeout stop, unless below min_nodes or demand fits there") {
  auto in = two_types();
  in.nodes = {{"auto-small-1", "small", false, false, {{"CPU", 2}}, 61},
              {"auto-small-2", "small", false, false, {{"CPU", 2}}, 10},
              {"node-head", "", false, false, {{"CPU", 2}}, 1000}};
  auto d = autoscale(in);
  REQUIRE(d.stop.size() == 1);
  CHECK(d.stop[0].node == "auto-small-1");

  in.types[0].min_nodes = 2;
  CHECK(autoscale(in).stop.empty());
  in.types[0].min_nodes = 0;
  in.pending = {need({{"CPU", 2}}), need({{"CPU", 2}}), need({{"CPU", 2}})};  // fills every node
  CHECK(autoscale(in).stop.empty());
}

TEST_CASE("strict spread bundles of one group do not share a new node") {
  auto in = two_types();
  in.pending = {{{{"CPU", 1}}, "g b0", true, "g"}, {{{"CPU", 1}}, "g b1", true, "g"}};
  CHECK(autoscale(in).launch.size() == 2);
  CHECK(some_type_holds(in.types, {{"CPU", 8}}));
  CHECK_FALSE(some_type_holds(in.types, {{"CPU", 9}}));
}

TEST_CASE("a configuration is read into node types") {
  auto c = parse_autoscale_config(R"(
provider = "local"
idle_timeout_s = 30
[node_types.cpu]
cpus = 2
max_nodes = 4
[node_types.special]
cpus = 1
resources = { special = 1 }
min_nodes = 1
max_nodes = 1
)",
                                  "cluster.toml");
  REQUIRE(c);
  CHECK(c.value().idle_timeout_s == 30);
  REQUIRE(c.value().types.size() == 2);
  CHECK(c.value().types[0].name == "cpu");
  CHECK(c.value().types[0].resources == Res{{"CPU", 2}});
  CHECK(c.value().types[1].resources == Res{{"CPU", 1}, {"special", 1}});
  CHECK(c.value().types[1].min_nodes == 1);
  CHECK_FALSE(c.value().local.network_namespaces);
  auto n = parse_autoscale_config("[local]\nnetwork_namespaces = true\n[node_types.a]\ncpus = 1\n", "n.toml");
  REQUIRE(n);
  CHECK(n.value().local.network_namespaces);
}

TEST_CASE("a bad configuration is refused with the file, the key and the reason") {
  auto why = [](const std::string& text) {
    auto c = parse_autoscale_config(text, "c.toml");
    REQUIRE_FALSE(c);
    return c.why();
  };
  CHECK(why("provder = 'local'\n[node_types.a]\ncpus = 1\n").find("c.toml: provder: unknown key") == 0);
  CHECK(why("[node_types.a]\ncpus = 1\nmin_nodes = 3\nmax_nodes = 2\n") ==
        "c.toml: node_types.a.min_nodes: min_nodes 3 is above max_nodes 2");
  CHECK(why("[node_types.a]\nmax_nodes = 2\n") ==
        "c.toml: node_types.a: offers nothing (give it cpus, gpus or resources)");
  CHECK(why("[node_types.a]\ncpus = 'two'\n") == "c.toml: node_types.a.cpus: must be a number");
  CHECK(why("[node_types.a]\ncpus = 1\nmemroy = 3\n").find("c.toml: node_types.a.memroy: unknown key") == 0);
  CHECK(why("provider = 'kubernetes'\n[node_types.a]\ncpus = 1\n").find("'kubernetes' is not a provider") !=
        std::string::npos);
  CHECK(why("provider = 'local'\n").find("node_types") != std::string::npos);
  CHECK(why("[node_types.a\ncpus = 1\n").find("c.toml:1:") == 0);  // the parser's line
  CHECK(why("[node_types.A-B]\ncpus = 1\n").find("a-z, 0-9 and _") != std::string::npos);
  CHECK(why("[local]\nnetwork_namespaces = 'yes'\n[node_types.a]\ncpus = 1\n") ==
        "c.toml: local.network_namespaces: must be true or false");
  CHECK(why("[local]\nnetns = true\n[node_types.a]\ncpus = 1\n").find("c.toml: local.netns: unknown key") == 0);
  CHECK(why("provider = 'slurm'\n[local]\nnetwork_namespaces = true\n[node_types.a]\ncpus = 1\n")
            .find("c.toml: local: is for provider") == 0);
}

TEST_CASE("the cluster configuration's teams and queue settings, without node types") {
  auto c = parse_autoscale_config(R"(
[queue]
starvation_s = 600

[teams.inspection]
weight = 2
max_priority = 10
guarantee = { CPU = 4 }
ceiling = { CPU = 8, GPU = 1 }
max_queued = 20

[teams.research]
)",
                                  "teams.toml", false);
  REQUIRE(c);
  CHECK(c.value().types.empty());
  CHECK(c.value().starvation_s == 600);
  REQUIRE(c.value().teams.size() == 2);
  auto& t = c.value().teams[0];
  CHECK(t.name == "inspection");
  CHECK(t.weight == 2);
  CHECK(t.max_priority == 10);
  CHECK(t.guarantee.at("CPU") == 4);
  CHECK(t.ceiling.at("GPU") == 1);
  CHECK(t.max_queued == 20);
  CHECK(c.value().teams[1].weight == 1);
  CHECK(c.value().teams[1].ceiling.empty());
  // An autoscaler's file still needs its node types.
  CHECK_FALSE(parse_autoscale_config("[teams.a]\n", "a.toml", true));

  auto why = [](const std::string& text) {
    auto r = parse_autoscale_config(text, "t.toml", false);
    REQUIRE_FALSE(r);
    return r.why();
  };
  CHECK(why("[teams.a]\nguarantee = { CPU = 4 }\nceiling = { CPU = 2 }\n") ==
        "t.toml: teams.a.guarantee.CPU: is above the team's ceiling of CPU");
  CHECK(why("[teams.a]\nweigth = 1\n").find("t.toml: teams.a.weigth: unknown key") == 0);
  CHECK(why("[teams.a]\nceiling = { CPU = 'lots' }\n") == "t.toml: teams.a.ceiling.CPU: must be a number");
  CHECK(why("[teams.A]\n").find("a-z, 0-9, _ and -") != std::string::npos);
  CHECK(why("[queue]\nstarvation = 3\n").find("t.toml: queue.starvation: unknown key") == 0);
}
