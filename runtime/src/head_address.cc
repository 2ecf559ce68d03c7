#include "head_address.h"

#include <spdlog/spdlog.h>

#include "messenger.h"
#include "wire.h"

namespace yard::detail {

bool HeadAddress::set(const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  if (address.empty() || address == a_) return false;
  a_ = address;
  return true;
}

void HeadAddress::ask(Messenger& io, const std::string& token, const std::string& node) {
  if (node.empty() || !io.is_open() || asking_.exchange(true)) return;
  uint64_t rid = io.next_request_id();
  OutMessage m(token, rid, false);
  m.env().getBody().setWhereIsHead();
  io.request(node, rid, m.finish(),
             [this](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
               asking_.store(false);
               if (err || !r->env().getBody().isHeadIs()) return;
               std::string at = r->env().getBody().getHeadIs();
               if (set(at)) spdlog::warn("the cluster's head is now at {}", at);
             },
             std::chrono::seconds(5));
}

}  // namespace yard::detail
