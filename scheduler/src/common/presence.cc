#include "common/presence.h"

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace yard::sched {

namespace {

class RecordPresence final : public Presence {
 public:
  explicit RecordPresence(bool latest) : latest_(latest) {}
  void announce(const detail::ClusterRecord& rec) const override { detail::write_record(rec, latest_); }
  void withdraw(const detail::ClusterRecord& rec) const override { detail::remove_record(rec); }
  bool tied_to_parent() const override { return false; }

 private:
  bool latest_;  // also the machine's latest cluster (a head's)
};

class HeadNodePresence final : public Presence {
 public:
  explicit HeadNodePresence(bool tied) : tied_(tied) {}
  void announce(const detail::ClusterRecord& rec) const override {
    std::ofstream(pid_file(rec)) << getpid() << "\n";
  }
  void withdraw(const detail::ClusterRecord& rec) const override {
    std::error_code ec;
    std::filesystem::remove(pid_file(rec), ec);
  }
  bool tied_to_parent() const override { return tied_; }

 private:
  static std::string pid_file(const detail::ClusterRecord& rec) { return rec.session_dir + "/head-node.pid"; }
  bool tied_;
};

class EmbeddedPresence final : public Presence {
 public:
  void announce(const detail::ClusterRecord&) const override {}
  void withdraw(const detail::ClusterRecord&) const override {}
  bool tied_to_parent() const override { return true; }
};

}  // namespace

std::shared_ptr<const Presence> head_record_presence() { return std::make_shared<RecordPresence>(true); }
std::shared_ptr<const Presence> node_record_presence() { return std::make_shared<RecordPresence>(false); }
std::shared_ptr<const Presence> head_node_presence(bool tied) { return std::make_shared<HeadNodePresence>(tied); }
std::shared_ptr<const Presence> embedded_presence() { return std::make_shared<EmbeddedPresence>(); }

}  // namespace yard::sched
