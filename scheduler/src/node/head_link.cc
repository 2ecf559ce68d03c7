// The head told what happens here: a hosted actor lost, a job ended.
#include "node/node_manager.h"

#include <signal.h>

#include <spdlog/spdlog.h>

#include "yard/errors.h"

namespace yard::sched {

using namespace detail;

void NodeManager::actor_lost(const std::string& aid, const std::string& cause) {
  tell_head(
      [this, aid, cause](wire::Envelope::Builder env) {
        auto al = env.getBody().initActorLost();
        al.setActorId(aid);
        al.setCause(cause);
        al.setNodeId(node_id_);
      },
      "actor " + aid + " was lost");
}

void NodeManager::tell_head(std::function<void(wire::Envelope::Builder)> fill, std::string what, int attempt,
                            std::function<void()> done) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  fill(m.env());
  io_->request(o_.join_address, rid, m.finish(),
               [this, fill, what, attempt, done](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 bool again = err || (r->env().getBody().isError() &&
                                      r->env().getBody().getError().getCode() == wire::ErrorCode::UNAVAILABLE);
                 if (!again) {
                   if (r->env().getBody().isError())
                     spdlog::error("the head refused to hear that {}: {}", what,
                                   std::string(r->env().getBody().getError().getMessage()));
                   if (done) done();
                   return;
                 }
                 // The head may be restarting: keep telling it for about a minute.
                 if (attempt < 120) {
                   io_->after(std::chrono::milliseconds(500),
                              [this, fill, what, attempt, done] { tell_head(fill, what, attempt + 1, done); });
                 } else {
                   spdlog::error("cannot tell the head that {}: {}", what, err ? err->message : "unavailable");
                   if (done) done();
                 }
               },
               std::chrono::seconds(10));
}

void NodeManager::follow_head() {
  auto a = tables_->heads.active();
  if (a.epoch < head_epoch_ || a.address.empty()) return;
  head_epoch_ = a.epoch;
  if (a.address == o_.join_address) return;
  spdlog::warn("the cluster's head is now at {} (epoch {}; it was at {})", a.address, a.epoch, o_.join_address);
  o_.join_address = a.address;
  workers_.set_env("YARD_HEAD_ADDRESS", a.address);
  if (jobs_) jobs_->head_moved(a.address);
}

bool NodeManager::from_stale_head(const Incoming& in) {
  uint64_t e = in.msg->env().getHeadEpoch();
  if (e > head_epoch_) {
    // A head that took over before this node's heartbeat said so: where it is, before its
    // request is acted on (the request may need the head: a blob, a record to report).
    try {
      follow_head();
    } catch (const std::exception& ex) {
      spdlog::warn("reading the cluster's active head: {}", ex.what());
    }
    head_epoch_ = std::max(head_epoch_, e);
    return false;
  }
  if (e == 0 || e == head_epoch_) return false;
  spdlog::warn("refused a request from a head of epoch {}: the cluster's head is of epoch {} now", e, head_epoch_);
  reply_.error(in, wire::ErrorCode::STALE_EPOCH,
               "node " + node_id_ + " obeys the head of epoch " + std::to_string(head_epoch_) +
                   ", not one of epoch " + std::to_string(e));
  return true;
}

}  // namespace yard::sched
