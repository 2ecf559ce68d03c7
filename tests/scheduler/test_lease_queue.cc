// The node's lease queue as a specification: requests in, answers and started workers out, over
// an in-memory ledger and a node that records what it was asked. No Redis, no processes (suite
// quick).
#include <catch2/catch.hpp>

#include <map>
#include <stdexcept>

#include "node/lease_queue.h"
#include "policy/autoscale.h"

using namespace yard::sched;
using Lease = LeaseQueue::Lease;
using Refusal = LeaseQueue::Refusal;

namespace {

// Resource amounts per node and per bundle, as the control store's scripts keep them.
class MemoryLedger : public ResourceLedger {
 public:
  std::map<std::string, Res> free;
  std::map<std::string, Res> bundles;
  bool store_up = true;

  void open(const std::string& node, const Res& total) override { free[node] = total; }
  bool take(const std::string& node, const Res& need) override {
    if (!store_up || !fits(need, free[node])) return false;
    sub(free[node], need);
    return true;
  }
  void give(const std::string& node, const Res& amount) override { add(free[node], amount); }
  bool take_bundle(const BundleRef& b, const Res& total, const Res& need) override {
    auto key = b.group + "#" + std::to_string(b.index);
    if (!bundles.count(key)) bundles[key] = total;
    if (!fits(need, bundles[key])) return false;
    sub(bundles[key], need);
    return true;
  }
  void give_bundle(const BundleRef& b, const Res& amount) override { add(bundles[b.group + "#" + std::to_string(b.index)], amount); }
  std::optional<Res> available(const std::string& node) override {
    if (!store_up) return std::nullopt;
    return free[node];
  }
};

struct Answer {
  enum Kind { kGrant, kRedirect, kRefuse } kind;
  uint64_t req;
  std::vector<std::string> workers;
  std::string where;  // more_at or the redirect address
  Refusal why{};
  std::string message;  // a refusal's, or why a grant of nothing waits for a node
};

class RecordingNode : public LeaseQueue::Node {
 public:
  policy::ClusterView view;
  std::map<std::string, std::string> addresses;
  std::map<std::string, LeaseQueue::Group> groups;
  int idle = 0;              // idle workers ready to lease
  bool cannot_start = false;  // starting a process fails
  std::vector<Answer> answers;
  std::vector<std::string> started;  // workers started (they register later)
  std::vector<LeaseQueue::Devices> devices;
  int fresh_reads = 0;
  int next_id = 0;
  std::vector<policy::NodeType> autoscale_types;  // the cluster's autoscaler, when set

  const policy::ClusterView& peers(bool fresh) override {
    fresh_reads += fresh;
    return view;
  }
  std::string address_of(const std::string& id) override { return addresses.count(id) ? addresses[id] : ""; }
  std::string spill_target(const Res& need) override {
    for (auto& n : view.nodes)
      if (n.id != "here" && fits(need, n.avail)) return addresses[n.id];
    return "";
  }
  bool could_add_node(const Res& need) override { return policy::some_type_holds(autoscale_types, need); }
  bool waits = false;  // the cluster's [scheduling] infeasible = "wait"
  bool infeasible_waits() override { return waits; }
  std::optional<LeaseQueue::Group> group(const std::string& id) override {
    if (id == "unreadable") throw std::runtime_error("store out of reach");
    auto g = groups.find(id);
    if (g == groups.end()) return std::nullopt;
    return g->second;
  }
  std::pair<std::string, bool> worker(const Lease&, const Res&, const BundleRef&, const LeaseQueue::Devices& d) override {
    devices.push_back(d);
    if (idle > 0 && d.empty()) {
      --idle;
      return {"idle-" + std::to_string(next_id++), false};
    }
    if (cannot_start) throw std::runtime_error("fork failed");
    started.push_back("new-" + std::to_string(next_id++));
    return {started.back(), true};
  }
  void grant(const Lease& l, const std::string& more_at) override {
    answers.push_back({Answer::kGrant, l.req, l.assigned, more_at, {}, l.waiting ? policy::text(*l.waiting) : ""});
  }
  void redirect(const Lease& l, const std::string& address) override {
    answers.push_back({Answer::kRedirect, l.req, {}, address, {}, {}});
  }
  void refuse(const Lease& l, Refusal why, const std::string& message) override {
    answers.push_back({Answer::kRefuse, l.req, {}, {}, why, message});
  }
};

policy::NodeState peer(std::string id, double cpus, double free_cpus) {
  return {std::move(id), {{"CPU", cpus}}, {{"CPU", free_cpus}}, 0};
}

Lease lease(uint64_t req, uint32_t count = 1, Res need = {{"CPU", 1}}) {
  Lease l;
  l.req = req;
  l.job = "job-1";
  l.count = count;
  l.need = std::move(need);
  l.deadline = LeaseQueue::Clock::now() + std::chrono::seconds(10);
  return l;
}

struct Fixture {
  MemoryLedger ledger;
  RecordingNode node;
  LocalResources res;
  LeaseQueue q;
  explicit Fixture(Res total = {{"CPU", 2}}, int gpus = 0) : res(ledger, "here", total, gpus), q(res, node) {
    res.reopen();
    node.addresses = {{"b", "10.0.0.2:7000"}, {"c", "10.0.0.3:7000"}};
  }
};

}  // namespace

TEST_CASE("lease queue: idle workers are granted at once, new ones when they register") {
  Fixture f;
  f.node.idle = 1;
  f.q.add(lease(1, 2));
  REQUIRE(f.node.answers.empty());  // one idle, one starting: the lease waits for the second
  REQUIRE(f.node.started.size() == 1);
  CHECK(f.ledger.free["here"]["CPU"] == 0);
  CHECK(f.q.worker_ready(1, f.node.started[0]));
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].kind == Answer::kGrant);
  CHECK(f.node.answers[0].workers == std::vector<std::string>{"idle-0", "new-1"});
  CHECK(f.q.size() == 0);
  CHECK_FALSE(f.q.worker_ready(1, "late"));  // answered: a late worker is the caller's to keep idle
}

TEST_CASE("lease queue: a full node sends the submitter to a peer with room, else waits for resources") {
  Fixture f({{"CPU", 1}});
  f.node.idle = 5;
  f.q.add(lease(1));
  REQUIRE(f.node.answers.size() == 1);
  f.node.view.nodes = {peer("b", 4, 0)};
  f.q.add(lease(2));
  CHECK(f.node.answers.size() == 1);  // nobody has room: it waits
  CHECK(f.q.size() == 1);
  f.node.view.nodes = {peer("b", 4, 2)};
  f.q.process();
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kRedirect);
  CHECK(f.node.answers[1].where == "10.0.0.2:7000");

  // A lease sent here already is never sent on: it waits for this node.
  auto spilled = lease(3);
  spilled.spilled = true;
  f.q.add(spilled);
  CHECK(f.node.answers.size() == 2);
  f.res.give({{"CPU", 1}});  // the first lease's worker came back
  f.q.process();
  REQUIRE(f.node.answers.size() == 3);
  CHECK(f.node.answers[2].kind == Answer::kGrant);
  CHECK(f.node.answers[2].req == 3);
}

TEST_CASE("lease queue: deadlines and no-wait answer with what there is, and where more could be had") {
  Fixture f({{"CPU", 1}});
  f.node.idle = 5;
  f.node.view.nodes = {peer("b", 4, 0)};
  f.q.add(lease(1, 3));  // one CPU here: one worker, two short
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].workers.size() == 1);
  CHECK(f.node.answers[0].where.empty());  // no peer has room
  auto nw = lease(2);
  nw.no_wait = true;
  f.q.add(nw);
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kGrant);
  CHECK(f.node.answers[1].workers.empty());
  auto w = lease(3);
  w.deadline = LeaseQueue::Clock::now() + std::chrono::milliseconds(5);
  f.q.add(w);
  CHECK(f.q.size() == 1);
  f.node.view.nodes = {peer("b", 4, 0)};
  f.q.expire(LeaseQueue::Clock::now() + std::chrono::seconds(1));
  REQUIRE(f.node.answers.size() == 3);
  CHECK(f.node.answers[2].kind == Answer::kGrant);
  CHECK(f.q.size() == 0);
}

TEST_CASE("lease queue: with an autoscaler whose node type holds it, a lease no node holds waits and is demand") {
  Fixture f({{"CPU", 2}});
  f.node.view.nodes = {peer("b", 2, 2)};
  f.node.autoscale_types = {{"big", {{"CPU", 8}}, 0, 2}};
  f.q.add(lease(1, 3, {{"CPU", 8}}));
  f.q.add(lease(2, 1, {{"CPU", 64}}));  // no type holds this one: refused as before
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].req == 2);
  CHECK(f.node.answers[0].why == Refusal::kInfeasible);
  REQUIRE(f.q.size() == 1);
  auto d = f.q.waiting_demand();
  REQUIRE(d.size() == 1);
  CHECK(d[0].first == Res{{"CPU", 8}});
  CHECK(d[0].second == 3);
  // The node it waited for joins: the lease goes there.
  f.node.view.nodes = {peer("b", 2, 2), peer("c", 8, 8)};
  f.q.process();
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kRedirect);
  CHECK(f.q.waiting_demand().empty());
}

TEST_CASE("lease queue: where the cluster waits for nodes, a lease no node holds waits, answered each second with why") {
  Fixture f({{"CPU", 2}});
  f.node.waits = true;
  f.node.view.nodes = {peer("b", 2, 2)};
  f.q.add(lease(1, 2, {{"CPU", 8}}));
  CHECK(f.node.answers.empty());
  REQUIRE(f.q.size() == 1);
  CHECK(f.q.waiting_demand().size() == 1);
  auto why = f.q.waiting_for_nodes();
  REQUIRE(why.size() == 1);
  CHECK(why.begin()->second.reason == policy::WaitReason::kInfeasible);
  CHECK(why.begin()->second.detail.find("CPU") != std::string::npos);
  // Not at its own deadline (10 s) but within a second: answered with nothing and the reason.
  f.q.expire(LeaseQueue::Clock::now() + std::chrono::milliseconds(1100));
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].kind == Answer::kGrant);
  CHECK(f.node.answers[0].workers.empty());
  CHECK(f.node.answers[0].message.rfind("infeasible: ", 0) == 0);
  // Asked again, it waits again; a node that holds it joins and the lease goes there.
  f.q.add(lease(2, 2, {{"CPU", 8}}));
  CHECK(f.node.answers.size() == 1);
  f.node.view.nodes = {peer("b", 2, 2), peer("c", 8, 8)};
  f.q.process();
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kRedirect);
  CHECK(f.q.waiting_for_nodes().empty());
  // A hard affinity to a node that is gone is refused whatever the setting.
  auto pinned = lease(3, 1, {{"CPU", 1}});
  pinned.node_id = "gone";
  f.q.add(pinned);
  REQUIRE(f.node.answers.size() == 3);
  CHECK(f.node.answers[2].why == Refusal::kInfeasible);
}

TEST_CASE("lease queue: what no node could ever hold is refused with the reason, what another could is sent there") {
  Fixture f({{"CPU", 2}});
  f.node.view.nodes = {peer("b", 2, 2)};
  f.q.add(lease(1, 1, {{"CPU", 8}}));
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].kind == Answer::kRefuse);
  CHECK(f.node.answers[0].why == Refusal::kInfeasible);
  CHECK(f.node.answers[0].message.find("CPU") != std::string::npos);
  CHECK(f.node.fresh_reads == 1);  // the peers were read again before refusing
  f.node.view.nodes = {peer("b", 2, 2), peer("c", 16, 0)};
  f.q.add(lease(2, 1, {{"CPU", 8}}));
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kRedirect);
  CHECK(f.node.answers[1].where == "10.0.0.3:7000");
}

TEST_CASE("lease queue: node affinity, hard and soft") {
  Fixture f;
  f.node.idle = 5;
  f.node.view.nodes = {peer("b", 2, 0)};
  auto hard = lease(1);
  hard.node_id = "b";
  f.q.add(hard);
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].kind == Answer::kRedirect);  // even when b is busy: it waits there
  CHECK(f.node.answers[0].where == "10.0.0.2:7000");
  auto gone = lease(2);
  gone.node_id = "x";
  f.q.add(gone);
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].kind == Answer::kRefuse);
  CHECK(f.node.answers[1].message.find("not alive") != std::string::npos);
  auto soft = lease(3);
  soft.node_id = "x";
  soft.soft = true;
  f.q.add(soft);
  REQUIRE(f.node.answers.size() == 3);
  CHECK(f.node.answers[2].kind == Answer::kGrant);  // served here instead
}

TEST_CASE("lease queue: SPREAD takes turns among the nodes with room") {
  Fixture f({{"CPU", 8}});
  f.node.idle = 10;
  f.node.view.nodes = {peer("b", 8, 8)};
  int here = 0, there = 0;
  for (uint64_t i = 1; i <= 4; ++i) {
    auto l = lease(i);
    l.spread = true;
    f.q.add(l);
    auto& a = f.node.answers.back();
    (a.kind == Answer::kGrant ? here : there)++;
  }
  CHECK(here == 2);
  CHECK(there == 2);
}

TEST_CASE("lease queue: leases in a placement group use the bundle's resources where the bundle is") {
  Fixture f({{"CPU", 4}});
  f.node.idle = 10;
  f.node.groups["pg"] = {{{{"CPU", 1}}, {{"CPU", 2}}, {{"CPU", 1}}}, {"b", "here", ""}};
  auto in = lease(1, 3);
  in.pg = "pg";  // any bundle: this node's first
  f.q.add(in);
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].workers.size() == 2);  // the bundle holds two CPUs' worth
  CHECK(f.ledger.free["here"]["CPU"] == 4);       // the node's own resources are untouched
  CHECK(f.ledger.bundles["pg#1"]["CPU"] == 0);
  auto away = lease(2);
  away.pg = "pg";
  away.bundle = 0;
  f.q.add(away);
  CHECK(f.node.answers.back().kind == Answer::kRedirect);
  CHECK(f.node.answers.back().where == "10.0.0.2:7000");
  auto unplaced = lease(3);
  unplaced.pg = "pg";
  unplaced.bundle = 2;
  f.q.add(unplaced);
  CHECK(f.node.answers.size() == 2);  // waits for the bundle to be placed
  auto bad = lease(4);
  bad.pg = "pg";
  bad.bundle = 7;
  f.q.add(bad);
  CHECK(f.node.answers.back().why == Refusal::kInfeasible);
  CHECK(f.node.answers.back().message.find("no bundle 7") != std::string::npos);
  auto missing = lease(5);
  missing.pg = "nope";
  f.q.add(missing);
  CHECK(f.node.answers.back().message.find("no placement group nope") != std::string::npos);
  auto unreadable = lease(6);
  unreadable.pg = "unreadable";
  f.q.add(unreadable);
  CHECK(f.node.answers.back().req == 5);  // the store out of reach: it waits
  CHECK(f.q.size() == 2);
}

TEST_CASE("lease queue: GPU leases get devices and their own process; fragmented shares wait") {
  Fixture f({{"CPU", 8}, {"GPU", 2}}, 2);
  f.node.idle = 10;  // idle task workers are never used for GPU leases
  f.q.add(lease(1, 1, {{"CPU", 1}, {"GPU", 0.75}}));
  f.q.add(lease(2, 1, {{"CPU", 1}, {"GPU", 0.75}}));
  REQUIRE(f.node.started.size() == 2);
  CHECK(f.node.devices[0] == LeaseQueue::Devices{{0, 0.75}});
  CHECK(f.node.devices[1] == LeaseQueue::Devices{{1, 0.75}});
  f.q.add(lease(3, 1, {{"CPU", 1}, {"GPU", 0.5}}));  // 0.5 left in total, but 0.25 + 0.25
  CHECK(f.node.started.size() == 2);
  CHECK(f.ledger.free["here"]["CPU"] == 6);  // what it took for the attempt was given back
  f.res.give_gpus({{0, 0.75}});
  f.q.process();
  CHECK(f.node.started.size() == 3);
}

TEST_CASE("lease queue: workers that cannot start or keep dying refuse the lease and give back what it took") {
  Fixture f;
  f.node.cannot_start = true;
  f.q.add(lease(1));
  REQUIRE(f.node.answers.size() == 1);
  CHECK(f.node.answers[0].why == Refusal::kCannotStart);
  CHECK(f.node.answers[0].message.find("fork failed") != std::string::npos);
  CHECK(f.ledger.free["here"]["CPU"] == 2);
  f.node.cannot_start = false;
  f.q.add(lease(2));
  f.q.worker_failed(2, false, "");
  CHECK(f.q.size() == 1);
  f.q.worker_failed(2, true, "workers keep dying");
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].why == Refusal::kStartupFailures);
  CHECK(f.q.size() == 0);
}

TEST_CASE("lease queue: an ended job's leases are refused; a fenced node or an unreachable store takes nothing") {
  Fixture f({{"CPU", 1}});
  f.node.idle = 5;
  f.q.add(lease(1));
  f.q.add(lease(2));
  auto other = lease(3);
  other.job = "job-2";
  f.q.add(other);
  f.q.refuse_job("job-1", "job job-1 ended");
  REQUIRE(f.node.answers.size() == 2);
  CHECK(f.node.answers[1].req == 2);
  CHECK(f.node.answers[1].why == Refusal::kJobEnded);
  CHECK(f.q.size() == 1);
  f.res.fence();
  f.res.give({{"CPU", 1}});
  f.q.process();
  CHECK(f.q.size() == 1);  // fenced: waits
  f.res.reopen();
  f.ledger.store_up = false;
  f.q.process();
  CHECK(f.q.size() == 1);  // the ledger refuses: waits
  f.ledger.store_up = true;
  f.q.process();
  CHECK(f.q.size() == 0);
  CHECK(f.node.answers.back().req == 3);
}
