// The head's lease (head_lease.h): a standby waiting for it, the active head renewing it, and a
// head that lost it stepping down.
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/credentials.h"
#include "common/join.h"
#include "head/head_service.h"
#include "yard/internal/session.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

namespace {
// The session directory the store's servers were recorded in, when it is on this machine.
std::string local_servers_dir(const std::string& session_dir) {
  std::error_code ec;
  return !session_dir.empty() && fs::exists(session_dir + "/redis.pids", ec) ? session_dir : std::string();
}
}  // namespace

std::optional<HeadService::Takeover> HeadService::wait_as_standby() {
  auto access = ask_control_store(io_, o_.standby_of, token_);
  Takeover t;
  t.redis_address = access.address;
  t.redis_password = access.password;
  t.redis_tls_cert = access.redis_tls_cert;
  redis_ = std::make_unique<Redis>(sys::RedisEndpoint::parse(t.redis_address), t.redis_password,
                                   std::chrono::seconds(3));
  store::Tables tables(*redis_);
  // The team key comes from the active head's session when it is on this machine (elsewhere it
  // is copied there: docs/operations.md).
  auto cluster = tables.cluster.fields();
  std::string active_session = cluster.count("session_dir") ? cluster["session_dir"] : "";
  if (!o_.team_key_file.empty()) {
    team_key_ = given_team_key(o_.team_key_file);  // written into the session already
  } else if (std::ifstream f(team_key_file(active_session)); f) {
    team_key_ = read_token(team_key_file(active_session));
    write_private_file(team_key_file(o_.session_dir), team_key_);
  } else if (!fs::exists(team_key_file(o_.session_dir))) {
    spdlog::warn("the active head's team key ({}) is not on this machine: give it with --team-key FILE, or team "
                 "credentials given before will be refused after a takeover",
                 team_key_file(active_session));
  }
  lease_ = std::make_unique<HeadLease>(*redis_, io_->address());
  {
    std::lock_guard<std::mutex> l(role_mu_);
    active_elsewhere_ = o_.standby_of;
  }
  report_ready(o_.ready_fd, io_->address() + " " + token_file_);
  spdlog::info("standby head at {} for the head at {}; control store at {}", io_->address(), o_.standby_of,
               t.redis_address);
  uint64_t seen_epoch = 0;
  for (;;) {
    try {
      tables.heads.announce_standby(io_->address(), 3 * lease_->timing().ttl);
      auto a = tables.heads.active();
      if (a.epoch != seen_epoch) {
        spdlog::info("the active head is at {} (epoch {})", a.address, a.epoch);
        seen_epoch = a.epoch;
        std::lock_guard<std::mutex> l(role_mu_);
        active_elsewhere_ = a.address;
      }
      // Its session now: the store's servers are adopted from it when they run on this machine.
      if (!a.leased && lease_->acquire()) {
        lease_held_.store(true);
        spdlog::warn("the head at {} (epoch {}) lost its lease: this standby takes the cluster over as epoch {}",
                     a.address, a.epoch, lease_->epoch());
        tables.heads.withdraw_standby(io_->address());
        auto now = tables.cluster.fields();
        t.servers_session_dir = local_servers_dir(now.count("servers_session") ? now["servers_session"]
                                                  : now.count("session_dir")   ? now["session_dir"]
                                                                                : "");
        return t;
      }
    } catch (const sys::Fenced&) {
      throw;
    } catch (const std::exception& e) {
      spdlog::warn("standby: the control store does not answer: {}", e.what());
    }
    if (wait_for_stop(parent_pid_, lease_->timing().renew_every / 2)) return std::nullopt;
  }
}

void HeadService::take_lease(bool taking_over) {
  if (lease_ && lease_->epoch() > 0) {  // a standby took it already
    OutMessage::set_sender_epoch(lease_->epoch());
    return;
  }
  lease_ = std::make_unique<HeadLease>(*redis_, io_->address());
  // A head that takes over at its killed predecessor's address may take that one's lease at once.
  std::string dead;
  auto a = tables_->heads.active();
  if (taking_over && a.address == io_->address()) dead = a.holder;
  if (!lease_->acquire(dead))
    throw Error("the head at " + a.address + " (epoch " + std::to_string(a.epoch) +
                ") leads this cluster: start this head as its standby (yard start --head --standby --address " +
                a.address + ")");
  OutMessage::set_sender_epoch(lease_->epoch());
  lease_held_.store(true);
  spdlog::info("this head holds the cluster's lease: epoch {}", lease_->epoch());
}

void HeadService::renew_lease() {
  try {
    if (lease_->renew()) {
      if (lease_unreachable_logged_) spdlog::info("the head's lease is renewed again (epoch {})", lease_->epoch());
      lease_unreachable_logged_ = false;
      return;
    }
  } catch (const std::exception& e) {
    // Writes stop at the lease's own deadline; it is renewed once the store answers (or another
    // head has taken it by then, and this one steps down).
    if (!lease_unreachable_logged_)
      spdlog::warn("cannot renew the head's lease: {}; {}", e.what(),
                   lease_->valid() ? "still valid for a moment" : "this head writes nothing until it is renewed");
    lease_unreachable_logged_ = true;
    return;
  }
  step_down();
}

// Another head holds the lease: this one stops without touching the cluster (its nodes, its
// store servers and its node manager stay; the new head has them).
void HeadService::step_down() {
  if (stepped_down_.exchange(true)) return;
  std::string now = "another head";
  try {
    auto a = tables_->heads.active();
    now = "the head at " + a.address + " (epoch " + std::to_string(a.epoch) + ")";
    std::lock_guard<std::mutex> l(role_mu_);
    active_elsewhere_ = a.address;
  } catch (const std::exception&) {
  }
  spdlog::error("this head (epoch {}) lost its lease: {} leads the cluster now; stepping down without writing anything",
                lease_->epoch(), now);
  serving_.store(false);
  request_stop();
}

void HeadService::on_where_is_head(Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setHeadIs(io_->address());
  io_->reply(in.routing_id, m.finish());
}

std::string HeadService::not_serving_why() const {
  std::lock_guard<std::mutex> l(role_mu_);
  if (active_elsewhere_.empty()) return "the head is starting; retry";
  return std::string(stepped_down_ ? "this head stepped down" : "this is a standby head") + ": the active head is at " +
         active_elsewhere_;
}

}  // namespace yard::sched
