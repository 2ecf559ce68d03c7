#include "core_worker.h"

#include <cxxabi.h>
#include <fstream>
#include <future>
#include <unistd.h>

#include <boost/fiber/all.hpp>
#include <spdlog/spdlog.h>

#include "process.h"

namespace yard::detail {

namespace {
constexpr int kPipelinePerWorker = 16;
constexpr auto kControlTimeout = std::chrono::seconds(30);
constexpr auto kCreateTimeout = std::chrono::seconds(120);
constexpr auto kHeadOutage = std::chrono::seconds(60);  // how long a lost head is waited for

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  free(d);
  return s;
}

ErrorInfo info_of(int code, const std::string& msg) {
  ErrorInfo e;
  e.code = code;
  e.message = msg;
  return e;
}
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
    if (!serve_objects(in)) reply_error(in, wire::ErrorCode::NOT_FOUND, "a driver serves only its objects");
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
      io_->call(head_, m, rid, std::chrono::seconds(5));
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
  ensure_fetched(id);
  return store_.get(id, timeout);
}

std::vector<size_t> CoreWorker::wait(const std::vector<std::string>& ids, size_t num,
                                     std::chrono::milliseconds t) {
  for (auto& id : ids) ensure_fetched(id);
  return store_.wait(ids, num, t);
}

// ---- ownership --------------------------------------------------------------------------------
//
// The process that creates an object owns it. A ref that leaves the process (inside a value) is
// exported: the owner pins the object until the borrower says it dropped the ref. A borrower
// fetches the value from the owner on first use; if the owner is gone the get fails with a
// message naming the owner, never a hang.

std::pair<std::string, std::string> CoreWorker::export_ref(const Holder& h) {
  if (!h->owner().empty()) {
    // Passing on a borrowed ref: the new borrower gets it from the owner directly. This process
    // keeps its own borrow until its holder goes, so the owner still pins the object meanwhile.
    return {h->id(), h->owner()};
  }
  std::lock_guard<std::mutex> l(own_mu_);
  auto& e = exported_[h->id()];
  e.first = h;
  ++e.second;
  return {h->id(), io_->address()};
}

Holder CoreWorker::import_ref(const std::string& id, const std::string& owner) {
  if (owner == io_->address()) {
    // One of ours came back: use the pinned holder and consume the export.
    std::lock_guard<std::mutex> l(own_mu_);
    auto it = exported_.find(id);
    if (it == exported_.end()) return std::make_shared<ObjectHolder>(id);
    Holder h = it->second.first;
    if (--it->second.second <= 0) exported_.erase(it);
    return h;
  }
  {
    std::lock_guard<std::mutex> l(own_mu_);
    auto& b = borrowed_[id];
    b.owner = owner;
    ++b.holders;
  }
  store_.create(id);
  return std::make_shared<ObjectHolder>(id, owner);
}

void CoreWorker::release(const std::string& id, const std::string& owner) {
  if (owner.empty()) {
    store_.release(id);
    return;
  }
  // Each imported holder is one borrow at the owner; the local entry goes with the last one.
  bool last = false;
  {
    std::lock_guard<std::mutex> l(own_mu_);
    auto it = borrowed_.find(id);
    if (it != borrowed_.end() && --it->second.holders <= 0) {
      borrowed_.erase(it);
      last = true;
    }
  }
  if (last) store_.release(id);
  if (!io_) return;
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setReleaseObject(id);
  io_->request(owner, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
               std::chrono::seconds(10));
}

void CoreWorker::ensure_fetched(const std::string& id) {
  std::string owner;
  {
    std::lock_guard<std::mutex> l(own_mu_);
    auto it = borrowed_.find(id);
    if (it == borrowed_.end() || it->second.fetching) return;
    it->second.fetching = true;
    owner = it->second.owner;
  }
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setGetObject(id);
  io_->request(owner, rid, m.finish(),
               [this, id, owner](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (err) {
                   fail(id, static_cast<int>(wire::ErrorCode::OWNER_DIED),
                        "the owner of object " + id + " (" + owner + ") is gone: " + err->message);
                   return;
                 }
                 complete_from_reply(id, *r);
               },
               std::chrono::milliseconds::max());
}

bool CoreWorker::serve_objects(IoLoop::Incoming& in) {
  auto body = in.msg->env().getBody();
  if (body.isReleaseObject()) {
    {
      std::lock_guard<std::mutex> l(own_mu_);
      auto it = exported_.find(body.getReleaseObject());
      if (it != exported_.end() && --it->second.second <= 0) exported_.erase(it);
    }
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    m.env().getBody().setOk();
    io_->reply(in.routing_id, m.finish());
    return true;
  }
  if (!body.isGetObject()) return false;
  std::string id = body.getGetObject();
  std::string routing = in.routing_id;
  uint64_t req = in.msg->env().getRequestId();
  if (!store_.contains(id)) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "object " + id + " was freed by its owner " + io_->address());
    return true;
  }
  bool same_host = in.msg->same_host();
  store_.on_ready(id, [this, id, routing, req, same_host] {
    auto snap = store_.peek(id);
    OutMessage m(token_, req, true);
    if (same_host) m.allow_shared_memory();
    if (!snap.present) {
      set_error(m.env(), wire::ErrorCode::NOT_FOUND, "object " + id + " was freed by its owner");
    } else if (snap.error) {
      set_error(m.env(), static_cast<wire::ErrorCode>(snap.error->code), snap.error->message,
                snap.error->type, snap.error->location);
    } else {
      m.set_value(m.env().getBody().initTaskReply().initResult(), snap.value);
    }
    io_->reply(routing, m.finish());
  });
  return true;
}

void CoreWorker::fail(const std::string& id, int code, const std::string& msg) {
  store_.set_error(id, info_of(code, msg));
}

void CoreWorker::on_error_reply(const std::string& id, wire::Error::Reader e) {
  ErrorInfo info;
  info.code = static_cast<int>(e.getCode());
  info.type = e.getType();
  info.message = e.getMessage();
  info.location = e.getLocation();
  store_.set_error(id, std::move(info));
}

// Completes an object from a reply: its value, the remote error, or a protocol error.
void CoreWorker::complete_from_reply(const std::string& id, const InMessage& r) {
  auto body = r.env().getBody();
  if (body.isTaskReply()) {
    try {
      store_.set_value(id, r.value(body.getTaskReply().getResult()));
    } catch (const DecodeError& e) {
      fail(id, static_cast<int>(wire::ErrorCode::BAD_REQUEST), e.what());
    }
  } else if (body.isError()) {
    on_error_reply(id, body.getError());
  } else {
    fail(id, static_cast<int>(wire::ErrorCode::INTERNAL), "unexpected reply");
  }
}

std::shared_ptr<TaskSpec> CoreWorker::make_spec(std::string fn, std::vector<Arg> args) {
  auto spec = std::make_shared<TaskSpec>();
  spec->seq = id_seq_.load(std::memory_order_relaxed);
  spec->id = new_id();
  spec->function = std::move(fn);
  spec->args = std::move(args);
  store_.create(spec->id);
  return spec;
}

// Waits (without blocking anyone) for the spec's ObjectRef arguments, then runs on_loop on the
// I/O thread.
void CoreWorker::resolve_then(const std::shared_ptr<TaskSpec>& spec, std::function<void()> on_loop) {
  int refs = 0;
  for (auto& a : spec->args) refs += a.ref ? 1 : 0;
  if (refs == 0) {
    spec->resolved = true;
    io_->post(std::move(on_loop));
    return;
  }
  spec->unresolved.store(refs + 1);
  auto shared = std::make_shared<std::function<void()>>(std::move(on_loop));
  auto done = [this, spec, shared] {
    if (spec->unresolved.fetch_sub(1) == 1) {
      io_->post([spec, shared] {
        spec->resolved = true;
        (*shared)();
      });
    }
  };
  for (auto& a : spec->args)
    if (a.ref) {
      ensure_fetched(a.ref->id());
      store_.on_ready(a.ref->id(), done);
    }
  done();
}

// Copies resolved argument values into the request. False (and the task failed) when an
// argument is an error or is gone.
bool CoreWorker::fill_args(wire::PushTask::Builder b, OutMessage& m, TaskSpec& spec) {
  auto list = b.initArgs(static_cast<unsigned>(spec.args.size()));
  for (size_t i = 0; i < spec.args.size(); ++i) {
    auto& a = spec.args[i];
    Bytes v = a.value;
    if (a.ref) {
      auto snap = store_.peek(a.ref->id());
      if (!snap.present) {
        fail(spec.id, static_cast<int>(wire::ErrorCode::NOT_FOUND),
             "argument " + std::to_string(i) + " refers to object " + a.ref->id() +
                 ", which this process does not own");
        return false;
      }
      if (snap.error) {
        store_.set_error(spec.id, *snap.error);  // the error propagates to the dependent call
        return false;
      }
      v = snap.value;
    }
    m.set_value(list[static_cast<unsigned>(i)], v);
  }
  return true;
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
  resolve_then(spec, [this, spec, need, o] {
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
  if (!fill_args(pt, m, *spec)) return;
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
                     fail(spec->id, static_cast<int>(wire::ErrorCode::WORKER_CRASHED),
                          "the worker running task " + spec->function + " (worker " + wid + " at " +
                              addr + ") died: " + err->message);
                   }
                 } else {
                   if (it != leases_.end()) {
                     --it->inflight;
                     it->last_used = std::chrono::steady_clock::now();
                   }
                   complete_from_reply(spec->id, *r);
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
                     fail(s->id, static_cast<int>(wire::ErrorCode::UNAVAILABLE),
                          "cannot lease workers from " + node + ": " + err->message);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   auto q = std::move(sh.queue);
                   sh.queue.clear();
                   for (auto& s : q) on_error_reply(s->id, body.getError());
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

// ---- actors -----------------------------------------------------------------------------------

ActorPtr CoreWorker::create_actor(const std::string& cls, std::vector<Arg> args, const ActorOptions& o) {
  auto a = std::make_shared<ActorState>();
  a->id = "actor-" + random_hex(8);
  a->class_name = cls;
  a->name = o.name;
  a->max_concurrency = std::max(1, o.max_concurrency);
  a->created_here = true;
  auto spec = make_spec(cls, std::move(args));
  spec->actor = a;
  spec->is_creation = true;
  spec->actor_options = o;
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  resolve_then(spec, [this, spec, holder] { send_creation(spec); });
  return a;
}

void CoreWorker::send_creation(const std::shared_ptr<TaskSpec>& spec) {
  auto a = spec->actor;
  if (a->kill_requested) {
    actor_dead(a, "killed by yard::kill before it started");
    return;
  }
  a->creation_sent = true;
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto ca = m.env().getBody().initCreateActor();
  ca.setActorId(a->id);
  ca.setJobId(job_id_);
  ca.setClassName(a->class_name);
  ca.setName(a->name);
  ca.setMaxConcurrency(static_cast<uint32_t>(a->max_concurrency));
  const auto& o = spec->actor_options;
  ca.setMaxRestarts(o.max_restarts);
  ca.setStrategy(o.strategy);
  ca.setNodeId(o.node_id);
  ca.setSoft(o.soft);
  ca.setCallerNode(node_id_);
  ca.setPlacementGroup(o.placement_group);
  ca.setBundleIndex(o.bundle_index);
  ca.setDetached(o.detached);
  set_resources(ca.initResources(static_cast<unsigned>(o.resources.size())), o.resources);
  auto args = ca.initArgs(static_cast<unsigned>(spec->args.size()));
  for (size_t j = 0; j < spec->args.size(); ++j) {
    auto& arg = spec->args[j];
    Bytes v = arg.value;
    if (arg.ref) {
      auto snap = store_.peek(arg.ref->id());
      if (!snap.present || snap.error) {
        actor_dead(a, "constructor argument " + std::to_string(j) + " is not available" +
                          (snap.error ? ": " + snap.error->message : std::string()));
        return;
      }
      v = snap.value;
    }
    m.set_value(args[static_cast<unsigned>(j)], v);
  }
  io_->request(gcs_, rid, m.finish(),
               [this, a, spec](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 // The head may be restarting: send the creation again (the head knows the actor
                 // by its id, so a creation it already has is not repeated).
                 if (retry_through_head_outage(a, r.get(), err, [this, spec] { send_creation(spec); })) return;
                 if (err) {
                   actor_dead(a, "creating the actor failed: " + err->message);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   auto e = body.getError();
                   a->state = ActorState::State::kDead;
                   a->death_cause = e.getMessage();
                   if (e.getCode() == wire::ErrorCode::INFEASIBLE) {
                     auto q = std::move(a->queue);
                     a->queue.clear();
                     for (auto& s : q) on_error_reply(s->id, e);
                     return;
                   }
                   actor_dead(a, std::string("creating the actor failed: ") + e.getMessage().cStr());
                   return;
                 }
                 a->address = body.getActorInfo().getAddress();
                 a->state = ActorState::State::kAlive;
                 flush_actor(a);
               },
               kCreateTimeout);
}

ActorPtr CoreWorker::lookup_actor(const std::string& name, const std::string& cls) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().initGetActor().setName(name);
  auto r = io_->call(gcs_, m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) {
    ErrorInfo e;
    e.code = static_cast<int>(body.getError().getCode());
    e.message = body.getError().getMessage();
    throw_error(e);
  }
  auto info = body.getActorInfo();
  if (std::string(info.getClassName()) != cls)
    throw NotFoundError("actor '" + name + "' is a " + std::string(info.getClassName()) + ", not a " + cls);
  if (std::string(info.getState()) == "DEAD")
    throw ActorDied("actor '" + name + "' is dead: " + std::string(info.getDeathCause()));
  auto a = std::make_shared<ActorState>();
  a->id = info.getActorId();
  a->class_name = cls;
  a->name = name;
  if (std::string(info.getState()) == "ALIVE") {
    a->address = info.getAddress();
    a->state = ActorState::State::kAlive;
  } else {
    a->needs_lookup = true;  // restarting: found on first use
  }
  return a;
}

ActorPtr CoreWorker::actor_from_id(const std::string& id, const std::string& cls) {
  auto a = std::make_shared<ActorState>();
  a->id = id;
  a->class_name = cls;
  a->needs_lookup = true;
  return a;
}

void CoreWorker::lookup_address(const ActorPtr& a) {
  if (!a->needs_lookup || a->lookup_in_flight) return;
  a->lookup_in_flight = true;
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto ga = m.env().getBody().initGetActor();
  ga.setActorId(a->id);
  ga.setLostAddress(a->lost_address);
  io_->request(gcs_, rid, m.finish(),
               [this, a](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 a->lookup_in_flight = false;
                 if (retry_through_head_outage(a, r.get(), err, [this, a] { lookup_address(a); })) return;
                 a->needs_lookup = false;
                 if (err) {
                   actor_dead(a, "cannot look up where it lives: " + err->message);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   actor_dead(a, body.getError().getMessage());
                   return;
                 }
                 auto info = body.getActorInfo();
                 if (std::string(info.getState()) != "ALIVE") {
                   actor_dead(a, info.getDeathCause());
                   return;
                 }
                 a->address = info.getAddress();
                 a->state = ActorState::State::kAlive;
                 auto lost = std::move(a->lost_calls);
                 a->lost_calls.clear();
                 for (auto& s : lost)
                   fail(s->id, static_cast<int>(wire::ErrorCode::ACTOR_RESTARTING),
                        "actor " + a->id + " (" + a->class_name + ") lost its process while running " + s->function +
                            " and was restarted (restart " + std::to_string(info.getNumRestarts()) + ", node " +
                            std::string(info.getNodeId()) + "); the call may or may not have run: " +
                            std::string(info.getDeathCause()));
                 flush_actor(a);
               },
               kCreateTimeout);
}

Holder CoreWorker::submit_actor_call(const ActorPtr& a, const std::string& method, std::vector<Arg> args) {
  auto spec = make_spec(method, std::move(args));
  spec->actor = a;
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  // Queue first (keeps submission order), then let resolution release it.
  io_->post([this, a, spec] {
    if (a->state == ActorState::State::kDead) {
      fail(spec->id, static_cast<int>(wire::ErrorCode::ACTOR_DIED),
           "actor " + a->id + " (" + a->class_name + ") is dead: " + a->death_cause);
      return;
    }
    a->queue.push_back(spec);
    if (a->needs_lookup) lookup_address(a);
  });
  resolve_then(spec, [this, a] { flush_actor(a); });
  return holder;
}

void CoreWorker::flush_actor(const ActorPtr& a) {
  if (a->state != ActorState::State::kAlive) return;
  while (!a->queue.empty() && a->queue.front()->resolved) {
    auto spec = a->queue.front();
    a->queue.pop_front();
    send_actor_call(a, spec);
  }
}

void CoreWorker::send_actor_call(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto pt = m.env().getBody().initPushTask();
  pt.setTaskId(spec->id);
  pt.setFunction(spec->function);
  pt.setActorId(a->id);
  if (!fill_args(pt, m, *spec)) return;
  std::string address = a->address;
  io_->request(address, rid, m.finish(),
               [this, a, spec, address](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (err) {
                   actor_connection_lost(a, spec, address, err->message,
                                         err->code != wire::ErrorCode::UNAVAILABLE);
                   return;
                 }
                 complete_from_reply(spec->id, *r);
               },
               std::chrono::milliseconds::max());
}

// The connection to the actor's worker broke under a call: the head knows whether the actor is
// dead or coming back. Calls not yet sent wait for the answer; the broken ones learn it then.
void CoreWorker::actor_connection_lost(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec,
                                       const std::string& address, const std::string& why, bool delivered) {
  if (a->state == ActorState::State::kDead) {
    fail(spec->id, static_cast<int>(wire::ErrorCode::ACTOR_DIED),
         "actor " + a->id + " (" + a->class_name + ") died while running " + spec->function + ": " + a->death_cause);
    return;
  }
  if (!delivered) {
    // The connection was refused: the call never left this process. It goes back in its place in
    // the queue and runs wherever the actor is now.
    auto pos = std::find_if(a->queue.begin(), a->queue.end(), [&](auto& s) { return s->seq > spec->seq; });
    a->queue.insert(pos, spec);
    if (a->state == ActorState::State::kAlive && a->address != address) {
      flush_actor(a);
      return;
    }
  } else if (a->state == ActorState::State::kAlive && a->address != address) {
    // Already known to have restarted elsewhere.
    fail(spec->id, static_cast<int>(wire::ErrorCode::ACTOR_RESTARTING),
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

void CoreWorker::actor_dead(const ActorPtr& a, const std::string& cause) {
  if (a->state != ActorState::State::kDead || a->death_cause.empty()) a->death_cause = cause;
  a->state = ActorState::State::kDead;
  auto q = std::move(a->queue);
  a->queue.clear();
  for (auto& s : a->lost_calls)
    fail(s->id, static_cast<int>(wire::ErrorCode::ACTOR_DIED),
         "actor " + a->id + " (" + a->class_name + ") died while running " + s->function + ": " + a->death_cause);
  a->lost_calls.clear();
  for (auto& s : q)
    fail(s->id, static_cast<int>(wire::ErrorCode::ACTOR_DIED),
         "actor " + a->id + " (" + a->class_name + ") is dead: " + a->death_cause);
}

void CoreWorker::kill_actor(const ActorPtr& a) {
  // Sequenced on the I/O thread after the creation request, so a kill never overtakes it.
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto fut = done->get_future();
  io_->post([this, a, done] {
    a->kill_requested = true;
    if (a->created_here && !a->creation_sent) {
      actor_dead(a, "killed by yard::kill before it started");
      done->set_value(std::nullopt);
      return;
    }
    uint64_t rid = io_->next_request_id();
    OutMessage m(token_, rid, false);
    m.env().getBody().initKillActor().setActorId(a->id);
    io_->request(gcs_, rid, m.finish(),
                 [this, a, done](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                   actor_dead(a, "killed by yard::kill");
                   if (err) return done->set_value(err->message);
                   auto body = r->env().getBody();
                   if (body.isError() && body.getError().getCode() != wire::ErrorCode::NOT_FOUND)
                     return done->set_value(describe(body.getError()));
                   done->set_value(std::nullopt);
                 },
                 kControlTimeout);
  });
  if (fut.wait_for(kControlTimeout + std::chrono::seconds(5)) != std::future_status::ready)
    throw TimeoutError("killing actor " + a->id + ": no answer from " + gcs_);
  auto err = fut.get();
  if (err) throw Error("killing actor " + a->id + ": " + *err);
}

// A request to the head that failed because the head is away (lost connection, or "unavailable"
// while a new head starts) is sent again in 200 ms, for up to a minute. True when it will be.
bool CoreWorker::retry_through_head_outage(const ActorPtr& a, const InMessage* r, const std::optional<LocalError>& err,
                                           std::function<void()> again) {
  bool away = err ? err->code != wire::ErrorCode::TIMEOUT
                  : (r->env().getBody().isError() &&
                     r->env().getBody().getError().getCode() == wire::ErrorCode::UNAVAILABLE);
  auto now = std::chrono::steady_clock::now();
  if (away) {
    if (a->lookup_since == std::chrono::steady_clock::time_point{}) a->lookup_since = now;
    if (now - a->lookup_since < kHeadOutage) {
      io_->after(std::chrono::milliseconds(200), std::move(again));
      return true;
    }
  }
  a->lookup_since = {};
  return false;
}

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

// ---- worker side ------------------------------------------------------------------------------

struct CoreWorker::Executor {
  boost::fibers::buffered_channel<std::shared_ptr<IoLoop::Incoming>> channel{4096};
  std::shared_ptr<void> actor;
  const ActorClass* cls = nullptr;
  int max_concurrency = 1;
  boost::fibers::mutex mu;
  boost::fibers::condition_variable cv;
  int running = 0;
  std::string location_suffix;
};

void CoreWorker::handle_request(IoLoop::Incoming in) {
  if (serve_objects(in)) return;
  auto body = in.msg->env().getBody();
  switch (body.which()) {
    case wire::Envelope::Body::PING: {
      OutMessage m(token_, in.msg->env().getRequestId(), true);
      m.env().getBody().setOk();
      io_->reply(in.routing_id, m.finish());
      return;
    }
    case wire::Envelope::Body::PUSH_TASK:
    case wire::Envelope::Body::INSTANTIATE_ACTOR:
    case wire::Envelope::Body::SHUTDOWN: {
      auto item = std::make_shared<IoLoop::Incoming>(std::move(in));
      exec_->channel.push(std::move(item));
      return;
    }
    default:
      reply_error(in, wire::ErrorCode::BAD_REQUEST, "a worker does not serve this request");
  }
}

void CoreWorker::reply_error(IoLoop::Incoming& in, wire::ErrorCode code, const std::string& msg,
                             const std::string& type, const std::string& location) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  set_error(m.env(), code, msg, type, location);
  io_->reply(in.routing_id, m.finish());
}

void CoreWorker::run_worker() {
  exec_ = std::make_unique<Executor>();
  exec_->location_suffix = " on worker " + wcfg_.worker_id + " (pid " + std::to_string(getpid()) +
                           ", host " + hostname() + ")";
  io_ = std::make_unique<IoLoop>(wcfg_.bind_host.empty() ? "127.0.0.1" : wcfg_.bind_host, 0, token_,
                                 [this](IoLoop::Incoming in) { handle_request(std::move(in)); });
  {
    uint64_t rid = io_->next_request_id();
    OutMessage m(token_, rid, false);
    auto rw = m.env().getBody().initRegisterWorker();
    rw.setWorkerId(wcfg_.worker_id);
    rw.setAddress(io_->address());
    rw.setPid(getpid());
    try {
      auto r = io_->call(head_, m, rid, kControlTimeout);
      if (r->env().getBody().isError()) {
        spdlog::error("node manager refused worker {}: {}", wcfg_.worker_id,
                      describe(r->env().getBody().getError()));
        _exit(3);
      }
    } catch (const std::exception& e) {
      spdlog::error("worker {} cannot register with {}: {}", wcfg_.worker_id, head_, e.what());
      _exit(3);
    }
  }
  std::shared_ptr<IoLoop::Incoming> item;
  while (exec_->channel.pop(item) == boost::fibers::channel_op_status::success) {
    auto which = item->msg->env().getBody().which();
    if (which == wire::Envelope::Body::SHUTDOWN) {
      OutMessage m(token_, item->msg->env().getRequestId(), true);
      m.env().getBody().setOk();
      io_->reply(item->routing_id, m.finish());
      break;
    }
    if (which == wire::Envelope::Body::INSTANTIATE_ACTOR) {
      instantiate(*item);
      continue;
    }
    if (exec_->actor && exec_->max_concurrency > 1) {
      // Run concurrently on a fiber, at most max_concurrency at once.
      {
        std::unique_lock<boost::fibers::mutex> l(exec_->mu);
        exec_->cv.wait(l, [&] { return exec_->running < exec_->max_concurrency; });
        ++exec_->running;
      }
      boost::fibers::fiber([this, item] {
        execute(*item);
        std::unique_lock<boost::fibers::mutex> l(exec_->mu);
        --exec_->running;
        exec_->cv.notify_all();
      }).detach();
    } else {
      execute(*item);
    }
    item.reset();
  }
  io_->stop();  // flushes nothing more; replies already handed to the loop were sent
  _exit(0);
}

void CoreWorker::instantiate(IoLoop::Incoming& in) {
  auto ca = in.msg->env().getBody().getInstantiateActor();
  std::string cls_name = ca.getClassName();
  const auto* cls = Registry::global().actor_class(cls_name);
  if (!cls) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "actor class " + cls_name + " is not registered in " + self_exe());
    return;
  }
  try {
    std::vector<Bytes> args;
    for (auto v : ca.getArgs()) args.push_back(in.msg->value(v));
    exec_->actor = cls->factory(args);
    exec_->cls = cls;
    exec_->max_concurrency = std::max<int>(1, static_cast<int>(ca.getMaxConcurrency()));
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::TASK_ERROR,
                "the constructor of " + cls_name + " threw " + demangle(typeid(e).name()) + ": " + e.what(),
                demangle(typeid(e).name()), cls_name + "::" + cls_name + exec_->location_suffix);
    return;
  }
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setOk();
  io_->reply(in.routing_id, m.finish());
}

void CoreWorker::execute(IoLoop::Incoming& in) {
  auto pt = in.msg->env().getBody().getPushTask();
  std::string fn = pt.getFunction();
  bool is_actor = pt.getActorId().size() > 0;
  std::string where = (is_actor && exec_->cls ? exec_->cls->name + "::" : std::string()) + fn +
                      exec_->location_suffix;
  Bytes result;
  try {
    std::vector<Bytes> args;
    args.reserve(pt.getArgs().size());
    for (auto v : pt.getArgs()) args.push_back(in.msg->value(v));
    if (is_actor) {
      if (!exec_->actor) {
        reply_error(in, wire::ErrorCode::ACTOR_DIED, "this worker hosts no actor", {}, where);
        return;
      }
      auto it = exec_->cls->methods.find(fn);
      if (it == exec_->cls->methods.end()) {
        reply_error(in, wire::ErrorCode::NOT_FOUND, "actor class " + exec_->cls->name + " has no method " + fn, {}, where);
        return;
      }
      result = it->second(exec_->actor.get(), args);
    } else {
      const auto* inv = Registry::global().function(fn);
      if (!inv) {
        reply_error(in, wire::ErrorCode::NOT_FOUND, "function " + fn + " is not registered in " + self_exe(), {}, where);
        return;
      }
      result = (*inv)(args);
    }
  } catch (const RemoteError& e) {
    // A nested remote failure keeps its original type and place.
    reply_error(in, wire::ErrorCode::TASK_ERROR, e.remote_message(), e.remote_type(), e.location() + " <- " + where);
    return;
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::TASK_ERROR, e.what(), demangle(typeid(e).name()), where);
    return;
  } catch (...) {
    reply_error(in, wire::ErrorCode::TASK_ERROR, "a non-standard exception was thrown", "unknown", where);
    return;
  }
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  if (in.msg->same_host()) m.allow_shared_memory();
  m.set_value(m.env().getBody().initTaskReply().initResult(), result);
  io_->reply(in.routing_id, m.finish());
}

}  // namespace yard::detail
