#include "objects/ownership.h"

#include "objects/local_copies.h"
#include "objects/object_fetch.h"
#include "metrics/metrics_registry.h"
#include "metrics/task_events.h"
#include "objects/shm_store.h"

namespace yard::detail {

namespace {
void set_result(MemoryStore& store, const std::string& id, const InMessage& r, wire::Value::Reader result) {
  try {
    store.set_value(id, r.value(result));
  } catch (const DecodeError& e) {
    fail_object(store, id, wire::ErrorCode::BAD_REQUEST, e.what());
  }
}
}  // namespace

void complete_from_reply(MemoryStore& store, const std::string& id, const InMessage& r) {
  auto body = r.env().getBody();
  if (body.isTaskReply()) {
    set_result(store, id, r, body.getTaskReply().getResult());
  } else if (body.isError()) {
    fail_from_reply(store, id, body.getError());
  } else {
    fail_object(store, id, wire::ErrorCode::INTERNAL, "unexpected reply");
  }
}

void fail_object(MemoryStore& store, const std::string& id, wire::ErrorCode code, const std::string& message) {
  ErrorInfo e;
  e.code = static_cast<int>(code);
  e.message = message;
  store.set_error(id, std::move(e));
}

ErrorInfo error_info(wire::Error::Reader e) {
  ErrorInfo info;
  info.code = static_cast<int>(e.getCode());
  info.type = e.getType();
  info.message = e.getMessage();
  info.location = e.getLocation();
  return info;
}

void fail_from_reply(MemoryStore& store, const std::string& id, wire::Error::Reader e) {
  store.set_error(id, error_info(e));
}

void throw_reply_error(wire::Error::Reader e) { throw_error(error_info(e)); }

std::pair<std::string, std::string> Ownership::export_ref(const Holder& h) {
  if (!h->owner().empty()) {
    // Passing on a borrowed ref: the new borrower gets it from the owner directly. This process
    // keeps its own borrow until its holder goes, so the owner still pins the object meanwhile.
    return {h->id(), h->owner()};
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& e = exported_[h->id()];
  e.first = h;
  ++e.second;
  return {h->id(), io_.address()};
}

Holder Ownership::import_ref(const std::string& id, const std::string& owner) {
  if (owner == io_.address()) {
    // One of ours came back: use the pinned holder and consume the export.
    std::lock_guard<std::mutex> l(mu_);
    auto it = exported_.find(id);
    if (it == exported_.end()) return std::make_shared<ObjectHolder>(id);
    Holder h = it->second.first;
    if (--it->second.second <= 0) exported_.erase(it);
    return h;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& b = borrowed_[id];
    b.owner = owner;
    ++b.holders;
  }
  store_.create(id);
  return std::make_shared<ObjectHolder>(id, owner);
}

void Ownership::release(const std::string& id, const std::string& owner) {
  if (owner.empty()) {
    store_.release(id);
    return;
  }
  // Each imported holder is one borrow at the owner; the local entry goes with the last one.
  bool last = false, announced = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = borrowed_.find(id);
    if (it != borrowed_.end() && --it->second.holders <= 0) {
      announced = it->second.announced;
      borrowed_.erase(it);
      last = true;
    }
  }
  if (announced) local_copies::withdraw(id);
  if (last) store_.release(id);
  if (io_.is_open()) send_release(id, owner);
}

// Tells `holder` that this process no longer needs `id` from it (no answer is waited for).
void Ownership::send_release(const std::string& id, const std::string& holder) {
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setReleaseObject(id);
  io_.request(holder, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
               std::chrono::seconds(10));
}

void Ownership::ensure_fetched(const std::string& id) {
  std::string owner;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = borrowed_.find(id);
    if (it == borrowed_.end() || it->second.fetching) return;
    it->second.fetching = true;
    owner = it->second.owner;
  }
  auto local = local_copies::find(id);
  fetch(id, owner, local && *local != io_.address() ? *local : owner);
}

void Ownership::fetch(const std::string& id, const std::string& owner, const std::string& from) {
  int64_t t0 = TaskEvents::now_us();
  fetch_object(io_, token_, id, from, [this, id, owner, from, t0](FetchResult r) {
    if ((r.lost || r.error) && from != owner) {  // the local copy went: the owner has it
      fetch(id, owner, owner);
      return;
    }
    if (r.lost) {
      fail_object(store_, id, wire::ErrorCode::OWNER_DIED,
                  "the owner of object " + id + " (" + owner + ") is gone: " + r.lost->message);
      return;
    }
    // On the timeline before the object is ready: a driver that ends as soon as it has the object
    // sends its last spans then, and this one with them.
    if (r.error) {
      record_transfer(id, from, t0, false, 0);
      store_.set_error(id, std::move(*r.error));
      return;
    }
    record_transfer(id, from, t0, true, r.value ? r.value->size() : 0);
    fetched(id, owner, from, r);
  });
}

// The fetch on the process's timeline: the object, where from, how long, how many bytes.
void Ownership::record_transfer(const std::string& id, const std::string& from, int64_t t0, bool ok, uint64_t bytes) {
  if (!metrics::detail::Registry::instance().enabled()) return;
  TaskEvents::instance().record("object " + id + " from " + from, "transfer", t0, TaskEvents::now_us() - t0, ok, bytes);
}

// A large value that came from another host is offered to the other processes of this one.
void Ownership::fetched(const std::string& id, const std::string& owner, const std::string& from, const FetchResult& r) {
  size_t size = r.value->size();
  store_.set_value(id, r.value);
  if (from != owner || r.same_host || size < kShmMinBytes) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = borrowed_.find(id);
  if (it != borrowed_.end() && !it->second.announced && local_copies::announce(id, io_.address()))
    it->second.announced = true;
}

void Ownership::complete(const std::string& id, const InMessage& r) {
  auto body = r.env().getBody();
  if (!body.isTaskReply()) return complete_from_reply(store_, id, r);
  auto result = body.getTaskReply().getResult();
  if (!result.isHeld()) return set_result(store_, id, r, result);
  auto held = result.getHeld();
  std::string holder = held.getHolder(), kept = held.getId();
  uint64_t size = held.getSize();
  fetch_object(io_, token_, kept, holder, [this, id, holder, kept, size](FetchResult f) {
    if (f.lost) {
      fail_object(store_, id, wire::ErrorCode::WORKER_CRASHED,
                  "the result of " + id + " (" + std::to_string(size) + " bytes, kept by its worker at " + holder +
                      ") was lost before it arrived: " + f.lost->message);
      return;
    }
    if (f.error) store_.set_error(id, std::move(*f.error));
    else store_.set_value(id, f.value);
    send_release(kept, holder);
  });
}

void Ownership::hold(const std::string& id, const Bytes& value, wire::Value::Builder v) {
  store_.create(id);
  store_.set_value(id, value);
  {
    std::lock_guard<std::mutex> l(mu_);
    exported_[id] = {std::make_shared<ObjectHolder>(id), 1};
  }
  auto h = v.initHeld();
  h.setHolder(io_.address());
  h.setId(id);
  h.setSize(value->size());
}

bool Ownership::serve(Incoming& in) {
  auto body = in.msg->env().getBody();
  if (body.isReleaseObject()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = exported_.find(body.getReleaseObject());
      if (it != exported_.end() && --it->second.second <= 0) exported_.erase(it);
    }
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    m.env().getBody().setOk();
    io_.reply(in.routing_id, m.finish());
    return true;
  }
  if (!body.isGetObjectPart()) return false;
  auto req = body.getGetObjectPart();
  std::string id = req.getId();
  std::string routing = in.routing_id;
  uint64_t rid = in.msg->env().getRequestId();
  if (!store_.contains(id)) {
    OutMessage m(token_, rid, true);
    set_error(m.env(), wire::ErrorCode::NOT_FOUND, "object " + id + " was freed by its owner " + io_.address());
    io_.reply(routing, m.finish());
    return true;
  }
  bool same_host = in.msg->same_host();
  // The request stays readable until the object is ready (its message is kept with it).
  auto msg = std::shared_ptr<InMessage>(std::move(in.msg));
  store_.on_ready(id, [this, id, routing, rid, same_host, msg] {
    auto snap = store_.peek(id);
    OutMessage m(token_, rid, true);
    if (same_host) m.allow_shared_memory();
    if (!snap.present) {
      set_error(m.env(), wire::ErrorCode::NOT_FOUND, "object " + id + " was freed by its owner");
    } else if (snap.error) {
      set_error(m.env(), static_cast<wire::ErrorCode>(snap.error->code), snap.error->message, snap.error->type,
                snap.error->location);
    } else {
      // A requester on another host that asked over the encrypted link hears of the data link.
      bool offer = !same_host && !via_data_link(routing) && io_.data_link();
      answer_object_part(m, msg->env().getBody().getGetObjectPart(), snap.value, offer ? &*io_.data_link() : nullptr);
    }
    io_.reply(routing, m.finish());
  });
  return true;
}

}  // namespace yard::detail
