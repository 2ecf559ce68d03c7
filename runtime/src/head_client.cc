#include "head_client.h"

#include "yard/internal/redis.h"

#include <unistd.h>

#include <fstream>

#include <spdlog/spdlog.h>

#include "objects/ownership.h"
#include "yard/process.h"
#include "yard/errors.h"

namespace yard::detail {

namespace {
constexpr auto kControlTimeout = std::chrono::seconds(30);
}  // namespace

std::string HeadClient::upload_binary(std::chrono::milliseconds timeout) {
  std::ifstream f(self_exe(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return {};
  std::string digest = sha256_hex(bytes.data(), bytes.size());
  uint64_t hid = io_.next_request_id();
  OutMessage hm(token_, hid, false);
  hm.env().getBody().setHasBlob(digest);
  auto has = io_.call(head_.get(), hm, hid, timeout);  // the reply outlives the readers taken from it
  auto hb = has->env().getBody();
  if (hb.isOk()) return digest;
  if (hb.getError().getCode() == wire::ErrorCode::UNAUTHENTICATED)
    throw AuthError("the head at " + head_.get() + " rejected this program: " + hb.getError().getMessage().cStr());
  if (hb.getError().getCode() != wire::ErrorCode::NOT_FOUND) return {};
  uint64_t pid = io_.next_request_id();
  OutMessage pm(token_, pid, false);
  auto pb = pm.env().getBody().initPutBlob();
  pb.setDigest(digest);
  pm.set_value(pb.initData(), std::make_shared<StringBuffer>(std::move(bytes)));
  auto pr = io_.call(head_.get(), pm, pid, std::chrono::seconds(120));
  if (!pr->env().getBody().isError()) return digest;
  spdlog::warn("uploading {} to the cluster failed: {}", self_exe(), describe(pr->env().getBody().getError()));
  return {};
}

HeadClient::Registration HeadClient::register_driver(std::chrono::milliseconds timeout, bool detached_actors) {
  std::unique_ptr<InMessage> r;
  try {
    // The binary goes to the cluster once, content-addressed: nodes without a shared file system
    // fetch it from the head.
    std::string digest = upload_binary(timeout);
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    auto rj = m.env().getBody().initRegisterJob();
    rj.setBinary(self_exe());
    rj.setBinaryDigest(digest);
    rj.setPid(getpid());
    if (const char* s = getenv("YARD_SUBMISSION_ID")) rj.setSubmissionId(s);
    rj.setNamespace(name_space_);
    rj.setDetachedActors(detached_actors);
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) rj.setCwd(cwd);
    r = io_.call(head_.get(), m, rid, timeout);
  } catch (const TimeoutError&) {
    throw ConnectionError("no answer from a Switchyard head at " + head_.get() + " within " +
                          std::to_string(timeout.count()) + " ms (is the address right?)");
  } catch (const ConnectionError& e) {
    throw ConnectionError("cannot reach a Switchyard head at " + head_.get() + ": " + e.what());
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    if (e.getCode() == wire::ErrorCode::UNAUTHENTICATED)
      throw AuthError("the head at " + head_.get() + " rejected this program: " + e.getMessage().cStr());
    throw ConnectionError("the head at " + head_.get() + " refused to register the job: " + describe(e));
  }
  if (!body.isJobRegistered()) throw ConnectionError("unexpected reply from " + head_.get());
  auto jr = body.getJobRegistered();
  return {jr.getJobId(), jr.getNodeId(), jr.getNodeAddress()};
}

void HeadClient::finish_job() {
  try {
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    m.env().getBody().setFinishJob(job_id_);
    io_.call(head_.get(), m, rid, std::chrono::seconds(5));
  } catch (const std::exception& e) {
    spdlog::debug("finishing job {}: {}", job_id_, e.what());
  }
}

bool HeadClient::create_placement_group(const std::string& id, wire::PlacementStrategy strategy,
                                        const std::vector<std::map<std::string, double>>& bundles,
                                        const std::string& name) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto c = m.env().getBody().initCreatePlacementGroup();
  c.setGroupId(id);
  c.setJobId(job_id_);
  c.setNamespace(name_space_);
  c.setStrategy(strategy);
  c.setName(name);
  auto bs = c.initBundles(static_cast<unsigned>(bundles.size()));
  for (unsigned i = 0; i < bundles.size(); ++i)
    set_resources(bs[i].initResources(static_cast<unsigned>(bundles[i].size())), bundles[i]);
  auto r = ask_head(m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
  if (!body.isPlacementGroupInfo()) return false;
  if (auto why = body.getPlacementGroupInfo().getWaiting(); why.size())
    spdlog::warn("placement group {} waits: {}; nodes that can hold it may join (remove it, or set the cluster's "
                 "[scheduling] infeasible = \"fail\" to refuse such groups)", id, why.cStr());
  return body.getPlacementGroupInfo().getState() == wire::GroupState::CREATED;
}

std::pair<states::GroupState, std::vector<std::string>> HeadClient::wait_placement_group(const std::string& id,
                                                                                  std::chrono::milliseconds timeout) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto w = m.env().getBody().initWaitPlacementGroup();
  w.setGroupId(id);
  auto ms = std::min<int64_t>(timeout.count(), 24LL * 3600 * 1000);
  w.setTimeoutMs(static_cast<uint32_t>(std::max<int64_t>(0, ms)));
  auto r = ask_head(m, rid, std::chrono::milliseconds(ms) + kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
  auto info = body.getPlacementGroupInfo();
  std::vector<std::string> nodes;
  for (auto n : info.getBundleNodes()) nodes.push_back(n);
  auto state = from_wire(info.getState());
  if (!state) throw Error("the head answered placement group " + id + " with a state this program does not know");
  return {*state, nodes};
}

void HeadClient::remove_placement_group(const std::string& id) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setRemovePlacementGroup(id);
  // Like Ray's remove_placement_group, this does not wait: requests this process sends later reach
  // the head after it, so they see the resources freed.
  io_.request(head_.get(), rid, m.finish(),
               [id](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (err) spdlog::warn("removing placement group {}: {}", id, err->message);
                 else if (r->env().getBody().isError())
                   spdlog::warn("removing placement group {}: {}", id, describe(r->env().getBody().getError()));
               },
               kControlTimeout);
}

std::unique_ptr<InMessage> HeadClient::ask_head(OutMessage& m, uint64_t rid, std::chrono::milliseconds timeout) {
  try {
    auto r = io_.call(head_.get(), m, rid, timeout);
    auto body = r->env().getBody();
    if (body.isError() && body.getError().getCode() == wire::ErrorCode::UNAVAILABLE) head_.ask(io_, token_, node_);
    return r;
  } catch (const std::exception&) {
    head_.ask(io_, token_, node_);
    throw;
  }
}

void HeadClient::end_actor(const std::string& id, const std::string& cause) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto ka = m.env().getBody().initKillActor();
  ka.setActorId(id);
  ka.setCause(cause);
  auto r = ask_head(m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (body.isError()) throw_reply_error(body.getError());
}

ControlStoreAccess HeadClient::control_store() {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setGetControlStore();
  auto r = ask_head(m, rid, kControlTimeout);
  auto body = r->env().getBody();
  if (!body.isControlStore()) throw Error("the head did not say where its control store is");
  auto cs = body.getControlStore();
  if (cs.getTlsCert().size() > 0) sys::trust_redis_tls(cs.getAddress(), cs.getTlsCert());
  return ControlStoreAccess{cs.getAddress(), cs.getPassword()};
}

}  // namespace yard::detail
