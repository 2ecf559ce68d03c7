#include "core_worker.h"

#include <fstream>
#include <algorithm>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "process.h"

namespace yard::detail {

namespace {
constexpr int kPipelinePerWorker = 16;
constexpr auto kControlTimeout = std::chrono::seconds(30);
}  // namespace

// ---- construction -----------------------------------------------------------------------------

CoreWorker::CoreWorker(const std::string& address, const std::string& token,
                       std::chrono::milliseconds timeout)
    : token_(token), head_(address), gcs_(address), id_prefix_(random_hex(6)) {
  // Reachable from the cluster: loopback for a local head, else the interface toward the head
  // (YARD_HOST overrides).
  const char* host_env = getenv("YARD_HOST");
  std::string bind_host = host_env && *host_env ? host_env : local_ip_toward(split_address(address).first);
  io_ = std::make_unique<IoLoop>(bind_host, 0, token_, [this](IoLoop::Incoming in) {
    if (ownership_.serve(in)) return;
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    set_error(m.env(), wire::ErrorCode::NOT_FOUND, "a driver serves only its objects");
    io_->reply(in.routing_id, m.finish());
  });
  // The binary goes to the cluster once, content-addressed: nodes without a shared file system
  // fetch it from the head.
  std::string digest;
  try {
    std::ifstream f(self_exe(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.good() || f.eof()) {
      digest = sha256_hex(bytes.data(), bytes.size());
      uint64_t hid = io_->next_request_id();
      OutMessage hm(token_, hid, false);
      hm.env().getBody().setHasBlob(digest);
      auto hr = io_->call(head_, hm, hid, timeout);
      auto hb = hr->env().getBody();
      if (hb.isError() && hb.getError().getCode() == wire::ErrorCode::NOT_FOUND) {
        uint64_t pid = io_->next_request_id();
        OutMessage pm(token_, pid, false);
        auto pb = pm.env().getBody().initPutBlob();
        pb.setDigest(digest);
        pm.set_value(pb.initData(), std::make_shared<StringBuffer>(std::move(bytes)));
        auto pr = io_->call(head_, pm, pid, std::chrono::seconds(120));
        if (pr->env().getBody().isError()) {
          spdlog::warn("uploading {} to the cluster failed: {}", self_exe(), describe(pr->env().getBody().getError()));
          digest.clear();
        }
      } else if (hb.isError()) {
        if (hb.getError().getCode() == wire::ErrorCode::UNAUTHENTICATED)
          throw AuthError("the head at " + address + " rejected this program: " + hb.getError().getMessage().cStr());
        digest.clear();  // an older head: workers use the path
      }
    }
  } catch (const TimeoutError&) {
    throw ConnectionError("no answer from a Switchyard head at " + address + " within " +
                          std::to_string(timeout.count()) + " ms (is the address right?)");
  } catch (const ConnectionError& e) {
    throw ConnectionError("cannot reach a Switchyard head at " + address + ": " + e.what());
  }
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto rj = m.env().getBody().initRegisterJob();
  rj.setBinary(self_exe());
  rj.setBinaryDigest(digest);
  rj.setPid(getpid());
  if (const char* s = getenv("YARD_SUBMISSION_ID")) rj.setSubmissionId(s);
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) rj.setCwd(cwd);
  std::unique_ptr<InMessage> r;
  try {
    r = io_->call(head_, m, rid, timeout);
  } catch (const TimeoutError&) {
    throw ConnectionError("no answer from a Switchyard head at " + address + " within " +
                          std::to_string(timeout.count()) + " ms (is the address right?)");
  } catch (const ConnectionError& e) {
    throw ConnectionError("cannot reach a Switchyard head at " + address + ": " + e.what());
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    if (e.getCode() == wire::ErrorCode::UNAUTHENTICATED)
      throw AuthError("the head at " + address + " rejected this program: " + e.getMessage().cStr());
    throw ConnectionError("the head at " + address + " refused to register the job: " + describe(e));
  }
  if (!body.isJobRegistered()) throw ConnectionError("unexpected reply from " + address);
  job_id_ = body.getJobRegistered().getJobId();
  node_id_ = body.getJobRegistered().getNodeId();
  // Leases go to the node manager the head named; actors, groups and the job's end to the head.
  if (body.getJobRegistered().getNodeAddress().size()) head_ = body.getJobRegistered().getNodeAddress();
  io_->post([this] { io_->every(std::chrono::milliseconds(500), [this] { return_idle_leases(); }); });
}

CoreWorker::CoreWorker(WorkerConfig cfg)
    : worker_mode_(true), token_(cfg.token), head_(cfg.node_address),
      gcs_(cfg.head_address.empty() ? cfg.node_address : cfg.head_address), node_id_(cfg.node_id),
      job_id_(cfg.job_id), wcfg_(std::move(cfg)), id_prefix_(random_hex(6)) {}

CoreWorker::~CoreWorker() { disconnect(); }

void CoreWorker::disconnect() {
  if (!io_) return;
  if (!worker_mode_ && !job_id_.empty()) {
    try {
      uint64_t rid = io_->next_request_id();
      OutMessage m(token_, rid, false);
      m.env().getBody().setFinishJob(job_id_);
      io_->call(gcs_, m, rid, std::chrono::seconds(5));
    } catch (const std::exception& e) {
      spdlog::debug("finishing job {}: {}", job_id_, e.what());
    }
  }
  io_->stop();
  io_.reset();
}

std::string CoreWorker::new_id() {
  return id_prefix_ + std::to_string(id_seq_.fetch_add(1, std::memory_order_relaxed));
}

// ---- objects ----------------------------------------------------------------------------------

Holder CoreWorker::put(Bytes value) {
  std::string id = new_id();
  store_.create(id);
  store_.set_value(id, std::move(value));
  return std::make_shared<ObjectHolder>(id);
}

Bytes CoreWorker::get(const std::string& id, std::chrono::milliseconds timeout) {
  ownership_.ensure_fetched(id);
  return store_.get(id, timeout);
}

std::vector<size_t> CoreWorker::wait(const std::vector<std::string>& ids, size_t num,
                                     std::chrono::milliseconds t) {
  for (auto& id : ids) ownership_.ensure_fetched(id);
  return store_.wait(ids, num, t);
}

// ---- ownership (ownership.cc) ----------------------------------------------------------------

std::pair<std::string, std::string> CoreWorker::export_ref(const Holder& h) { return ownership_.export_ref(h); }

Holder CoreWorker::import_ref(const std::string& id, const std::string& owner) {
  return ownership_.import_ref(id, owner);
}

void CoreWorker::release(const std::string& id, const std::string& owner) { ownership_.release(id, owner); }

std::shared_ptr<TaskSpec> CoreWorker::make_spec(std::string fn, std::vector<Arg> args) {
  auto spec = std::make_shared<TaskSpec>();
  spec->seq = id_seq_.load(std::memory_order_relaxed);
  spec->id = new_id();
  spec->function = std::move(fn);
  spec->args = std::move(args);
  store_.create(spec->id);
  return spec;
}

// ---- tasks ------------------------------------------------------------------------------------

Holder CoreWorker::submit_task(const std::string& function, std::vector<Arg> args,
                               const TaskOptions& o) {
  auto spec = make_spec(function, std::move(args));
  spec->retries_left = o.max_retries;
  std::map<std::string, double> need = o.resources.empty() ? std::map<std::string, double>{{"CPU", 1.0}} : o.resources;
  std::string key;
  for (auto& [k, v] : need) key += k + "=" + std::to_string(v) + ";";
  if (!o.node_id.empty()) key += "@" + o.node_id + (o.soft ? "~" : "");
  if (o.spread) key += "*";
  if (!o.placement_group.empty()) key += "#" + o.placement_group + ":" + std::to_string(o.bundle_index);
  spec->shape = key;
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  args_.resolve_then(spec, [this, spec, need, o] {
    auto& sh = shapes_[spec->shape];
    sh.need = need;
    sh.node_id = o.node_id;
    sh.soft = o.soft;
    sh.spread = o.spread;
    sh.placement_group = o.placement_group;
    sh.bundle_index = o.bundle_index;
    sh.queue.push_back(spec);
    pump_tasks();
  });
  return holder;
}

// Tasks go to leased workers of their resource shape. They queue deep behind busy workers only
// once the cluster said it has no more room for that shape (checked again every second): until
// then more workers are asked for, here or on other nodes, and while workers on another node are
// being leased tasks wait for them.
void CoreWorker::pump_tasks() {
  auto now = std::chrono::steady_clock::now();
  for (auto& [key, sh] : shapes_) {
    int depth = now < sh.saturated_until && !sh.spill_in_flight ? kPipelinePerWorker : 1;
    while (!sh.queue.empty()) {
      Lease* best = nullptr;
      for (auto& l : leases_)
        if (l.shape == key && l.inflight < depth && (!best || l.inflight < best->inflight)) best = &l;
      if (!best) break;
      auto spec = sh.queue.front();
      sh.queue.pop_front();
      send_task(spec, *best);
    }
    if (!sh.queue.empty() && !sh.spill_in_flight) request_lease(key);
  }
}

void CoreWorker::send_task(const std::shared_ptr<TaskSpec>& spec, Lease& w) {
  last_task_activity_ = std::chrono::steady_clock::now();
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto pt = m.env().getBody().initPushTask();
  pt.setTaskId(spec->id);
  pt.setFunction(spec->function);
  if (!args_.fill_task(pt, m, *spec)) return;
  ++w.inflight;
  w.last_used = last_task_activity_;
  std::string wid = w.worker_id, addr = w.address;
  io_->request(addr, rid, m.finish(),
               [this, spec, wid, addr](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 last_task_activity_ = std::chrono::steady_clock::now();
                 auto it = std::find_if(leases_.begin(), leases_.end(),
                                        [&](const Lease& l) { return l.worker_id == wid; });
                 if (err) {
                   if (it != leases_.end()) leases_.erase(it);
                   if (spec->retries_left > 0) {
                     --spec->retries_left;
                     spdlog::warn("worker {} at {} was lost ({}); retrying task {}", wid, addr,
                                  err->message, spec->function);
                     shapes_[spec->shape].queue.push_back(spec);
                   } else {
                     fail_object(store_, spec->id, wire::ErrorCode::WORKER_CRASHED,
                          "the worker running task " + spec->function + " (worker " + wid + " at " +
                              addr + ") died: " + err->message);
                   }
                 } else {
                   if (it != leases_.end()) {
                     --it->inflight;
                     it->last_used = std::chrono::steady_clock::now();
                   }
                   complete_from_reply(store_, spec->id, *r);
                 }
                 pump_tasks();
               },
               std::chrono::milliseconds::max());
}

// Leases come from this process's node manager first; one that has no room sends us on to a node
// that has (spillback), which then serves the request itself.
void CoreWorker::request_lease(const std::string& key, const std::string& node_in, bool spilled) {
  auto& sh = shapes_[key];
  if (sh.lease_in_flight && !spilled) return;
  sh.lease_in_flight = true;
  std::string node = node_in.empty() ? head_ : node_in;
  bool have = std::any_of(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.shape == key; });
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto rl = m.env().getBody().initRequestLease();
  rl.setJobId(job_id_);
  // SPREAD asks for one worker at a time, so each may come from another node.
  rl.setCount(sh.spread ? 1 : static_cast<uint32_t>(std::min<size_t>(sh.queue.size(), 64)));
  rl.setNodeId(sh.node_id);
  rl.setSoft(sh.soft);
  rl.setSpread(sh.spread);
  rl.setPlacementGroup(sh.placement_group);
  rl.setBundleIndex(sh.bundle_index);
  rl.setTimeoutMs(spilled ? 2000 : 60000);  // a node that turns out busy answers soon
  rl.setSpilled(spilled);
  rl.setNoWait(!spilled && have);
  set_resources(rl.initResources(static_cast<unsigned>(sh.need.size())), sh.need);
  if (spilled) sh.spill_in_flight = true;
  io_->request(node, rid, m.finish(),
               [this, key, node, spilled](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 auto& sh = shapes_[key];
                 sh.lease_in_flight = false;
                 if (spilled) sh.spill_in_flight = false;
                 if (err && spilled) {
                   pump_tasks();  // that node is unreachable: the local workers take the tasks
                   return;
                 }
                 if (err) {
                   if (err->code == wire::ErrorCode::TIMEOUT) {
                     pump_tasks();  // asks again
                     return;
                   }
                   auto q = std::move(sh.queue);
                   sh.queue.clear();
                   for (auto& s : q)
                     fail_object(store_, s->id, wire::ErrorCode::UNAVAILABLE,
                          "cannot lease workers from " + node + ": " + err->message);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   auto q = std::move(sh.queue);
                   sh.queue.clear();
                   for (auto& s : q) fail_from_reply(store_, s->id, body.getError());
                   return;
                 }
                 auto lg = body.getLeaseGranted();
                 for (auto w : lg.getWorkers()) leases_.push_back(Lease{w.getWorkerId(), w.getAddress(), 0, node, key});
                 if (lg.getWorkers().size() == 0 && lg.getSpillback().size() == 0)
                   sh.saturated_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
                 if (lg.getSpillback().size() && !spilled && !sh.queue.empty()) {
                   request_lease(key, lg.getSpillback(), true);
                   pump_tasks();  // one task per worker granted here, the rest waits for the spill
                   return;
                 }
                 pump_tasks();
               },
               std::chrono::milliseconds(65000));
}

// Workers idle for 2 s whose shape has nothing queued go back to their node managers.
void CoreWorker::return_idle_leases() {
  if (leases_.empty()) return;
  auto now = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<std::string>> by_node;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto sh = shapes_.find(it->shape);
    bool queued = sh != shapes_.end() && !sh->second.queue.empty();
    if (it->inflight == 0 && !queued && now - it->last_used >= std::chrono::seconds(2)) {
      by_node[it->node.empty() ? head_ : it->node].push_back(it->worker_id);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [node, workers] : by_node) {
    uint64_t rid = io_->next_request_id();
    OutMessage m(token_, rid, false);
    auto rl = m.env().getBody().initReturnLease();
    rl.setJobId(job_id_);
    auto ids = rl.initWorkerIds(static_cast<unsigned>(workers.size()));
    for (size_t i = 0; i < workers.size(); ++i) ids.set(static_cast<unsigned>(i), workers[i]);
    io_->request(node, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
                 std::chrono::seconds(10));
  }
}

// ---- actors (actor_submitter.cc) -----------------------------------------------------------------

ActorPtr CoreWorker::create_actor(const std::string& cls, std::vector<Arg> args, const ActorOptions& o) {
  return actors_.create(cls, std::move(args), o);
}
ActorPtr CoreWorker::lookup_actor(const std::string& name, const std::string& cls) { return actors_.lookup(name, cls); }
ActorPtr CoreWorker::actor_from_id(const std::string& id, const std::string& cls) { return actors_.from_id(id, cls); }
Holder CoreWorker::submit_actor_call(const ActorPtr& a, const std::string& method, std::vector<Arg> args) {
  return actors_.call(a, method, std::move(args));
}
void CoreWorker::kill_actor(const ActorPtr& a) { actors_.kill(a); }

// ---- placement groups -------------------------------------------------------------------------

namespace {
void throw_reply_error(wire::Error::Reader e) {
  ErrorInfo info;
  info.code = static_cast<int>(e.getCode());
  info.message = e.getMessage();
  throw_error(info);
}
}  // namespace

bool CoreWorker::create_placement_group(const std::string& id, const std::string& strategy,
                                        const std::vector<std::map<std::string, double>>& bundles,
                                        const std::string& name) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto c = m.env().getBody().initCreatePlacementGroup();
  c.setGroupId(id);
  c.setJobId(job_id_);
  c.setStrategy(strategy);
  c.setName(name);
  auto bs = c.initBundles(static_cast<unsigned>(bundles.size()));
  for (unsigned i = 0; i < bundles.size(); ++i)
    set_resources(bs[i].initResources(static_cast<unsigned>(bundles[i].size())), bundles[i]);
  auto r = io_->call(gcs_, m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
  return body.isPlacementGroupInfo() && std::string(body.getPlacementGroupInfo().getState()) == "CREATED";
}

std::pair<std::string, std::vector<std::string>> CoreWorker::wait_placement_group(const std::string& id,
                                                                                  std::chrono::milliseconds timeout) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto w = m.env().getBody().initWaitPlacementGroup();
  w.setGroupId(id);
  auto ms = std::min<int64_t>(timeout.count(), 24LL * 3600 * 1000);
  w.setTimeoutMs(static_cast<uint32_t>(std::max<int64_t>(0, ms)));
  auto r = io_->call(gcs_, m, rid, std::chrono::milliseconds(ms) + kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
  auto info = body.getPlacementGroupInfo();
  std::vector<std::string> nodes;
  for (auto n : info.getBundleNodes()) nodes.push_back(n);
  return {info.getState(), nodes};
}

void CoreWorker::remove_placement_group(const std::string& id) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setRemovePlacementGroup(id);
  // Like Ray's remove_placement_group, this does not wait: requests this process sends later reach
  // the head after it, so they see the resources freed.
  io_->request(gcs_, rid, m.finish(),
               [id](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (err) spdlog::warn("removing placement group {}: {}", id, err->message);
                 else if (r->env().getBody().isError())
                   spdlog::warn("removing placement group {}: {}", id, describe(r->env().getBody().getError()));
               },
               kControlTimeout);
}

std::pair<std::string, std::string> CoreWorker::control_store() {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setGetControlStore();
  auto r = io_->call(gcs_, m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (!body.isControlStore()) throw Error("the head did not say where its control store is");
  return {body.getControlStore().getAddress(), body.getControlStore().getPassword()};
}

// ---- worker side (task_executor.cc) -------------------------------------------------------------

void CoreWorker::run_worker() {
  executor_ = std::make_unique<TaskExecutor>(io_, ownership_, token_, wcfg_);
  executor_->run();
}

}  // namespace yard::detail
