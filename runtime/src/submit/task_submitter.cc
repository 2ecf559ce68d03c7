#include "submit/task_submitter.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace yard::detail {

namespace {
constexpr int kPipelineUnmeasured = 16;  // per worker, before a service time is known
constexpr double kQueueBudgetUs = 5000;   // work queued on one worker once saturated
constexpr int kPipelineMax = 1024;

// "CPU: 100, GPU: 1"
std::string res_text(const std::map<std::string, double>& r) {
  std::string out;
  for (auto& [k, v] : r) out += fmt::format("{}{}: {:g}", out.empty() ? "" : ", ", k, v);
  return out;
}

bool same_shape(const TaskOptions& a, const TaskOptions& b) {
  return a.resources == b.resources && a.node_id == b.node_id && a.soft == b.soft && a.spread == b.spread &&
         a.placement_group == b.placement_group && a.bundle_index == b.bundle_index && a.runtime_env == b.runtime_env;
}
}  // namespace

// Tasks with the same resources, affinity and group share leased workers: their shape. A
// submitting thread keeps the last shape it used, so a stream of like tasks builds it once.
std::shared_ptr<const TaskSubmitter::ShapeSpec> TaskSubmitter::shape_of(const TaskOptions& o) {
  thread_local std::shared_ptr<const ShapeSpec> last;
  if (last && same_shape(last->options, o)) return last;
  auto s = std::make_shared<ShapeSpec>();
  s->options = o;
  s->need = o.resources.empty() ? std::map<std::string, double>{{"CPU", 1.0}} : o.resources;
  for (auto& [k, v] : s->need) s->key += k + "=" + std::to_string(v) + ";";
  if (!o.node_id.empty()) s->key += "@" + o.node_id + (o.soft ? "~" : "");
  if (o.spread) s->key += "*";
  if (!o.placement_group.empty()) s->key += "#" + o.placement_group + ":" + std::to_string(o.bundle_index);
  if (!o.runtime_env.empty()) s->key += "%" + o.runtime_env.to_json();
  last = s;
  return s;
}

void TaskSubmitter::submit(const std::shared_ptr<TaskSpec>& spec, const TaskOptions& o) {
  spec->retries_left = o.max_retries;
  if (o.infeasible_timeout != kForever) spec->infeasible_deadline = std::chrono::steady_clock::now() + o.infeasible_timeout;
  auto shape = shape_of(o);
  spec->shape = shape->key;
  if (ArgumentResolver::ready_now(*spec)) {
    // Tasks gather here until the loop takes them, all at once: a burst of tasks costs the loop
    // one turn, and those bound for one worker leave together.
    bool first;
    {
      std::lock_guard<std::mutex> l(submit_mu_);
      first = submitted_.empty();
      submitted_.push_back({spec, std::move(shape)});
    }
    if (first) io_.post([this] { take_submitted(); });
    return;
  }
  args_.resolve_then(spec, [this, spec, shape] {
    enqueue(spec, *shape);
    pump();
  });
}

void TaskSubmitter::take_submitted() {
  std::vector<Submitted> tasks;
  {
    std::lock_guard<std::mutex> l(submit_mu_);
    tasks.swap(submitted_);
  }
  for (auto& t : tasks) enqueue(t.spec, *t.shape);
  pump();
}

void TaskSubmitter::enqueue(const std::shared_ptr<TaskSpec>& spec, const ShapeSpec& shape) {
  auto& sh = shapes_[shape.key];
  if (sh.need.empty()) {
    sh.need = shape.need;
    sh.node_id = shape.options.node_id;
    sh.soft = shape.options.soft;
    sh.spread = shape.options.spread;
    sh.placement_group = shape.options.placement_group;
    sh.bundle_index = shape.options.bundle_index;
    if (!shape.options.runtime_env.empty()) sh.runtime_env = shape.options.runtime_env.to_json();
  }
  sh.queue.push_back(spec);
}

// Tasks go to leased workers of their resource shape. They queue deep behind busy workers only
// once the cluster said it has no more room for that shape (checked again every second): until
// then more workers are asked for, here or on other nodes, and while workers on another node are
// being leased tasks wait for them.
int pipeline_depth(bool saturated, bool spilling, double service_us) {
  if (!saturated || spilling) return 1;
  if (!(service_us > 0)) return kPipelineUnmeasured;
  return static_cast<int>(std::clamp(kQueueBudgetUs / service_us, 1.0, double(kPipelineMax)));
}

void TaskSubmitter::pump() {
  auto now = std::chrono::steady_clock::now();
  // Per worker, the tasks this turn gives it that can travel together (CallGroup).
  struct Outgoing {
    std::string wid, addr;
    bool same_host;
    CallGroup group;
  };
  std::vector<Outgoing> out;
  auto send_group = [this](Outgoing& o) {
    o.group.send(io_, args_, token_, o.addr, {}, o.same_host,
                 [&](std::shared_ptr<TaskSpec>&& spec) { return reply_to(spec, o.wid, o.addr); });
  };
  for (auto& [key, sh] : shapes_) {
    int depth = pipeline_depth(now < sh.saturated_until, sh.spill_in_flight, sh.service_us);
    while (!sh.queue.empty()) {
      Lease* best = nullptr;
      for (auto& l : leases_)
        if (l.shape == key && l.inflight < depth && (!best || l.inflight < best->inflight)) best = &l;
      if (!best) break;
      auto spec = std::move(sh.queue.front());
      sh.queue.pop_front();
      auto words = CallGroup::words(*spec, {});
      if (!words) {
        send(spec, *best);  // may fail a task at once: `best` is not used after it
        continue;
      }
      taken(*best, now);
      auto o = std::find_if(out.begin(), out.end(), [&](const Outgoing& g) { return g.wid == best->worker_id; });
      if (o == out.end()) o = out.insert(out.end(), Outgoing{best->worker_id, best->address, best->same_host, {}});
      if (!o->group.fits(*words)) send_group(*o);
      o->group.add(std::move(spec), *words);
    }
    if (!sh.queue.empty() && !sh.spill_in_flight) request_lease(key);
  }
  for (auto& o : out) send_group(o);
}

void TaskSubmitter::taken(Lease& w, std::chrono::steady_clock::time_point now) {
  w.last_used = now;
  if (w.inflight++ == 0) w.last_event = w.last_used;
}

void TaskSubmitter::send(const std::shared_ptr<TaskSpec>& spec, Lease& w) {
  std::string wid = w.worker_id, addr = w.address;  // a request that fails at once may drop the lease
  CallGroup::send_one(io_, args_, token_, addr, {}, w.same_host, spec, [&](std::shared_ptr<TaskSpec>&& s) {
    taken(w, std::chrono::steady_clock::now());  // its arguments were written: it leaves now
    return reply_to(s, wid, addr);
  });
}

ReplyCallback TaskSubmitter::reply_to(const std::shared_ptr<TaskSpec>& spec, const std::string& wid,
                                      const std::string& addr) {
  return [this, spec, wid, addr](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
    on_reply(spec, wid, addr, std::move(r), std::move(err));
  };
}

// A lost worker's task runs again elsewhere while it has retries left.
void TaskSubmitter::on_reply(const std::shared_ptr<TaskSpec>& spec, const std::string& wid, const std::string& addr,
                             std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
  auto it = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.worker_id == wid; });
  if (err && err->shutdown) {
    fail_object(store_, spec->id, wire::ErrorCode::UNAVAILABLE,
                "task " + spec->function + " had not finished when this process's runtime shut down");
    return;
  }
  if (err && err->code == wire::ErrorCode::BAD_REQUEST) {
    // Refused before it left (a message over the size limit): the worker is fine, the task fails.
    fail_object(store_, spec->id, err->code, "task " + spec->function + ": " + err->message);
    if (it != leases_.end()) --it->inflight;  // (called from pump(), which goes on)
    return;
  }
  if (err) {
    if (it != leases_.end()) leases_.erase(it);
    if (spec->retries_left > 0) {
      --spec->retries_left;
      spdlog::warn("worker {} at {} was lost ({}); retrying task {}", wid, addr, err->message, spec->function);
      shapes_[spec->shape].queue.push_back(spec);
    } else {
      fail_object(store_, spec->id, wire::ErrorCode::WORKER_CRASHED,
                  "the worker running task " + spec->function + " (worker " + wid + " at " + addr +
                      ") died: " + err->message);
    }
  } else {
    if (it != leases_.end()) {
      --it->inflight;
      auto now = std::chrono::steady_clock::now();
      double us = std::chrono::duration<double, std::micro>(now - it->last_event).count();
      auto& sh = shapes_[spec->shape];
      sh.service_us = sh.service_us <= 0 ? us : 0.9 * sh.service_us + 0.1 * us;
      it->last_used = it->last_event = now;
    }
    args_.ownership().complete(spec->id, *r);
  }
  pump_soon();
}

void TaskSubmitter::pump_soon() {
  if (pump_due_) return;
  pump_due_ = true;
  io_.at_turn_end([this] {
    pump_due_ = false;
    pump();
  });
}

// Leases come from this process's node manager first; one that has no room sends us on to a node
// that has (spillback), which then serves the request itself.
void TaskSubmitter::request_lease(const std::string& key, const std::string& node_in, bool spilled) {
  auto& sh = shapes_[key];
  if (sh.lease_in_flight && !spilled) return;
  sh.lease_in_flight = true;
  std::string node = node_in.empty() ? lease_address_ : node_in;
  bool have = std::any_of(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.shape == key; });
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto rl = m.env().getBody().initRequestLease();
  rl.setJobId(job_id_);
  static const std::string requester = [] {
    const char* w = getenv("YARD_WORKER_ID");
    return std::string(w ? w : "");
  }();
  rl.setRequester(requester);
  // SPREAD asks for one worker at a time, so each may come from another node.
  rl.setCount(sh.spread ? 1 : static_cast<uint32_t>(std::min<size_t>(sh.queue.size(), 64)));
  rl.setNodeId(sh.node_id);
  rl.setSoft(sh.soft);
  rl.setSpread(sh.spread);
  rl.setPlacementGroup(sh.placement_group);
  rl.setBundleIndex(sh.bundle_index);
  rl.setRuntimeEnv(sh.runtime_env);
  rl.setTimeoutMs(spilled ? 2000 : 60000);  // a node that turns out busy answers soon
  rl.setSpilled(spilled);
  rl.setNoWait(!spilled && have);
  set_resources(rl.initResources(static_cast<unsigned>(sh.need.size())), sh.need);
  if (spilled) sh.spill_in_flight = true;
  io_.request(node, rid, m.finish(),
               [this, key, node, spilled](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 on_lease(key, node, spilled, std::move(r), std::move(err));
               },
               std::chrono::milliseconds(65000));
}

void TaskSubmitter::fail_queue(Shape& sh, const std::function<void(const std::string&)>& fail) {
  auto q = std::move(sh.queue);
  sh.queue.clear();
  for (auto& s : q) fail(s->id);
}

void TaskSubmitter::on_lease(const std::string& key, const std::string& node, bool spilled,
                             std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
  auto& sh = shapes_[key];
  sh.lease_in_flight = false;
  if (spilled) sh.spill_in_flight = false;
  if (err && (spilled || err->code == wire::ErrorCode::TIMEOUT)) {
    pump();  // that node is unreachable: the local workers take the tasks (or: ask again)
    return;
  }
  if (err) {
    fail_queue(sh, [&](const std::string& id) {
      fail_object(store_, id, wire::ErrorCode::UNAVAILABLE, "cannot lease workers from " + node + ": " + err->message);
    });
    return;
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    fail_queue(sh, [&](const std::string& id) { fail_from_reply(store_, id, body.getError()); });
    return;
  }
  auto lg = body.getLeaseGranted();
  if (lg.getWaiting().size()) waiting_for_node(sh, lg.getWaiting());
  for (auto w : lg.getWorkers()) leases_.push_back(Lease{w.getWorkerId(), w.getAddress(), 0, node, key, r->same_host()});
  if (lg.getWorkers().size() == 0 && lg.getSpillback().size() == 0)
    sh.saturated_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  if (lg.getSpillback().size() && !spilled && !sh.queue.empty())
    request_lease(key, lg.getSpillback(), true);  // one task per worker granted here, the rest waits for the spill
  pump();
}

// No node of the cluster can hold the shape's tasks: they wait for one that can (the node asks
// again every second). The driver's log says so once; tasks past their infeasible_timeout fail.
void TaskSubmitter::waiting_for_node(Shape& sh, const std::string& why) {
  if (!sh.warned) {
    sh.warned = true;
    spdlog::warn("tasks needing {} wait: {}; a node that can hold them may join (infeasible_timeout, or the "
                 "cluster's [scheduling] infeasible = \"fail\", fails them instead)",
                 res_text(sh.need), why);
  }
  auto now = std::chrono::steady_clock::now();
  std::erase_if(sh.queue, [&](const std::shared_ptr<TaskSpec>& s) {
    if (s->infeasible_deadline > now) return false;
    fail_object(store_, s->id, wire::ErrorCode::INFEASIBLE,
                "task " + s->function + " needs " + res_text(sh.need) + ": " + why);
    return true;
  });
}

void TaskSubmitter::return_idle_leases() {
  if (leases_.empty()) return;
  auto now = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<std::string>> by_node;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto sh = shapes_.find(it->shape);
    bool queued = sh != shapes_.end() && !sh->second.queue.empty();
    if (it->inflight == 0 && !queued && now - it->last_used >= std::chrono::seconds(2)) {
      by_node[it->node.empty() ? lease_address_ : it->node].push_back(it->worker_id);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [node, workers] : by_node) {
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    auto rl = m.env().getBody().initReturnLease();
    rl.setJobId(job_id_);
    auto ids = rl.initWorkerIds(static_cast<unsigned>(workers.size()));
    for (size_t i = 0; i < workers.size(); ++i) ids.set(static_cast<unsigned>(i), workers[i]);
    io_.request(node, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
                 std::chrono::seconds(10));
  }
}

}  // namespace yard::detail
