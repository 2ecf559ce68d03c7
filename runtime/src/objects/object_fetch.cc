#include "objects/object_fetch.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "link_security.h"
#include "objects/ownership.h"

namespace yard::detail {

namespace {

// Part of a value that stays in memory as long as the part is being sent.
class SliceBuffer final : public Buffer {
 public:
  SliceBuffer(Bytes whole, size_t offset, size_t size) : whole_(std::move(whole)), offset_(offset), size_(size) {}
  const char* data() const override { return whole_->data() + offset_; }
  size_t size() const override { return size_; }

 private:
  Bytes whole_;
  size_t offset_, size_;
};

ErrorInfo local_error(wire::ErrorCode code, std::string message) {
  ErrorInfo e;
  e.code = static_cast<int>(code);
  e.message = std::move(message);
  return e;
}

// One object coming in parts; every method runs on the I/O loop's thread.
class Transfer : public std::enable_shared_from_this<Transfer> {
 public:
  Transfer(Messenger& io, std::string token, std::string id, std::string from, std::function<void(FetchResult)> done)
      : io_(io), token_(std::move(token)), id_(std::move(id)), from_(std::move(from)), done_(std::move(done)),
        lanes_(curve_for_host(host_of(from_)) ? kEncryptedLanes : 1) {}

  void ask(uint64_t offset, uint64_t length) {
    uint64_t rid = io_.next_request_id();
    OutMessage m(token_, rid, false);
    auto r = m.env().getBody().initGetObjectPart();
    r.setId(id_);
    r.setOffset(offset);
    r.setLength(length);
    ++in_flight_;
    // The holder's data link when it offered one (sealed_link.h); else parts over an encrypted
    // link alternate between connections, each encrypted and decrypted on its own I/O thread.
    bool sealed = !via_.empty();
    int lane = static_cast<int>(offset / kObjectPartBytes % static_cast<uint64_t>(lanes_));
    std::string to = sealed ? via_ : lane == 0 ? from_ : from_ + "/" + std::to_string(lane);
    // Over the data link a part is opened straight into its place in the whole value.
    Messenger::Landing landing;
    if (sealed && room_.bytes) landing = {room_.data + offset, std::min<uint64_t>(length, total_ - offset), room_.bytes};
    io_.request(to, rid, m.finish(),
                [self = shared_from_this(), offset, length, sealed](std::unique_ptr<InMessage> reply,
                                                                    std::optional<LocalError> err) {
                  self->on_reply(offset, length, sealed, std::move(reply), std::move(err));
                },
                std::chrono::milliseconds::max(), std::move(landing));
  }

 private:
  void on_reply(uint64_t offset, uint64_t length, bool sealed, std::unique_ptr<InMessage> reply,
                std::optional<LocalError> err) {
    --in_flight_;
    if (finished_) return;
    FetchResult r;
    if (err && sealed) {
      // The data link failed (not reachable, say, where only the holder's own port is open):
      // the part is asked for again over the encrypted link, which says whether the holder lives.
      if (!via_.empty())
        spdlog::warn("object {} from {}: its data link failed ({}); the rest comes over the encrypted link", id_,
                     from_, err->message);
      via_.clear();
      return ask(offset, length);
    }
    if (err) {
      r.lost = std::move(err);
      return finish(std::move(r));
    }
    r.same_host = reply->same_host();
    try {
      auto body = reply->env().getBody();
      if (body.isError()) {
        r.error = error_info(body.getError());
      } else if (body.isTaskReply()) {
        r.value = reply->value(body.getTaskReply().getResult());
      } else if (!body.isObjectPart()) {
        r.error = local_error(wire::ErrorCode::INTERNAL, "unexpected reply from " + from_ + " to a request for object " + id_);
      } else if (place(offset, length, body.getObjectPart(), *reply, r)) {
        return;  // more to come
      }
    } catch (const DecodeError& e) {
      r.error = local_error(wire::ErrorCode::BAD_REQUEST, "object " + id_ + " from " + from_ + ": " + e.what());
    }
    finish(std::move(r));
  }

  // Writes a part into place and asks for more; false when the transfer ended (r says how).
  bool place(uint64_t offset, uint64_t length, wire::ObjectPart::Reader p, const InMessage& reply, FetchResult& r) {
    Bytes data = reply.value(p.getData());
    uint64_t n = data->size();
    if (!room_.bytes) {  // the first part
      if (p.getOffset() == 0 && n == p.getTotal()) {
        r.value = std::move(data);
        return false;
      }
      total_ = p.getTotal();
      room_ = allocate_bytes(total_);
      if (p.hasDataLink() && curve_for_host(host_of(from_)) && p.getDataLink().getKey().size() == LinkSeal::kKeyBytes) {
        auto key = p.getDataLink().getKey();
        via_ = io_.sealed_peer({p.getDataLink().getAddress(), std::string(reinterpret_cast<const char*>(key.begin()), key.size())});
      }
      next_ = std::min<uint64_t>(length, total_);
    }
    if (p.getOffset() != offset || p.getTotal() != total_ || n > length || offset + n > total_ ||
        (n == 0 && offset < total_)) {
      r.error = local_error(wire::ErrorCode::BAD_REQUEST,
                            "object " + id_ + " from " + from_ + ": a part (" + std::to_string(n) + " bytes at " +
                                std::to_string(p.getOffset()) + " of " + std::to_string(p.getTotal()) +
                                ") does not fit the request (" + std::to_string(length) + " bytes at " +
                                std::to_string(offset) + " of " + std::to_string(total_) + ")");
      return false;
    }
    if (n && data->data() != room_.data + offset) std::memcpy(room_.data + offset, data->data(), n);
    arrived_ += n;
    if (arrived_ == total_) {
      r.value = room_.bytes;
      return false;
    }
    if (n < length) ask(offset + n, length - n);  // the holder sends smaller parts: the rest of this one
    while (in_flight_ < kPartsInFlight && next_ < total_) {
      uint64_t len = std::min<uint64_t>(kObjectPartBytes, total_ - next_);
      ask(next_, len);
      next_ += len;
    }
    return true;
  }

  void finish(FetchResult r) {
    finished_ = true;
    room_ = {};
    done_(std::move(r));
  }

  Messenger& io_;
  const std::string token_, id_, from_;
  std::function<void(FetchResult)> done_;
  WritableBytes room_{};
  uint64_t total_ = 0, next_ = 0, arrived_ = 0;
  const int lanes_;
  std::string via_;  // the holder's data link, as a sealed peer's name ("" when none)
  int in_flight_ = 0;
  bool finished_ = false;
};

}  // namespace

void fetch_object(Messenger& io, const std::string& token, const std::string& id, const std::string& from,
                  std::function<void(FetchResult)> done) {
  std::make_shared<Transfer>(io, token, id, from, std::move(done))->ask(0, kObjectPartBytes);
}

void answer_object_part(OutMessage& m, wire::ObjectPartRequest::Reader req, const Bytes& value,
                        const DataLink* offer) {
  if (m.shared_memory_allowed()) {  // the asker is on this host: all of it, through shared memory
    m.set_value(m.env().getBody().initTaskReply().initResult(), value);
    return;
  }
  uint64_t total = value->size(), offset = req.getOffset();
  if (offset > total) {
    set_error(m.env(), wire::ErrorCode::BAD_REQUEST,
              "a part at byte " + std::to_string(offset) + " of object " + std::string(req.getId()) + ", which has " +
                  std::to_string(total) + " bytes");
    return;
  }
  uint64_t n = std::min({req.getLength() ? req.getLength() : kObjectPartBytes, kObjectPartBytes, total - offset});
  // A value that will come over the data link: the first part, over the encrypted link, is kept
  // small (CurveZMQ's cipher is the slow one), and the asker asks for the rest of it there.
  bool offering = offer && offset == 0 && n < total;
  if (offering) n = std::min<uint64_t>(n, kFirstPartBytes);
  auto p = m.env().getBody().initObjectPart();
  p.setTotal(total);
  p.setOffset(offset);
  m.set_value(p.initData(), n == total ? value : std::make_shared<SliceBuffer>(value, offset, n));
  if (offering) {
    auto link = p.initDataLink();
    link.setAddress(offer->address);
    link.setKey(kj::arrayPtr(reinterpret_cast<const kj::byte*>(offer->key.data()), offer->key.size()));
  }
}

}  // namespace yard::detail
