// The actor manager at the head: where each actor runs (placed by the actor policy on the nodes'
// view, or in a placement group's bundle), its restarts (a lost process or node, up to
// max_restarts), moves off draining nodes, lookups by id and name, kills, the end of its job, and
// the dead it still remembers. Its records (with each creation message, for restarts by a later
// head) are in the control store; the chosen node's manager hosts the process.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/service.h"
#include "head/actor_lookups.h"
#include "head/cluster_nodes.h"
#include "head/groups.h"
#include "head/head_wiring.h"
#include "head/job_table.h"
#include "policy/autoscale.h"
#include "policy/placement.h"
#include "policy/waiting.h"
#include "store/tables.h"

namespace yard::sched {

// An actor's row in `yard status`; `per_node` gets its id under its node when it is alive.
nlohmann::json actor_row(const store::ActorRecord& a, std::map<std::string, nlohmann::json>& per_node);

// An actor as the head keeps it: its record, and what placing and answering it needs.
struct HeadActor : store::ActorRecord {
  std::shared_ptr<detail::InMessage> create_msg;  // kept while it may still be (re)started
  std::string creator_routing;
  uint64_t creator_req = 0;
  bool replied = false;
  policy::ActorStrategy strategy = policy::ActorStrategy::kDefault;
  std::string affinity_node, caller_node;
  bool soft = false, killed = false, placing = false;
  uint64_t epoch = 0;     // placement attempts: a late answer to an old one is ignored
  std::optional<policy::Wait> wait_why;  // set with `waiting`: why no running node can hold it
  Clock::time_point waiting_since{};
  Clock::time_point infeasible_deadline = Clock::time_point::max();  // it dies waiting after this
  int place_failures = 0;
  int unreachable = 0;
  double dead_at = 0;
};
using ActorMap = std::map<std::string, HeadActor>;

// Views of the head's actors (actor_views.cc): pure functions of ActorManager::all().
// The actors alive (or being placed) on the node.
std::vector<std::string> actors_on_node(const ActorMap& actors, const std::string& node);
// Whether a live actor runs in the placement group's bundle.
bool bundle_in_use(const ActorMap& actors, const std::string& group, int bundle);
// How many actors there are by (state, class).
std::map<std::pair<std::string, std::string>, int> actor_counts(const ActorMap& actors);
// Every actor for `yard status` (with rows = false, none); `per_node` gets the live ones by node.
nlohmann::json actor_rows(const ActorMap& actors, std::map<std::string, nlohmann::json>& per_node, bool rows);
// A copy of every actor's record (the full status builds its rows from it, off the loop).
std::vector<store::ActorRecord> actor_records(const ActorMap& actors);
// The actors waiting for a node that can hold them, for `yard status` ("waiting").
nlohmann::json waiting_actors(const ActorMap& actors);

class ActorManager {
 public:
  struct Context : HeadWiring {  // (its head node: where callers without a node are)
    GroupManager& groups;
    JobTable& jobs;
    std::function<void(const std::string&)> publish;    // an event on yard:events
    // Whether a node that holds `need` could be added (an autoscaler): an actor no running node
    // can hold then waits for one instead of being refused.
    std::function<bool(const Res&)> could_add_node = {};
    // Whether an actor no node can hold waits for one to join (the cluster's [scheduling]
    // infeasible setting) instead of being refused.
    std::function<bool()> infeasible_waits = {};
  };
  explicit ActorManager(Context c)
      : io_(c.io), token_(c.token), reply_(c.reply), redis_(&c.redis), tables_(&c.tables), nodes_(&c.nodes),
        groups_(&c.groups), jobs_(&c.jobs), head_node_(c.head_node), publish(std::move(c.publish)),
        could_add_node_(std::move(c.could_add_node)), infeasible_waits_(std::move(c.infeasible_waits)) {
    nodes_->count_actors_with([this](policy::ClusterView& v) { count_actors(v); });
  }

  void on_create(Incoming& in);
  void on_get(Incoming& in);
  void on_kill(Incoming& in);
  void on_lost(Incoming& in);
  // Pending actors placed where they fit now.
  void process();
  // Lookups past their deadline answered; old dead actors forgotten (every 10 s).
  void tick();
  // Its actors restart elsewhere (as far as their max_restarts allow).
  void node_died(const std::string& node);
  // Actors on a draining node that may restart move now (a move does not use up a restart).
  void move_off(const std::string& node);
  // Stops an actor for good (a drain that ran out of time).
  void stop(const std::string& id, const std::string& cause);
  void job_ended(const std::string& job);
  void group_removed(const std::string& group, const std::string& why);
  // After a takeover: the actors the records hold (rebuild.cc).
  void rebuild();
  // What the actors waiting for room need (those in placement groups wait for their group), for
  // the autoscaler.
  std::vector<policy::Demand> pending_demand() const;
  // Every actor the head knows, by id (actor_views.h's functions read it).
  const ActorMap& all() const { return actors_; }

 private:
  using Actor = HeadActor;

  // A creation sent again (its first answer was lost with a head that restarted) is answered as
  // the same actor; true when `in` was one.
  bool answer_repeated_creation(Incoming& in);
  // Why a new actor is refused at once (bad request, unknown group or name in use, nowhere it
  // could ever run), or nullopt.
  std::optional<Rejection> check_name(const Actor& a) const;  // a live actor of its namespace has the name
  static std::string name_field(const Actor& a);
  // A creation sent again is answered once the actor is up or dead, or after this long with its
  // state (its creator, which waits 120 s, then asks again).
  static constexpr std::chrono::seconds kCreationWait{60};
  // How long a lookup by id of an actor the head has not heard of waits for its creation.
  static constexpr std::chrono::seconds kUnknownWait{20};
  std::optional<Rejection> check_new_actor(Actor& a);
  // An actor no running node can hold (`why`) waits for a node that can when the autoscaler could
  // start one or the cluster waits for one to join; true when it waits (the reason is set).
  bool wait_for_node(Actor& a, const std::string& why);
  // A new actor that waits for a node is answered at once, with why: its creator says so and asks
  // again, answered when it is up (or dead).
  void answer_waiting(Actor& a);
  // Actors that waited past their infeasible_timeout die (InfeasibleError for their calls).
  void expire_waiting();
  policy::Decision pick_node(const Actor& a, const policy::ClusterView& view) const;
  // Adds to a view of the nodes how many live actors each has (only SPREAD placement reads it).
  void count_actors(policy::ClusterView& view) const;
  void place_actor(Actor& a, const std::string& node);
  void on_placed(const std::string& aid, const std::string& node, uint64_t epoch,
                 std::unique_ptr<detail::InMessage> r, std::optional<detail::LocalError> err);
  void actor_up(Actor& a, const detail::InMessage& info);
  void actor_lost(Actor& a, const std::string& cause, bool count_restart);
  void actor_failed(Actor& a, wire::ErrorCode code, const std::string& cause);
  // The non-detached actors `owner`'s code made die with it (`what`: what became of it).
  void bury_owned(const Actor& owner, const std::string& what);
  void free_actor_bundle(Actor& a);
  void kill_actor_process(Actor& a);
  std::string actor_spec(const Actor& a);  // the creation message it restarts from (arguments too)
  void prune_dead_actors();

  detail::Messenger& io_;
  const std::string& token_;
  const Replies& reply_;
  detail::Redis* redis_;
  store::Tables* tables_;
  ClusterNodes* nodes_;
  GroupManager* groups_;
  JobTable* jobs_;
  const std::string& head_node_;
  std::function<void(const std::string&)> publish;
  std::function<bool(const Res&)> could_add_node_;
  std::function<bool()> infeasible_waits_;

  std::map<std::string, Actor> actors_;
  // GetActor by id, answered once up (or moved, or dead), or at its deadline whatever the state.
  ActorLookups lookups_{io_, token_};
  std::deque<std::string> pending_actors_;
  std::map<std::pair<std::string, std::string>, std::string> actor_names_;  // (namespace, name) -> id
  Clock::time_point next_prune_{};
};

}  // namespace yard::sched
