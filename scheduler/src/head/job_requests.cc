// Jobs at the head: registration, the job table, and requests about jobs (head/job_requests.h).
#include "head/job_requests.h"

#include <signal.h>

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

std::pair<std::string, std::string> JobRequests::driver_node(const Res& needs) {
  if (!nodes_->find(head_node_)) nodes_->refresh();  // it joined a moment ago
  auto* h = nodes_->find(head_node_);
  if (h && h->alive && fits(needs, h->total)) return {h->id, h->address};
  // Else the live node that has them, with the most of them free (the first in its list when
  // nothing is asked). None in the view: read again, a node that has them may have just joined.
  auto pick = [&]() -> const ClusterNodes::Node* {
    const ClusterNodes::Node* best = nullptr;
    double best_free = -1;
    for (auto& [id, n] : nodes_->all()) {
      if (!n.alive || !fits(needs, n.total)) continue;
      if (needs.empty()) return &n;
      double free = 0;
      for (auto& [k, v] : needs) free += n.avail.count(k) ? n.avail.at(k) / std::max(v, 1e-9) : 0;
      if (free > best_free) best = &n, best_free = free;
    }
    return best;
  };
  const ClusterNodes::Node* best = pick();
  if (!best && !needs.empty()) {
    nodes_->refresh();
    best = pick();
  }
  if (best) return {best->id, best->address};
  return {};
}

Res entrypoint_resources(const nlohmann::json& sub) {
  auto e = sub.find("entrypoint_resources");  // written by submission_of
  return e != sub.end() && e->is_object() ? e->get<Res>() : Res{};
}

std::string no_driver_node(const Res& needs) {
  return needs.empty() ? "no node is alive to run the job's program"
                       : "no live node has the job's entrypoint resources " + res_text(needs);
}

void JobRequests::on_register_job(Incoming& in) {
  auto rj = in.msg->env().getBody().getRegisterJob();
  std::string sub = rj.getSubmissionId();
  Job* j = sub.empty() ? nullptr : jobs_->find(sub);
  auto [node, address] = driver_node();
  if (!j) j = &jobs_->create(std::string(rj.getBinary()) + " (driver pid " + std::to_string(rj.getPid()) + ")", node);
  j->binary = rj.getBinary();
  j->digest = rj.getBinaryDigest();
  j->cwd = rj.getCwd();
  j->driver_pid = rj.getPid();
  j->ns = rj.getNamespace();
  if (j->ns.empty()) j->ns = j->id;  // the job's own: no other job sees its names
  j->detached_actors = rj.getDetachedActors();
  jobs_->save(*j);
  spdlog::info("job {} registered: driver pid {}, binary {}, leases from node {}", j->id, j->driver_pid, j->binary, node);
  double cpus = 0;
  if (auto* n = nodes_->find(node); n && n->total.count("CPU")) cpus = n->total.at("CPU");
  if (!address.empty()) {
    // Warm the pool: workers start there while the driver gets going.
    uint64_t rid = io_.next_request_id();
    OutMessage w(token_, rid, false);
    auto wp = w.env().getBody().initWarmPool();
    wp.setJobId(j->id);
    wp.setCount(2);
    notify(io_, address, w.finish(), rid);
  }
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto jr = m.env().getBody().initJobRegistered();
  jr.setJobId(j->id);
  jr.setNodeId(node);
  jr.setNodeAddress(address);
  jr.setNumCpus(cpus);
  io_.reply(in.routing_id, m.finish());
}

// A driver says its job is done, or the node that ran a submitted job's program says it exited
// (its record then has the end).
void JobRequests::on_finish_job(Incoming& in) {
  if (Job* found = jobs_->find(in.msg->env().getBody().getFinishJob())) {
    auto& j = *found;
    if (!j.submitted) {
      end_job(j, store::JobStatus::kSucceeded);
    } else if (auto rec = tables_->jobs.get(j.id); rec && rec->end > 0) {
      if (rec->status != store::JobStatus::kSucceeded && queue_->requeues_on_exit(j.id)) {
        requeue_job(j);
        return reply_.ok(in);
      }
      static_cast<store::JobRecord&>(j) = std::move(*rec);
      end_job(j, j.status);
    } else {
      end_job(j, std::nullopt);
    }
  }
  reply_.ok(in);
}

// A submitted job's program died and its node runs it again (`yard submit --max-retries`): what
// the last attempt made goes first (its actors, placement groups), as at a job's end, but the job
// goes on; its workers stay for the next attempt, which is the same program.
void JobRequests::on_restart_job(Incoming& in) {
  std::string id = in.msg->env().getBody().getRestartJob();
  if (Job* j = jobs_->find(id); j && !j->ended) {
    actors_->job_ended(id);
    groups_->job_ended(id);
    j->driver_pid = 0;
    spdlog::info("job {}: its program died and runs again; the last attempt's actors and placement groups are gone", id);
    publish(nlohmann::json{{"type", "job_restarted"}, {"job_id", id}, {"time", unix_time()}}.dump());
  }
  reply_.ok(in);
}

// A job preempted at its MIN exited (after its checkpoint, or stopped at its deadline): what the
// run made goes (its actors, placement groups, workers on every node) and it waits in the queue
// again; admitted again, it runs with the next attempt number and resumes from its checkpoint.
void JobRequests::requeue_job(Job& j) {
  actors_->job_ended(j.id);
  groups_->job_ended(j.id);
  tell_nodes_job_ended(j.id);
  queue_->requeue(j.id);
  jobs_->reload(j.id);
}

void JobRequests::tell_nodes_job_ended(const std::string& id) {
  for (auto& [node, n] : nodes_->all()) {
    if (!n.alive || n.address.empty()) continue;
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    m.env().getBody().setJobEnded(id);
    notify(io_, n.address, m.finish(), rid);
  }
}

void JobRequests::end_job(Job& j, std::optional<store::JobStatus> status) {
  if (j.ended) return;
  if (status) {
    if (j.status != store::JobStatus::kStopped) j.status = *status;
    j.ended = true;
    if (!j.submitted) {  // a submitted job's record is its node's to end
      j.end = unix_time();
      jobs_->save(j);
    }
  }
  if (status) queue_->ended(j.id);
  // Its actors and placement groups go with the driver; detached actors stay.
  actors_->job_ended(j.id);
  groups_->job_ended(j.id);
  j.driver_pid = 0;
  // Its workers stop on every node now (nodes also notice from the record).
  tell_nodes_job_ended(j.id);
  spdlog::info("job {} ended{}", j.id, status ? std::string(": ") + store::name(j.status) : " (its driver is done)");
}

void JobRequests::on_submit_job(Incoming& in) {
  if (in.msg->env().getBody().getSubmitJob().getShape().getMaxReplicas() > 0) return submit_queued(in);
  auto submission = submission_of(in.msg->env().getBody().getSubmitJob());
  Res needs = entrypoint_resources(submission);
  auto [node, address] = driver_node(needs);
  if (address.empty()) {
    reply_.error(in, wire::ErrorCode::UNAVAILABLE, no_driver_node(needs) + "; retry");
    return;
  }
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setSubmitJob(in.msg->env().getBody().getSubmitJob());
  // Kept, so that the program runs again elsewhere when its node is lost (node_lost).
  std::string sub = submission.dump();
  forward(in, address, m.finish(), rid, [this, sub](const InMessage& r) {
    if (!r.env().getBody().isJobInfo()) return;
    std::string id = r.env().getBody().getJobInfo().getJobId();
    jobs_->find(id);
    tables_->jobs.set_submission(id, sub);
  });
}

void JobRequests::on_stop_job(Incoming& in, const std::string& id) {
  if (auto* q = queue_->find(id); q && q->queue->admitted_at == 0) {
    if (auto why = queue_->control(id, JobAction::kCancel, 0)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *why);
    jobs_->reload(id);
    return reply_.ok(in);
  }
  if (queue_->find(id)) (void)queue_->control(id, JobAction::kCancel, 0);  // running: not queued again
  Job* j = jobs_->find(id);
  if (!j) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + id);
    return;
  }
  if (j->ended) return reply_.ok(in);
  if (j->submitted) {
    std::string address = nodes_->address(j->node);
    if (address.empty()) {
      reply_.error(in, wire::ErrorCode::UNAVAILABLE, "node " + j->node + ", which runs job " + id + ", is not reachable");
      return;
    }
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    m.env().getBody().setStopJob(id);
    forward(in, address, m.finish(), rid);
    return;
  }
  j->status = store::JobStatus::kStopped;
  if (j->driver_pid) kill(static_cast<pid_t>(j->driver_pid), SIGTERM);
  jobs_->save(*j);
  spdlog::info("job {} stop requested", id);
  reply_.ok(in);
}

void JobRequests::forward(Incoming& in, const std::string& address, Frames request, uint64_t rid,
                          std::function<void(const InMessage&)> then) {
  std::string routing = in.routing_id;
  uint64_t req = in.msg->env().getRequestId();
  io_.request(address, rid, std::move(request),
               [this, routing, req, address, then](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (err) {
                   reply_.error(routing, req, wire::ErrorCode::UNAVAILABLE,
                                "the node manager at " + address + " did not answer: " + err->message);
                   return;
                 }
                 if (then) then(*r);
                 reply_.relay(routing, req, *r);
               },
               std::chrono::seconds(30));
}


void JobRequests::on_list_jobs(Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  std::vector<store::JobRecord> jobs;
  for (auto& id : tables_->jobs.ids())
    if (auto j = tables_->jobs.get(id)) jobs.push_back(std::move(*j));
  auto list = m.env().getBody().initJobList(static_cast<unsigned>(jobs.size()));
  for (unsigned i = 0; i < jobs.size(); ++i) {
    list[i].setJobId(jobs[i].id);
    list[i].setEntrypoint(jobs[i].entrypoint);
    list[i].setStatus(store::name(jobs[i].status));
    list[i].setExitCode(jobs[i].exit_code);
    list[i].setStartTime(jobs[i].start);
    list[i].setEndTime(jobs[i].end);
    list[i].setLogPath(jobs[i].log_path);
    list[i].setNodeId(jobs[i].node);
    if (auto& q = jobs[i].queue) {
      list[i].setShaped(true);
      list[i].setTeam(q->team);
      list[i].setPriority(q->priority);
      list[i].setReplicas(q->admitted_at > 0 ? q->allotted() : 0);
      list[i].setPreempted(q->preempted);
      list[i].setMinReplicas(q->shape.min);
      list[i].setMaxReplicas(q->shape.max);
      list[i].setQueuedAt(q->queued_at);
      if (auto w = queue_->waiting(jobs[i].id)) {
        list[i].setWaitReason(policy::name(w->why.reason));
        list[i].setWaitDetail(w->why.detail);
      }
    }
  }
  io_.reply(in.routing_id, m.finish());
}

void JobRequests::on_job_logs(Incoming& in) {
  auto jl = in.msg->env().getBody().getJobLogs();
  std::string id = jl.getJobId();
  auto rec = tables_->jobs.get(id);
  if (!rec) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + id);
    return;
  }
  std::string data;
  uint64_t off = jl.getOffset();
  size_t max = std::min<uint32_t>(jl.getMaxBytes() ? jl.getMaxBytes() : 1 << 20, 4 << 20);
  uint64_t size = 0;
  // The copy in the control store holds every run's output, wherever it ran; a log the store
  // has no copy of is read where its node wrote it, when that is on this machine.
  auto kept = tables_->jobs.log(id, off, max);
  std::ifstream in_f;
  if (!kept.kept && !rec->log_path.empty()) in_f.open(rec->log_path, std::ios::binary);
  if (kept.kept) {
    size = kept.size;
    off = kept.from;
    data = std::move(kept.data);
  } else if (in_f) {
    in_f.seekg(0, std::ios::end);
    size = static_cast<uint64_t>(in_f.tellg());
    if (off < size) {
      in_f.seekg(static_cast<std::streamoff>(off));
      data.resize(std::min<uint64_t>(max, size - off));
      in_f.read(data.data(), static_cast<std::streamsize>(data.size()));
      data.resize(static_cast<size_t>(in_f.gcount()));
    }
  }
  // A stopped job has ended only once its process is gone and its exit code is known: its end
  // time is set then.
  // A preempted job whose program exited is queued again, not ended: its log goes on.
  bool ended = rec->end > 0 && !queue_->requeues_on_exit(id);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto r = m.env().getBody().initJobLogsReply();
  r.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data()), data.size()));
  r.setNextOffset(off + data.size());
  r.setFinished(ended && off + data.size() >= size);
  r.setExitCode(rec->exit_code);
  io_.reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
