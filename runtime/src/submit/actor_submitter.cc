#include "submit/actor_submitter.h"

#include <algorithm>
#include <future>

#include <spdlog/spdlog.h>

#include "core_worker.h"
#include "yard/process.h"

namespace yard::detail {

namespace {
constexpr auto kControlTimeout = std::chrono::seconds(30);
constexpr auto kCreateTimeout = std::chrono::seconds(120);
constexpr auto kHeadOutage = std::chrono::seconds(60);  // how long a lost head is waited for
}  // namespace

ActorPtr ActorSubmitter::create(const std::string& cls, std::vector<Arg> args, const ActorOptions& o) {
  auto a = std::make_shared<ActorState>();
  a->id = "actor-" + random_hex(8);
  a->class_name = cls;
  a->name = o.name;
  a->max_concurrency = std::max(1, o.max_concurrency);
  a->created_here = true;
  auto spec = make_spec_(cls, std::move(args));
  spec->actor = a;
  spec->is_creation = true;
  spec->actor_options = std::make_unique<ActorOptions>(o);
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  args_.resolve_then(spec, [this, spec, holder] { send_creation(spec); });
  return a;
}

void ActorSubmitter::send_creation(const std::shared_ptr<TaskSpec>& spec) {
  auto a = spec->actor;
  if (a->kill_requested) {
    dead(a, "killed by yard::kill before it started");
    return;
  }
  a->creation_sent = true;
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto ca = m.env().getBody().initCreateActor();
  ca.setActorId(a->id);
  ca.setJobId(job_id_);
  ca.setClassName(a->class_name);
  ca.setName(a->name);
  ca.setNamespace(spec->actor_options->name_space.empty() ? name_space_ : spec->actor_options->name_space);
  ca.setMaxConcurrency(static_cast<uint32_t>(a->max_concurrency));
  const auto& o = *spec->actor_options;
  ca.setConcurrency(o.concurrency == Concurrency::kFibers ? wire::Concurrency::FIBERS : wire::Concurrency::THREADS);
  auto groups = ca.initConcurrencyGroups(static_cast<unsigned>(o.groups.size()));
  for (unsigned i = 0; i < o.groups.size(); ++i) {
    groups[i].setName(o.groups[i].name);
    groups[i].setMaxConcurrency(static_cast<uint32_t>(o.groups[i].max_concurrency));
    auto ms = groups[i].initMethods(static_cast<unsigned>(o.groups[i].methods.size()));
    for (unsigned k = 0; k < o.groups[i].methods.size(); ++k) ms.set(k, o.groups[i].methods[k]);
  }
  ca.setMaxRestarts(o.max_restarts);
  ca.setStrategy(o.strategy);
  ca.setNodeId(o.node_id);
  ca.setSoft(o.soft);
  ca.setCallerNode(node_id_);
  ca.setPlacementGroup(o.placement_group);
  ca.setBundleIndex(o.bundle_index);
  ca.setDetached(o.lifetime == Lifetime::kDetached);
  ca.setLifetimeChosen(o.lifetime != Lifetime::kJobDefault);
  // Made by an actor's code: it owns the new one.
  static const std::string owner = [] {
    const char* id = getenv("YARD_ACTOR_ID");
    return std::string(id ? id : "");
  }();
  ca.setOwnerActor(owner);
  if (!o.runtime_env.empty()) ca.setRuntimeEnv(o.runtime_env.to_json());
  if (o.infeasible_timeout != kForever) ca.setInfeasibleTimeoutMs(static_cast<uint64_t>(o.infeasible_timeout.count()));
  set_resources(ca.initResources(static_cast<unsigned>(o.resources.size())), o.resources);
  if (auto problem = args_.fill(ca.initArgs(static_cast<unsigned>(spec->args.size())), m, spec->args)) {
    dead(a, "constructor argument " + std::to_string(problem->index) + " is not available" +
                      (problem->error ? ": " + problem->error->message : std::string()));
    return;
  }
  io_.request(head_.get(), rid, m.finish(),
               [this, a, spec](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 // The head may be restarting: send the creation again (the head knows the actor
                 // by its id, so a creation it already has is not repeated).
                 if (retry_through_head_outage(a, r.get(), err, [this, spec] { send_creation(spec); })) return;
                 if (err) {
                   dead(a, "creating the actor failed: " + err->message);
                   return;
                 }
                 on_created(spec, *r);
               },
               kCreateTimeout);
}

// The head's answer to a creation: the actor is up, dead, or (a node that can hold it may still
// join) waiting, when the creation is sent again and answered once it is up.
void ActorSubmitter::on_created(const std::shared_ptr<TaskSpec>& spec, const InMessage& r) {
  auto a = spec->actor;
  auto body = r.env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    if (e.getCode() == wire::ErrorCode::INFEASIBLE) return infeasible(a, e.getMessage());
    dead(a, std::string("creating the actor failed: ") + e.getMessage().cStr());
    return;
  }
  auto info = body.getActorInfo();
  std::string waiting = info.getWaiting();
  if (info.getState() == wire::ActorState::DEAD) {
    if (!waiting.empty()) return infeasible(a, info.getDeathCause());
    dead(a, std::string("creating the actor failed: ") + info.getDeathCause().cStr());
    return;
  }
  if (info.getState() != wire::ActorState::ALIVE || info.getAddress().size() == 0) {
    if (!waiting.empty() && !a->warned) {
      a->warned = true;
      spdlog::warn("actor {} ({}) waits: {}; a node that can hold it may join (infeasible_timeout, or the "
                   "cluster's [scheduling] infeasible = \"fail\", fails it instead)",
                   a->id, a->class_name, waiting);
    }
    send_creation(spec);
    return;
  }
  a->address = info.getAddress();
  a->state = ActorState::State::kAlive;
  flush(a);
}

// No node could hold it: it and its calls fail as InfeasibleError.
void ActorSubmitter::infeasible(const ActorPtr& a, const std::string& why) {
  a->state = ActorState::State::kDead;
  a->death_cause = why;
  a->infeasible = true;
  auto q = std::move(a->queue);
  a->queue.clear();
  for (auto& s : q) fail_object(store_, s->id, wire::ErrorCode::INFEASIBLE, why);
}

ActorPtr ActorSubmitter::lookup(const std::string& name, const std::string& cls, const std::string& name_space) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto ga = m.env().getBody().initGetActor();
  ga.setName(name);
  ga.setNamespace(name_space.empty() ? name_space_ : name_space);
  auto r = io_.call(head_.get(), m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
  auto info = body.getActorInfo();
  if (std::string(info.getClassName()) != cls)
    throw NotFoundError("actor '" + name + "' is a " + std::string(info.getClassName()) + ", not a " + cls);
  if (info.getState() == wire::ActorState::DEAD)
    throw ActorDied("actor '" + name + "' is dead: " + std::string(info.getDeathCause()));
  auto a = std::make_shared<ActorState>();
  a->id = info.getActorId();
  a->class_name = cls;
  a->name = name;
  if (info.getState() == wire::ActorState::ALIVE) {
    a->address = info.getAddress();
    a->state = ActorState::State::kAlive;
  } else {
    a->needs_lookup = true;  // restarting: found on first use
  }
  return a;
}

ActorPtr ActorSubmitter::from_id(const std::string& id, const std::string& cls) {
  auto a = std::make_shared<ActorState>();
  a->id = id;
  a->class_name = cls;
  a->needs_lookup = true;
  return a;
}

void ActorSubmitter::lookup_address(const ActorPtr& a) {
  if (!a->needs_lookup || a->lookup_in_flight) return;
  a->lookup_in_flight = true;
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto ga = m.env().getBody().initGetActor();
  ga.setActorId(a->id);
  ga.setLostAddress(a->lost_address);
  io_.request(head_.get(), rid, m.finish(),
               [this, a](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 a->lookup_in_flight = false;
                 if (retry_through_head_outage(a, r.get(), err, [this, a] { lookup_address(a); })) return;
                 a->needs_lookup = false;
                 if (err) {
                   dead(a, "cannot look up where it lives: " + err->message);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   dead(a, body.getError().getMessage());
                   return;
                 }
                 auto info = body.getActorInfo();
                 if (info.getState() != wire::ActorState::ALIVE) {
                   dead(a, info.getDeathCause());
                   return;
                 }
                 a->address = info.getAddress();
                 a->state = ActorState::State::kAlive;
                 auto lost = std::move(a->lost_calls);
                 a->lost_calls.clear();
                 for (auto& s : lost)
                   fail_object(store_, s->id, wire::ErrorCode::ACTOR_RESTARTING,
                        "actor " + a->id + " (" + a->class_name + ") lost its process while running " + s->function +
                            " and was restarted (restart " + std::to_string(info.getNumRestarts()) + ", node " +
                            std::string(info.getNodeId()) + "); the call may or may not have run: " +
                            std::string(info.getDeathCause()));
                 flush(a);
               },
               kCreateTimeout);
}

Holder ActorSubmitter::call(const ActorPtr& a, const std::string& method, std::vector<Arg> args,
                            const CallOptions& call) {
  auto spec = make_spec_(method, std::move(args));
  spec->actor = a;
  spec->concurrency_group = call.group;
  spec->name = call.name;
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  // Queue first (keeps submission order), then let resolution release it: at once for a call
  // without ObjectRef arguments.
  bool ready = args_.ready_now(*spec);
  // Calls gather here until the loop takes them, all at once: a burst of calls costs the loop one
  // turn, not one closure each. Taken before any resolution posted below is run.
  bool first;
  {
    std::lock_guard<std::mutex> l(submit_mu_);
    first = submitted_.empty();
    // A call's records cross to the loop's thread once: each copy of a shared pointer made on one
    // core and dropped on the other moves its count's cache line between them.
    submitted_.push_back({ready ? std::move(spec) : spec, ready});
  }
  if (first) io_.post([this] { take_submitted(); });
  if (!ready) args_.resolve_then(spec, [this, a] { flush(a); });
  return holder;
}

void ActorSubmitter::take_submitted() {
  std::vector<Submitted> calls;
  {
    std::lock_guard<std::mutex> l(submit_mu_);
    calls.swap(submitted_);
  }
  std::vector<ActorPtr> to_flush;
  for (auto& [spec, ready] : calls) {
    auto& a = spec->actor;
    if (a->state == ActorState::State::kDead) {
      // A call made after the creation was refused as infeasible says so, as the earlier ones did.
      if (a->infeasible)
        fail_object(store_, spec->id, wire::ErrorCode::INFEASIBLE, a->death_cause);
      else
        fail_object(store_, spec->id, wire::ErrorCode::ACTOR_DIED,
                    "actor " + a->id + " (" + a->class_name + ") is dead: " + a->death_cause);
      continue;
    }
    a->queue.push_back(spec);
    if (a->needs_lookup) lookup_address(a);
    if (ready && (to_flush.empty() || to_flush.back() != a)) to_flush.push_back(a);
  }
  for (auto& a : to_flush) flush(a);  // each actor's calls leave in the order they were made
}

// The calls that can leave, in order. A run of calls whose arguments are small values travels as
// one message (CallGroup).
void ActorSubmitter::flush(const ActorPtr& a) {
  CallGroup group;
  auto send_group = [&] {
    group.send(io_, args_, token_, a->address, a->id, a->same_host_address == a->address,
               [this](std::shared_ptr<TaskSpec>&& spec) { return on_reply(std::move(spec)); });
  };
  while (a->state == ActorState::State::kAlive && !a->queue.empty() && a->queue.front()->resolved) {
    auto spec = std::move(a->queue.front());
    a->queue.pop_front();
    auto words = CallGroup::words(*spec, a->id);
    if (!words) {
      send_group();
      send_call(a, std::move(spec));
      continue;
    }
    if (!group.fits(*words)) send_group();
    group.add(std::move(spec), *words);
  }
  send_group();
}

void ActorSubmitter::send_call(const ActorPtr& a, std::shared_ptr<TaskSpec> spec) {
  CallGroup::send_one(io_, args_, token_, a->address, a->id, a->same_host_address == a->address, std::move(spec),
                      [this](std::shared_ptr<TaskSpec>&& s) { return on_reply(std::move(s)); });
}

// The reply's callback holds the call alone (its actor and address are the call's).
ReplyCallback ActorSubmitter::on_reply(std::shared_ptr<TaskSpec> spec) {
  return [this, spec = std::move(spec)](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
    const auto& a = spec->actor;
    if (err && err->shutdown) {
      fail_object(store_, spec->id, wire::ErrorCode::UNAVAILABLE,
                  "call " + spec->function + " had not finished when this process's runtime shut down");
      return;
    }
    if (err && err->code == wire::ErrorCode::BAD_REQUEST) {  // refused before it left
      fail_object(store_, spec->id, err->code, "call " + spec->function + ": " + err->message);
      return;
    }
    if (err) {
      std::string address = spec->sent_to;  // a call sent again is sent to another
      connection_lost(a, spec, address, err->message, err->code != wire::ErrorCode::UNAVAILABLE);
      return;
    }
    if (a->same_host_address != spec->sent_to && r->same_host()) a->same_host_address = spec->sent_to;
    args_.ownership().complete(spec->id, *r);
  };
}

// The connection to the actor's worker broke under a call: the head knows whether the actor is
// dead or coming back. Calls not yet sent wait for the answer; the broken ones learn it then.
void ActorSubmitter::connection_lost(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec,
                                     const std::string& address, const std::string& why, bool delivered) {
  if (a->state == ActorState::State::kDead) {
    fail_object(store_, spec->id, wire::ErrorCode::ACTOR_DIED,
         "actor " + a->id + " (" + a->class_name + ") died while running " + spec->function + ": " + a->death_cause);
    return;
  }
  if (!delivered) {
    // The connection was refused: the call never left this process. It goes back in its place in
    // the queue and runs wherever the actor is now.
    auto pos = std::find_if(a->queue.begin(), a->queue.end(), [&](auto& s) { return s->seq > spec->seq; });
    a->queue.insert(pos, spec);
    if (a->state == ActorState::State::kAlive && a->address != address) {
      flush(a);
      return;
    }
  } else if (a->state == ActorState::State::kAlive && a->address != address) {
    // Already known to have restarted elsewhere.
    fail_object(store_, spec->id, wire::ErrorCode::ACTOR_RESTARTING,
         "actor " + a->id + " (" + a->class_name + ") lost its process while running " + spec->function +
             " and was restarted; the call may or may not have run");
    return;
  }
  if (delivered) a->lost_calls.push_back(spec);
  if (a->state == ActorState::State::kAlive) {
    spdlog::debug("actor {}: its worker at {} is gone ({}): asking the head", a->id, address, why);
    a->state = ActorState::State::kPending;
    a->lost_address = address;
    a->address.clear();
    a->death_cause = "its worker at " + address + " is gone (" + why + ")";
    a->needs_lookup = true;
    lookup_address(a);
  }
}

// Killed to be restarted: its next calls wait for the head to say where it runs now (or that it
// died, with no restarts left); calls its old process had fail as after a crash.
void ActorSubmitter::restarted(const ActorPtr& a) {
  if (a->state != ActorState::State::kAlive) {
    a->needs_lookup = true;
    return lookup_address(a);
  }
  a->state = ActorState::State::kPending;
  a->lost_address = a->address;
  a->address.clear();
  a->death_cause = "killed by yard::kill to restart";
  a->needs_lookup = true;
  lookup_address(a);
}

void ActorSubmitter::dead(const ActorPtr& a, const std::string& cause) {
  if (a->state != ActorState::State::kDead || a->death_cause.empty()) a->death_cause = cause;
  a->state = ActorState::State::kDead;
  auto q = std::move(a->queue);
  a->queue.clear();
  for (auto& s : a->lost_calls)
    fail_object(store_, s->id, wire::ErrorCode::ACTOR_DIED,
         "actor " + a->id + " (" + a->class_name + ") died while running " + s->function + ": " + a->death_cause);
  a->lost_calls.clear();
  for (auto& s : q)
    fail_object(store_, s->id, wire::ErrorCode::ACTOR_DIED,
         "actor " + a->id + " (" + a->class_name + ") is dead: " + a->death_cause);
}

void ActorSubmitter::kill(const ActorPtr& a, bool restart) {
  // Sequenced on the I/O thread after the creation request, so a kill never overtakes it.
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto fut = done->get_future();
  io_.post([this, a, done, restart] {
    if (restart && a->created_here && !a->creation_sent) {
      done->set_value(std::nullopt);  // no process yet: nothing to restart
      return;
    }
    if (!restart) a->kill_requested = true;
    if (a->created_here && !a->creation_sent) {
      dead(a, "killed by yard::kill before it started");
      done->set_value(std::nullopt);
      return;
    }
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    auto ka = m.env().getBody().initKillActor();
    ka.setActorId(a->id);
    ka.setRestart(restart);
    io_.request(head_.get(), rid, m.finish(),
                 [this, a, done, restart](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                   if (restart && !err && !r->env().getBody().isError()) {
                     restarted(a);
                     return done->set_value(std::nullopt);
                   }
                   dead(a, "killed by yard::kill");
                   if (err) return done->set_value(err->message);
                   auto body = r->env().getBody();
                   if (body.isError() && body.getError().getCode() != wire::ErrorCode::NOT_FOUND)
                     return done->set_value(describe(body.getError()));
                   done->set_value(std::nullopt);
                 },
                 kControlTimeout);
  });
  if (fut.wait_for(kControlTimeout + std::chrono::seconds(5)) != std::future_status::ready)
    throw TimeoutError("killing actor " + a->id + ": no answer from " + head_.get());
  auto err = fut.get();
  if (err) throw Error("killing actor " + a->id + ": " + *err);
}

// A request to the head that failed because the head is away (lost connection, or "unavailable"
// while a new head starts) is sent again in 200 ms, for up to a minute. True when it will be.
bool ActorSubmitter::retry_through_head_outage(const ActorPtr& a, const InMessage* r,
                                               const std::optional<LocalError>& err, std::function<void()> again) {
  bool away = err ? err->code != wire::ErrorCode::TIMEOUT
                  : (r->env().getBody().isError() &&
                     r->env().getBody().getError().getCode() == wire::ErrorCode::UNAVAILABLE);
  auto now = std::chrono::steady_clock::now();
  if (away) {
    if (a->lookup_since == std::chrono::steady_clock::time_point{}) a->lookup_since = now;
    head_.ask(io_, token_, node_);  // a standby may lead now
    if (now - a->lookup_since < kHeadOutage) {
      io_.after(std::chrono::milliseconds(200), std::move(again));
      return true;
    }
  }
  a->lookup_since = {};
  return false;
}

}  // namespace yard::detail
