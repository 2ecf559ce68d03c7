// ElasticGroup: the driver's side of an elastic training group. Between MIN and MAX replica actors
// train together; at every step boundary the driver calls settle(), which lets candidates that
// found room join, lets go of members on draining nodes, and forms a new generation of the group
// when membership changed (plan_elastic, elastic.h, decides who). The replicas keep their state
// across generations: a new generation gets the most advanced old member's model, optimizer,
// schedule and data position over the collective (yard::actors::Trainer::regroup); a checkpoint is
// read only when no old member survives.
//
// The replica class T provides
//   int pid();
//   ElasticJoined regroup(ElasticForm form);  // joins generation form.generation as form.rank
// and the job gives two calls: make(node) asks for a new replica actor (it may wait for room;
// `node`, when not empty, is where the job queue put the replica: ask for it there, softly), and
// prepare(actor) loads what it needs before it can join (its data), returning its node's id.
// Membership changes happen only in settle(); run() calls every member and reports the members
// lost meanwhile (their peers' calls fail on the collective; the caller settles and goes on).
// A job admitted by the job queue holds no more replicas than its allotment (yard/allotment.h):
// settle() reads it and lets replicas go at the step boundary when the head shrank it, or asks for
// more when it grew.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "yard/actors/elastic.h"
#include "yard/allotment.h"
#include "yard/node_state.h"
#include "yard/yard.h"

namespace yard::actors {

// A generation of the group, as a member is told it.
struct ElasticForm {
  std::string group;       // the collective group's name
  std::string generation;  // new for every generation
  int world = 1, rank = 0;
  int64_t timeout_ms = 20000;  // how long members wait for each other to meet
  YARD_FIELDS(group, generation, world, rank, timeout_ms);
};

// What a member reports after joining a generation (see Trainer::Regrouped).
struct ElasticJoined {
  int source = -1;
  int64_t step = 0;
  bool loaded = false, from_disk = false;
  int64_t bytes = 0;
  YARD_FIELDS(source, step, loaded, from_disk, bytes);
};

// One change of the group, for the job's report.
struct ElasticResize {
  double time = 0;  // unix seconds when it was formed
  int old_world = 0, new_world = 0;
  int64_t step = 0;      // the step the new generation goes on from
  double seconds = 0;    // from noticing the change to the new generation formed
  std::string why;       // "1 lost, 1 joined"
  bool from_disk = false;
  int64_t bytes = 0;     // state sent over the collective
};

template <class T>
class ElasticGroup {
 public:
  struct Options {
    std::string name = "elastic";
    int min = 1, max = 1;
    std::chrono::milliseconds regroup_timeout{20000};
    bool follow_allotment = true;  // hold no more replicas than the job queue allots the job
  };
  using Make = std::function<ActorHandle<T>()>;
  using MakeOn = std::function<ActorHandle<T>(const std::string& node)>;
  using Prepare = std::function<ObjectRef<std::string>(const ActorHandle<T>&)>;
  template <class R>
  struct Outcome {
    std::vector<std::optional<R>> by_rank;  // nullopt: that member's call failed (its peer was lost)
    std::vector<std::string> lost;          // "rank 1 (pid 123): ActorDied ..."
    // Every member's call succeeded (otherwise settle, then call again).
    bool complete() const {
      for (auto& r : by_rank)
        if (!r) return false;
      return true;
    }
  };

  ElasticGroup(Options o, MakeOn make, Prepare prepare) : o_(std::move(o)), make_(std::move(make)), prepare_(std::move(prepare)) {
    (void)plan_elastic({}, o_.min, o_.max);  // refuses an impossible MIN:MAX now
  }
  // A replica made without regard to where the queue put it.
  ElasticGroup(Options o, Make make, Prepare prepare)
      : ElasticGroup(std::move(o), MakeOn([make = std::move(make)](const std::string&) { return make(); }), std::move(prepare)) {}
  ~ElasticGroup() { stop(); }
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // At a step boundary: applies membership changes. Waits (up to `patience`, then TimeoutError)
  // while fewer than MIN members could train. Returns the change made, if any.
  std::optional<ElasticResize> settle(Duration patience) {
    auto t0 = std::chrono::steady_clock::now(), deadline = t0 + patience;
    int old_world = world();
    for (;;) {
      read_allotment();
      poll();
      auto plan = plan_elastic(states(), o_.min, allowed());
      for (size_t i : plan.release) {
        try {
          kill(*slots_[i].actor);
        } catch (const Error&) {
        }
        slots_[i].s.state = ElasticSlot::State::kLost;
      }
      for (int k = 0; k < plan.submit; ++k) submit();
      if (broken_ && !plan.regroup && !plan.wait && world_ > 0) {
        // A call failed on the group's collective with every member still there (a timeout
        // between hosts): the same members form a new generation.
        plan.regroup = true;
        plan.ranks.resize(static_cast<size_t>(world_));
        std::iota(plan.ranks.begin(), plan.ranks.end(), size_t{0});
        plan.why = "the group's collective failed; the same members regrouped";
      }
      if (plan.regroup) {
        ElasticResize r;
        if (!regroup(plan, r)) continue;  // someone was lost meanwhile: plan again
        broken_ = false;
        r.old_world = old_world;
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.why = plan.why;
        // A preemption names the job that took the room.
        if (allot_ && !allot_->preempted.empty() && plan.to_queue > 0)
          r.why += " (" + allot_->preempted + ")";
        return r;
      }
      if (!plan.wait && world_ > 0) return std::nullopt;
      if (std::chrono::steady_clock::now() > deadline)
        throw TimeoutError("the elastic group " + o_.name + " has " + std::to_string(world_) +
                           " members and needs at least " + std::to_string(o_.min) + " (" + std::to_string(ready()) +
                           " ready, " + std::to_string(waiting()) + " waiting for room or preparing)");
      await_progress(deadline);
    }
  }

  // Calls every member (call(actor, rank) -> ObjectRef<R>) and waits for all. Members whose
  // process is gone are marked lost and named in the outcome; any other error is rethrown.
  template <class R, class Call>
  Outcome<R> run(Call call, Duration timeout) {
    std::vector<ObjectRef<R>> refs;
    for (int k = 0; k < world_; ++k) refs.push_back(call(member(k), k));
    Outcome<R> out;
    out.by_rank.resize(refs.size());
    if (yard::wait(refs, refs.size(), timeout).ready.size() < refs.size())
      throw TimeoutError("the elastic group " + o_.name + ": a call did not finish in time");
    std::optional<std::string> fault;
    for (size_t k = 0; k < refs.size(); ++k) {
      try {
        out.by_rank[k] = *refs[k].get(Duration(0));
      } catch (const std::exception& e) {
        switch (loss_of(e)) {
          case Loss::kThisMember:
            slots_[k].s.state = ElasticSlot::State::kLost;
            out.lost.push_back(who(static_cast<int>(k)) + ": " + e.what());
            break;
          case Loss::kPeer: broken_ = true; break;
          case Loss::kNone:
            if (!fault) fault = who(static_cast<int>(k)) + ": " + e.what();
        }
      }
    }
    if (fault && out.lost.empty()) throw Error("the elastic group " + o_.name + ": " + *fault);
    return out;
  }

  int world() const { return world_; }
  // The most replicas the group holds now: its MAX, or the job's allotment when that is less.
  int allowed() const {
    if (!allot_) return o_.max;
    return std::clamp(allot_->replicas, o_.min, o_.max);
  }
  const ActorHandle<T>& member(int rank) const { return *slots_[static_cast<size_t>(rank)].actor; }
  int pid(int rank) const { return slots_[static_cast<size_t>(rank)].pid; }
  const std::string& node(int rank) const { return slots_[static_cast<size_t>(rank)].node; }
  std::string who(int rank) const {
    return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid(rank)) + " on " + node(rank) + ")";
  }
  // Every replica stopped (members and candidates).
  void stop() {
    for (auto& s : slots_)
      if (s.actor && s.s.state != ElasticSlot::State::kLost) try {
          kill(*s.actor);
        } catch (const std::exception&) {
        }
    slots_.clear();
    world_ = 0;
  }

 private:
  struct Slot {
    ElasticSlot s;
    std::optional<ActorHandle<T>> actor;
    std::optional<ObjectRef<int>> pid_ref;
    std::optional<ObjectRef<std::string>> prepared;
    int pid = 0;
    std::string node;
    std::string asked_on;  // the node its replica was asked for ("" anywhere)
  };
  enum class Loss { kNone, kThisMember, kPeer };

  // Whether an error means the member's own process is gone, or a peer's (a survivor's collective
  // failed), or neither (a fault of the work itself).
  static Loss loss_of(const std::exception& e) {
    if (dynamic_cast<const ActorDied*>(&e) || dynamic_cast<const WorkerCrashed*>(&e)) return Loss::kThisMember;
    if (auto* r = dynamic_cast<const RemoteError*>(&e)) {
      for (const char* t : {"ActorDied", "WorkerCrashed", "OwnerDied", "CollectiveError", "TimeoutError"})
        if (r->remote_type().find(t) != std::string::npos) return Loss::kPeer;
    }
    return Loss::kNone;
  }

  std::vector<ElasticSlot> states() const {
    std::vector<ElasticSlot> out;
    for (auto& s : slots_) out.push_back(s.s);
    return out;
  }
  int ready() const {
    int n = 0;
    for (auto& s : slots_) n += s.s.state == ElasticSlot::State::kReady;
    return n;
  }
  int waiting() const {
    int n = 0;
    for (auto& s : slots_)
      n += s.s.state == ElasticSlot::State::kStarting || s.s.state == ElasticSlot::State::kPreparing;
    return n;
  }

  // A new candidate, asked for on a node of the allotment that none of the replicas in play holds.
  void submit() {
    Slot s;
    s.asked_on = free_allotted_node();
    s.actor = make_(s.asked_on);
    s.pid_ref = s.actor->call(&T::pid).remote();
    slots_.push_back(std::move(s));
  }

  template <class R>
  static bool is_ready(const ObjectRef<R>& r) {
    return !yard::wait(std::vector<ObjectRef<R>>{r}, 1, Duration(0)).ready.empty();
  }

  // Moves candidates along (started → preparing → ready) and marks what runs on draining nodes.
  void poll() {
    using S = ElasticSlot::State;
    for (auto& s : slots_) {
      try {
        if (s.s.state == S::kStarting && is_ready(*s.pid_ref)) {
          s.pid = *s.pid_ref->get(Duration(0));
          s.prepared = prepare_(*s.actor);
          s.s.state = S::kPreparing;
        }
        if (s.s.state == S::kPreparing && is_ready(*s.prepared)) {
          s.node = *s.prepared->get(Duration(0));
          s.s.state = S::kReady;
        }
      } catch (const std::exception& e) {
        if (loss_of(e) == Loss::kNone) throw Error("the elastic group " + o_.name + ": a replica failed to prepare: " + e.what());
        s.s.state = S::kLost;
      }
      // A job the queue asks to stop keeps its members on draining nodes (they live until the
      // node goes) to commit its checkpoint with them.
      bool leaving = allot_ && allot_->stop_asked();
      if (s.s.state != S::kLost && !s.node.empty()) s.s.draining = !leaving && node_state(s.node) == NodeState::kDraining;
      s.s.asked = allot_ && std::find(allot_->release.begin(), allot_->release.end(), s.node) != allot_->release.end();
    }
  }

  std::string free_allotted_node() const {
    if (!allot_) return "";
    std::vector<std::string> free = allot_->nodes;
    for (auto& gone : allot_->release)
      if (auto it = std::find(free.begin(), free.end(), gone); it != free.end()) free.erase(it);
    for (auto& s : slots_) {
      if (s.s.state == ElasticSlot::State::kLost) continue;
      const std::string& at = s.node.empty() ? s.asked_on : s.node;
      if (auto it = std::find(free.begin(), free.end(), at); it != free.end()) free.erase(it);
    }
    return free.empty() ? "" : free.front();
  }

  // The job's allotment now (kept as it was when the control store cannot be read this time).
  void read_allotment() {
    if (!o_.follow_allotment) return;
    try {
      allot_ = job_allotment();
    } catch (const std::exception&) {
    }
  }

  // Waits a little for a candidate to move on (or the deadline).
  void await_progress(std::chrono::steady_clock::time_point deadline) {
    std::vector<ObjectRef<int>> pids;
    std::vector<ObjectRef<std::string>> preps;
    for (auto& s : slots_) {
      if (s.s.state == ElasticSlot::State::kStarting) pids.push_back(*s.pid_ref);
      if (s.s.state == ElasticSlot::State::kPreparing) preps.push_back(*s.prepared);
    }
    auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    auto step = std::max(Duration(1), std::min(left, std::chrono::duration_cast<Duration>(std::chrono::milliseconds(250))));
    // Either list may be empty; each wait returns at once when one of its refs is ready.
    if (!preps.empty()) {
      if (!yard::wait(preps, 1, pids.empty() ? step : Duration(0)).ready.empty()) return;
    }
    if (!pids.empty()) {
      (void)yard::wait(pids, 1, step);
      return;
    }
    if (preps.empty()) std::this_thread::sleep_for(step);  // nothing in flight: a drain or a restart ends
  }

  // Forms the generation the plan names; false when a member was lost meanwhile.
  bool regroup(const ElasticPlan& plan, ElasticResize& r) {
    // Everyone in the plan still there? A member that died since its last call (its peers saw the
    // loss first) would keep the others waiting for it in the new group until the timeout.
    std::vector<ObjectRef<int>> pings;
    for (size_t i : plan.ranks) pings.push_back(slots_[i].actor->call(&T::pid).remote());
    (void)yard::wait(pings, pings.size(), std::chrono::seconds(5));
    bool gone = false;
    for (size_t k = 0; k < pings.size(); ++k) {
      try {
        (void)pings[k].get(Duration(0));
      } catch (const std::exception& e) {
        if (loss_of(e) == Loss::kThisMember) slots_[plan.ranks[k]].s.state = ElasticSlot::State::kLost, gone = true;
      }
    }
    if (gone) return false;
    ++generation_;
    std::string gen = std::to_string(::getpid()) + "-" + std::to_string(std::time(nullptr)) + "-" + std::to_string(generation_);
    std::vector<ObjectRef<ElasticJoined>> refs;
    for (size_t k = 0; k < plan.ranks.size(); ++k) {
      ElasticForm f{o_.name, gen, static_cast<int>(plan.ranks.size()), static_cast<int>(k),
                    static_cast<int64_t>(o_.regroup_timeout.count())};
      refs.push_back(slots_[plan.ranks[k]].actor->call(&T::regroup).remote(f));
    }
    (void)yard::wait(refs, refs.size(), o_.regroup_timeout + std::chrono::seconds(10));
    bool lost = false;
    std::optional<std::string> fault;
    std::vector<ElasticJoined> joined(refs.size());
    for (size_t k = 0; k < refs.size(); ++k) {
      try {
        joined[k] = *refs[k].get(Duration(0));
      } catch (const std::exception& e) {
        auto l = loss_of(e);
        if (l == Loss::kThisMember) slots_[plan.ranks[k]].s.state = ElasticSlot::State::kLost, lost = true;
        if (l == Loss::kNone && !fault) fault = e.what();
        lost = lost || l == Loss::kPeer;
      }
    }
    if (fault && !lost) throw Error("the elastic group " + o_.name + " could not form generation " + gen + ": " + *fault);
    if (lost) return false;
    // The new generation: members first, by rank, then the candidates; the lost and released are
    // forgotten.
    std::vector<Slot> next;
    std::vector<bool> taken(slots_.size(), false);
    for (size_t k = 0; k < plan.ranks.size(); ++k) {
      taken[plan.ranks[k]] = true;
      next.push_back(std::move(slots_[plan.ranks[k]]));
      next.back().s.state = ElasticSlot::State::kMember;
      next.back().s.rank = static_cast<int>(k);
    }
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!taken[i] && slots_[i].s.state != ElasticSlot::State::kLost) next.push_back(std::move(slots_[i]));
    slots_ = std::move(next);
    world_ = static_cast<int>(plan.ranks.size());
    r.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    r.new_world = static_cast<int>(plan.ranks.size());
    r.step = joined[0].step;
    r.from_disk = joined[0].from_disk;
    r.bytes = joined[0].bytes;
    return true;
  }

  Options o_;
  MakeOn make_;
  Prepare prepare_;
  std::vector<Slot> slots_;  // the members first, slot k holding rank k; then the candidates
  int world_ = 0;
  int generation_ = 0;
  bool broken_ = false;  // a call failed on the collective: the next settle forms a new generation
  std::optional<JobAllotment> allot_;  // the job queue's allotment, when the job has one
};

}  // namespace yard::actors
