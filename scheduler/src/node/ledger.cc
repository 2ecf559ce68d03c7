// The node's resources kept in the control store, through the same atomic scripts as the head's
// placements (resources.h).
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "node/local_resources.h"
#include "resources.h"

namespace yard::sched {

namespace {

std::string res_json(const Res& m) { return nlohmann::json(m).dump(); }

class ControlStoreLedger final : public ResourceLedger {
 public:
  explicit ControlStoreLedger(detail::Redis& r) : r_(r) {}

  void open(const std::string& node, const Res& total) override { register_resources(r_, node, total); }

  bool take(const std::string& node, const Res& need) override {
    try {
      return !reserve(r_, {{node, need}});
    } catch (const std::exception& e) {
      spdlog::error("reserving {}: {}", res_json(need), e.what());
      return false;
    }
  }

  void give(const std::string& node, const Res& amount) override {
    try {
      release(r_, node, amount);
    } catch (const std::exception& e) {
      spdlog::error("releasing {}: {}", res_json(amount), e.what());
    }
  }

  bool take_bundle(const BundleRef& b, const Res& total, const Res& need) override {
    try {
      return reserve_bundle(r_, bundle_key(b.group, b.index), total, need);
    } catch (const std::exception& e) {
      spdlog::error("reserving {} in bundle {} of {}: {}", res_json(need), b.index, b.group, e.what());
      return false;
    }
  }

  void give_bundle(const BundleRef& b, const Res& amount) override {
    try {
      release_bundle(r_, bundle_key(b.group, b.index), amount);
    } catch (const std::exception& e) {
      spdlog::error("giving back {} to bundle {} of {}: {}", res_json(amount), b.index, b.group, e.what());
    }
  }

  std::optional<Res> available(const std::string& node) override {
    try {
      return read_res(r_, avail_key(node));
    } catch (const std::exception& e) {
      spdlog::error("reading node {}'s resources: {}", node, e.what());
      return std::nullopt;
    }
  }

 private:
  detail::Redis& r_;
};

}  // namespace

std::unique_ptr<ResourceLedger> control_store_ledger(detail::Redis& r) { return std::make_unique<ControlStoreLedger>(r); }

}  // namespace yard::sched
