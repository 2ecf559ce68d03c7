// The placement policies as specifications: a cluster view in, a decision out. No Redis, no
// processes (suite quick).
#include <catch2/catch.hpp>

#include <set>

#include "policy/leases.h"
#include "policy/placement.h"

using namespace yard::sched;
using namespace yard::sched::policy;

namespace {

NodeState node(std::string id, double cpus, double free_cpus, int actors = 0, Res extra = {}) {
  NodeState n{std::move(id), {{"CPU", cpus}}, {{"CPU", free_cpus}}, actors};
  for (auto& [k, v] : extra) {
    n.total[k] = v;
    n.avail[k] = v;
  }
  return n;
}

// A view of these nodes (the policies read its maps; rows are built where a test asks for them).
ClusterView cluster(std::vector<NodeState> nodes) {
  ClusterView v;
  v.nodes = std::move(nodes);
  return v;
}

LeaseRequest lease(Res need) {
  LeaseRequest r;
  r.need = std::move(need);
  return r;
}

ActorRequest cpus(double n, std::string local = "a") {
  ActorRequest r;
  r.resources = {{"CPU", n}};
  r.local_node = std::move(local);
  return r;
}

}  // namespace

TEST_CASE("resource arithmetic") {
  CHECK(fits({{"CPU", 1}}, {{"CPU", 1}}));
  CHECK_FALSE(fits({{"CPU", 1.5}}, {{"CPU", 1}}));
  CHECK_FALSE(fits({{"GPU", 1}}, {{"CPU", 8}}));
  CHECK(fits({{"GPU", 0}}, {{"CPU", 8}}));  // zero amounts ask for nothing
  CHECK(utilisation({{"CPU", 4}, {"memory", 100}}, {{"CPU", 1}, {"memory", 0}}) == Approx(0.75));
  CHECK(res_text({}) == "nothing");
  CHECK(res_text({{"CPU", 1}, {"GPU", 0.5}}) == "CPU: 1, GPU: 0.5");
}

TEST_CASE("default actor placement: local while under half busy, else the least busy") {
  ClusterView v = cluster({node("a", 4, 3), node("b", 4, 4)});
  auto d = place_actor(v, cpus(1));
  CHECK(d.outcome == Outcome::kPlaced);
  CHECK(d.node == "a");  // 25 % busy: stays local
  v.place("a", {{"CPU", 1}});  // 50 % busy now
  CHECK(place_actor(v, cpus(1)).node == "b");
  // Equally busy: the local node wins the tie.
  ClusterView even = cluster({node("a", 4, 1), node("b", 4, 1)});
  CHECK(place_actor(even, cpus(1, "b")).node == "b");
}

TEST_CASE("wait when it fits some node's totals but none has room now") {
  ClusterView v = cluster({node("a", 2, 0), node("b", 2, 0.5)});
  auto d = place_actor(v, cpus(1));
  CHECK(d.outcome == Outcome::kWait);
  CHECK(d.node.empty());
}

TEST_CASE("infeasible when no node could ever hold it, with the reason") {
  ClusterView v = cluster({node("a", 2, 2), node("b", 4, 4)});
  auto d = place_actor(v, cpus(8));
  CHECK(d.outcome == Outcome::kInfeasible);
  CHECK(d.why == "CPU: 8 wanted, the largest node has 4");
  ActorRequest gpu = cpus(1);
  gpu.resources["GPU"] = 1;
  CHECK(place_actor(v, gpu).why == "GPU: 1 wanted, the largest node has 0");
  // Each resource exists, but never together on one node.
  ClusterView split = cluster({node("a", 4, 4, 0, {{"GPU", 1}}), node("b", 8, 8)});
  ActorRequest both;
  both.resources = {{"CPU", 6}, {"GPU", 1}};
  CHECK(place_actor(split, both).why == "no single node has all of CPU: 6, GPU: 1");
  CHECK(place_actor(ClusterView{}, cpus(1)).outcome == Outcome::kInfeasible);
}

TEST_CASE("SPREAD: the node with the fewest actors, then the least busy") {
  ClusterView v = cluster({node("a", 4, 4, 2), node("b", 4, 2, 1), node("c", 4, 3, 1)});
  ActorRequest r = cpus(1);
  r.strategy = ActorStrategy::kSpread;
  CHECK(place_actor(v, r).node == "c");
  CHECK(parse_actor_strategy("SPREAD") == ActorStrategy::kSpread);
  CHECK(parse_actor_strategy("") == ActorStrategy::kDefault);
  CHECK_FALSE(parse_actor_strategy("EVERYWHERE"));
}

TEST_CASE("hard node affinity: that node or wait; a dead or too small node is infeasible") {
  ClusterView v = cluster({node("a", 4, 0), node("b", 2, 2)});
  ActorRequest r = cpus(1, "b");
  r.affinity_node = "a";
  CHECK(place_actor(v, r).outcome == Outcome::kWait);
  v.nodes[0].avail["CPU"] = 1;
  CHECK(place_actor(v, r).node == "a");
  r.affinity_node = "gone";
  auto d = place_actor(v, r);
  CHECK(d.outcome == Outcome::kInfeasible);
  CHECK(d.why == "node gone (asked for by node affinity) is not alive");
  r.affinity_node = "b";
  r.resources["CPU"] = 3;
  CHECK(place_actor(v, r).why == "node b never has CPU: 3");
}

TEST_CASE("soft node affinity: that node when it has room, else the usual rules") {
  ClusterView v = cluster({node("a", 4, 4), node("b", 4, 0)});
  ActorRequest r = cpus(1, "a");
  r.affinity_node = "b";
  r.soft = true;
  CHECK(place_actor(v, r).node == "a");
  v.nodes[1].avail["CPU"] = 1;
  CHECK(place_actor(v, r).node == "b");
  r.affinity_node = "gone";
  CHECK(place_actor(v, r).node == "a");
}

TEST_CASE("PACK: everything on one node, the busiest that fits, leaving free nodes whole") {
  ClusterView v = cluster({node("a", 8, 8), node("b", 8, 5), node("c", 2, 2)});
  GroupRequest g{{{{"CPU", 2}}, {{"CPU", 2}}}, BundleStrategy::kPack, {}, true};
  auto d = place_bundles(v, g);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes == std::vector<std::string>{"b", "b"});
  // Too big for one node: bundle by bundle, still packing.
  GroupRequest big{{{{"CPU", 6}}, {{"CPU", 4}}}, BundleStrategy::kPack, {}, true};
  d = place_bundles(v, big);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes == std::vector<std::string>{"a", "b"});
}

TEST_CASE("STRICT_PACK: one node or wait; infeasible when no node's totals hold the sum") {
  ClusterView v = cluster({node("a", 4, 3), node("b", 4, 3)});
  GroupRequest g{{{{"CPU", 2}}, {{"CPU", 2}}}, BundleStrategy::kStrictPack, {}, true};
  CHECK(place_bundles(v, g).outcome == Outcome::kWait);
  v.nodes[1].avail["CPU"] = 4;
  auto d = place_bundles(v, g);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes == std::vector<std::string>{"b", "b"});
  GroupRequest huge{{{{"CPU", 3}}, {{"CPU", 3}}}, BundleStrategy::kStrictPack, {}, true};
  auto i = place_bundles(v, huge);
  CHECK(i.outcome == Outcome::kInfeasible);
  CHECK(i.why == "STRICT_PACK needs one node with CPU: 6: CPU: 6 wanted, the largest node has 4");
}

TEST_CASE("SPREAD bundles: the nodes with the fewest of the group, then the least busy") {
  ClusterView v = cluster({node("a", 4, 4), node("b", 4, 2), node("c", 4, 3)});
  GroupRequest g{{{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, BundleStrategy::kSpread, {}, true};
  auto d = place_bundles(v, g);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes == std::vector<std::string>{"a", "c", "b", "a"});
}

TEST_CASE("STRICT_SPREAD: a distinct node per bundle, wait for room, infeasible without enough nodes") {
  ClusterView v = cluster({node("a", 4, 4), node("b", 4, 0), node("c", 4, 4)});
  GroupRequest g{{{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, BundleStrategy::kStrictSpread, {}, true};
  CHECK(place_bundles(v, g).outcome == Outcome::kWait);
  v.nodes[1].avail["CPU"] = 1;
  auto d = place_bundles(v, g);
  REQUIRE(d.outcome == Outcome::kPlaced);
  std::set<std::string> distinct(d.nodes.begin(), d.nodes.end());
  CHECK(distinct.size() == 3);
  g.bundles.push_back({{"CPU", 1}});
  auto i = place_bundles(v, g);
  CHECK(i.outcome == Outcome::kInfeasible);
  CHECK(i.why == "STRICT_SPREAD needs 4 nodes, the cluster has 3 that can hold a bundle");
}

TEST_CASE("a bundle no node can hold makes the group infeasible, naming the bundle") {
  ClusterView v = cluster({node("a", 4, 4)});
  GroupRequest g{{{{"CPU", 1}}, {{"GPU", 1}}}, BundleStrategy::kSpread, {}, true};
  auto d = place_bundles(v, g);
  CHECK(d.outcome == Outcome::kInfeasible);
  CHECK(d.why == "bundle 1 (GPU: 1) fits no node: GPU: 1 wanted, the largest node has 0");
  g.check_feasible = false;  // a group being re-placed waits for nodes instead
  CHECK(place_bundles(v, g).outcome == Outcome::kWait);
}

TEST_CASE("re-placing a group keeps its placed bundles and packs the rest beside them") {
  ClusterView v = cluster({node("a", 4, 2), node("b", 8, 8), node("c", 4, 4)});
  GroupRequest g{{{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, BundleStrategy::kPack, {"a", "", "a"}, false};
  auto d = place_bundles(v, g);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes == std::vector<std::string>{"a", "a", "a"});
  GroupRequest strict{{{{"CPU", 1}}, {{"CPU", 1}}}, BundleStrategy::kStrictSpread, {"b", ""}, false};
  d = place_bundles(v, strict);
  REQUIRE(d.outcome == Outcome::kPlaced);
  CHECK(d.nodes[0] == "b");
  CHECK(d.nodes[1] != "b");
}

TEST_CASE("bundle strategy names round-trip; unknown ones are refused") {
  for (auto s : {BundleStrategy::kPack, BundleStrategy::kSpread, BundleStrategy::kStrictPack, BundleStrategy::kStrictSpread})
    CHECK(parse_bundle_strategy(name(s)) == s);
  CHECK_FALSE(parse_bundle_strategy("pack"));
  CHECK_FALSE(parse_bundle_strategy(""));
}

TEST_CASE("spill: the other node with the most free CPUs that fits now, or ever") {
  ClusterView peers = cluster({node("self", 8, 8), node("a", 4, 1), node("b", 4, 3), node("c", 2, 0)});
  CHECK(spill_target(peers, "self", {{"CPU", 1}}, false) == "b");
  CHECK(spill_target(peers, "self", {{"CPU", 4}}, false).empty());  // none has room now
  CHECK(spill_target(peers, "self", {{"CPU", 4}}, true) == "b");    // but b's totals hold it
  CHECK(spill_target(peers, "self", {{"CPU", 16}}, true).empty());
  CHECK(spill_target(ClusterView{}, "self", {{"CPU", 1}}, false).empty());
}

// ---- task leases ----------------------------------------------------------------------------

TEST_CASE("a lease is served here unless something sends it elsewhere") {
  ClusterView peers = cluster({node("a", 4, 4), node("b", 4, 4)});
  auto r = route_lease(peers, node("a", 4, 4), lease({{"CPU", 1}}), 0);
  CHECK(r.kind == LeaseRoute::Kind::kHere);
  // No room here right now is not a reason to leave: the queue waits (or spills later).
  CHECK(route_lease(peers, node("a", 4, 0), lease({{"CPU", 1}}), 0).kind == LeaseRoute::Kind::kHere);
}

TEST_CASE("lease affinity: hard goes to that node or is infeasible, soft falls back here") {
  ClusterView peers = cluster({node("a", 4, 4), node("b", 4, 0)});
  LeaseRequest req{{{"CPU", 1}}, "b"};
  auto r = route_lease(peers, node("a", 4, 4), req, 0);
  CHECK(r.kind == LeaseRoute::Kind::kElsewhere);
  CHECK(r.node == "b");
  req.affinity_node = "gone";
  r = route_lease(peers, node("a", 4, 4), req, 0);
  CHECK(r.kind == LeaseRoute::Kind::kInfeasible);
  CHECK(r.why == "node gone (asked for by node affinity) is not alive");
  req.soft = true;
  CHECK(route_lease(peers, node("a", 4, 4), req, 0).kind == LeaseRoute::Kind::kHere);
  req.affinity_node = "a";  // affinity to this node
  req.soft = false;
  CHECK(route_lease(peers, node("a", 4, 4), req, 0).kind == LeaseRoute::Kind::kHere);
}

TEST_CASE("lease SPREAD rounds the nodes with room, this one included") {
  ClusterView peers = cluster({node("a", 4, 4), node("b", 4, 4), node("c", 4, 0)});
  LeaseRequest req = lease({{"CPU", 1}});
  req.spread = true;
  auto self = node("a", 4, 4);
  std::vector<std::string> seen;
  for (size_t turn = 0; turn < 4; ++turn) {
    auto r = route_lease(peers, self, req, turn);
    CHECK(r.used_turn);
    seen.push_back(r.kind == LeaseRoute::Kind::kHere ? "a" : r.node);
  }
  CHECK(seen == std::vector<std::string>{"a", "b", "a", "b"});  // c has no room
  req.spilled = true;  // sent here by another node: stays
  CHECK(route_lease(peers, self, req, 1).kind == LeaseRoute::Kind::kHere);
}

TEST_CASE("a lease this node can never hold goes where the totals can, or is infeasible") {
  ClusterView peers = cluster({node("a", 2, 2), node("big", 16, 0, 0, {{"GPU", 2}})});
  LeaseRequest req = lease({{"CPU", 1}, {"GPU", 1}});
  auto r = route_lease(peers, node("a", 2, 2), req, 0);
  CHECK(r.kind == LeaseRoute::Kind::kElsewhere);
  CHECK(r.node == "big");
  req.spilled = true;
  r = route_lease(peers, node("a", 2, 2), req, 0);
  CHECK(r.kind == LeaseRoute::Kind::kInfeasible);
  CHECK(r.why.rfind("no node can run a task that needs CPU: 1", 0) == 0);
  req.spilled = false;
  req.need = {{"TPU", 1}};
  CHECK(route_lease(peers, node("a", 2, 2), req, 0).kind == LeaseRoute::Kind::kInfeasible);
}

// ---- GPU devices ------------------------------------------------------------------------------

#include "policy/gpus.h"

TEST_CASE("GPUs: whole devices for one or more, all or nothing", "[policy][gpus]") {
  yard::sched::policy::GpuPool pool(3);
  auto two = pool.take(2);
  REQUIRE(two);
  CHECK(*two == yard::sched::policy::GpuPool::Devices{{0, 1.0}, {1, 1.0}});
  CHECK_FALSE(pool.take(2));           // one whole device left: nothing is taken
  CHECK(pool.free_share(2) == 1.0);
  auto one = pool.take(1);
  REQUIRE(one);
  CHECK(*one == yard::sched::policy::GpuPool::Devices{{2, 1.0}});
  CHECK_FALSE(pool.take(0.5));
  pool.give(*two);
  CHECK(pool.free_share(0) == 1.0);
  CHECK(pool.take(0)->empty());        // no GPU asked: nothing taken, no failure
}

TEST_CASE("GPUs: a share goes to the fullest device that has room, keeping whole ones free", "[policy][gpus]") {
  yard::sched::policy::GpuPool pool(2);
  auto a = pool.take(0.5);
  REQUIRE(a);
  auto b = pool.take(0.25);  // device 0 (half free) before device 1 (whole)
  REQUIRE(b);
  CHECK((*b)[0].first == (*a)[0].first);
  CHECK(pool.take(1));       // the other device is still whole
  CHECK_FALSE(pool.take(0.5));
  pool.give(*a);
  pool.give(*a);             // given back twice: never above a whole device
  CHECK(pool.free_share((*a)[0].first) == 1.0);
  pool.give({{7, 1.0}});     // an unknown device is ignored
  CHECK(pool.devices() == 2);
}

TEST_CASE("an indexed view (flat rows, as the head keeps it) decides as its maps do") {
  // Nodes of mixed shapes: memory (left out of busyness), a custom resource some lack, fractions.
  ClusterView v;
  for (int i = 0; i < 40; ++i) {
    auto n = node("n" + std::to_string(i), 4, (i * 7) % 5, i % 3, i % 4 == 0 ? Res{{"disk", 1}} : Res{});
    n.total["memory"] = 8e9;
    n.avail["memory"] = (i % 6) * 1e9;
    if (i % 5 == 1) n.avail["disk"] = 0;
    v.nodes.push_back(n);
  }
  ClusterView flat = v;
  flat.index();
  REQUIRE(flat.indexed());
  REQUIRE_FALSE(v.indexed());
  std::vector<Res> needs{{{"CPU", 1}}, {{"CPU", 3.5}}, {{"CPU", 0.5}, {"disk", 1}}, {{"memory", 5e9}},
                         {{"GPU", 1}}, {{"CPU", 5}}, {}, {{"disk", 0}}};
  for (auto& need : needs)
    for (auto strategy : {ActorStrategy::kDefault, ActorStrategy::kSpread})
      for (std::string local : {"n0", "n3", "n7", "elsewhere"}) {
        ActorRequest r;
        r.resources = need;
        r.strategy = strategy;
        r.local_node = local;
        auto a = place_actor(v, r), b = place_actor(flat, r);
        INFO(res_text(need) << " " << local);
        CHECK(a.outcome == b.outcome);
        CHECK(a.node == b.node);
      }
  // Bundles too, every strategy, with and without the feasibility check.
  for (auto strategy : {BundleStrategy::kPack, BundleStrategy::kSpread, BundleStrategy::kStrictPack,
                        BundleStrategy::kStrictSpread})
    for (auto& bundles : std::vector<std::vector<Res>>{{{{"CPU", 1}}, {{"CPU", 2}}},
                                                       {{{"CPU", 0.5}, {"disk", 1}}, {{"CPU", 1}}},
                                                       {{{"CPU", 3}}, {{"CPU", 3}}, {{"CPU", 3}}},
                                                       {{{"GPU", 1}}},
                                                       {{{"memory", 4e9}}, {{"memory", 4e9}}}})
      for (bool check : {true, false}) {
        GroupRequest g;
        g.bundles = bundles;
        g.strategy = strategy;
        g.check_feasible = check;
        auto a = place_bundles(v, g), b = place_bundles(flat, g);
        INFO(name(strategy) << " " << bundles.size() << " bundles");
        CHECK(a.outcome == b.outcome);
        CHECK(a.nodes == b.nodes);
      }
  // A placement keeps the rows and the maps alike.
  flat.place("n8", {{"CPU", 1}});
  v.place("n8", {{"CPU", 1}});
  ActorRequest r;
  r.resources = {{"CPU", 1}};
  r.local_node = "n8";
  CHECK(place_actor(flat, r).node == place_actor(v, r).node);
}

TEST_CASE("an indexed view walks its nodes in order and picks what a pass over all of them picks, as the view changes") {
  // 300 nodes of mixed shapes; placements, refreshed amounts and recounted actors in turn, the
  // indexed view (ordered walk) and a plain one (a pass over every node) kept alike.
  ClusterView v;
  for (int i = 0; i < 300; ++i) {
    auto n = node("n" + std::to_string(i), i % 7 == 0 ? 8 : 4, (i * 3) % 5, i % 4, i % 9 == 0 ? Res{{"disk", 2}} : Res{});
    n.total["memory"] = 8e9;
    n.avail["memory"] = (i % 6) * 1e9;
    v.nodes.push_back(n);
  }
  ClusterView flat = v;
  flat.index();
  REQUIRE(flat.by_busy.size() == 300);
  std::vector<Res> needs{{{"CPU", 1}}, {{"CPU", 0.25}}, {{"CPU", 2}, {"disk", 1}}, {{"CPU", 4}}, {{"memory", 3e9}}, {}};
  std::vector<std::string> locals{"n0", "n5", "n42", "elsewhere"};
  int placed = 0, waited = 0;
  for (int step = 0; step < 600; ++step) {
    ActorRequest r;
    r.resources = needs[step % needs.size()];
    r.strategy = step % 3 == 0 ? ActorStrategy::kSpread : ActorStrategy::kDefault;
    r.local_node = locals[(step / 2) % locals.size()];
    auto a = place_actor(v, r), b = place_actor(flat, r);
    INFO("step " << step << ": " << res_text(r.resources) << " from " << r.local_node);
    REQUIRE(a.outcome == b.outcome);
    REQUIRE(a.node == b.node);
    if (a.outcome == Outcome::kPlaced) {
      ++placed;
      v.place(a.node, r.resources);
      flat.place(b.node, r.resources);
    } else {
      ++waited;
    }
    size_t k = static_cast<size_t>(step * 37) % 300;
    if (step % 5 == 0) {  // a refresh: some of the node's resources came back
      Res back = v.nodes[k].avail;
      back["CPU"] = std::min(v.nodes[k].total["CPU"], back["CPU"] + 1.5);
      v.nodes[k].avail = back;
      flat.set_avail(k, back);
    }
    if (step % 11 == 0) {  // a recount
      v.nodes[k].actors = step % 4;
      flat.set_actors(k, step % 4);
    }
  }
  CHECK(placed > 300);
  CHECK(waited > 0);  // the cluster filled up at times: waiting went through the same path
  CHECK(flat.by_busy.size() == 300);
  CHECK(flat.by_actors.size() == 300);
  CHECK(flat.find("n42") == &flat.nodes[42]);
  CHECK(flat.find("nowhere") == nullptr);
}
