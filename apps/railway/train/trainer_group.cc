#include "trainer_group.h"

#include <chrono>
#include <cstdio>
#include <optional>

namespace railway_train {

using namespace std::chrono_literals;

TrainerGroup::TrainerGroup(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
                           std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts)
    : workers_(workers), resources_(std::move(resources)), pg_(std::move(pg)), ckpts_(std::move(ckpts)) {}

TrainerGroup::~TrainerGroup() {
  try {
    stop();
  } catch (const std::exception&) {
  }
}

std::string TrainerGroup::who(int rank) const {
  auto r = static_cast<size_t>(rank);
  return "trainer rank " + std::to_string(rank) + (r < pids_.size() && pids_[r] ? " (pid " + std::to_string(pids_[r]) + ")" : "");
}

// Waits for every ref; the first loss ends the wait, unless `tolerate` takes it (then that
// member's entry stays empty, unless tolerate put a new ref in its place: that is waited for). A survivor's error about a peer (a collective that lost a rank)
// may come before the dead member's own: then the dead member is waited for a little, so that the
// report names the process that was lost.
template <class T>
std::vector<std::optional<T>> TrainerGroup::gather(std::vector<yard::ObjectRef<T>>& refs, const std::vector<int>& ranks,
                                                   Phase phase, yard::Duration timeout, const Tolerate& tolerate) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::optional<T>> out(refs.size());
  std::vector<size_t> left;
  for (size_t i = 0; i < refs.size(); ++i) left.push_back(i);
  std::optional<MemberLost> second_hand;  // a survivor's report of a loss
  while (!left.empty()) {
    std::vector<yard::ObjectRef<T>> waiting;
    for (auto i : left) waiting.push_back(refs[i]);
    auto rest = std::chrono::duration_cast<yard::Duration>(deadline - std::chrono::steady_clock::now());
    auto got = yard::wait(waiting, 1, std::max(rest, yard::Duration(0)));
    if (got.ready.empty()) {
      if (second_hand) throw *second_hand;
      throw yard::TimeoutError(std::string("the trainers did not finish ") + phase_name(phase) + " in time");
    }
    std::vector<size_t> still;
    for (auto i : left) {
      bool ready = false;
      for (auto& r : got.ready) ready = ready || r.id() == refs[i].id();
      if (!ready) {
        still.push_back(i);
        continue;
      }
      try {
        out[i] = *refs[i].get(0ms);
      } catch (const std::exception& e) {
        if (!is_process_loss(e)) throw;
        bool first_hand = !dynamic_cast<const yard::RemoteError*>(&e);
        if (first_hand && tolerate) {
          auto was = refs[i].id();
          if (tolerate(ranks[i], e)) {
            if (refs[i].id() != was) still.push_back(i);
            continue;
          }
        }
        if (first_hand) throw MemberLost(phase, who(ranks[i]), e.what());
        if (!second_hand) {
          second_hand.emplace(phase, "a peer of " + who(ranks[i]), e.what());
          deadline = std::min(deadline, std::chrono::steady_clock::now() + 2s);
        }
      }
    }
    left = std::move(still);
  }
  if (second_hand) throw *second_hand;
  return out;
}

template <class T>
std::vector<T> TrainerGroup::collect(const std::vector<yard::ObjectRef<T>>& refs, const std::vector<int>& ranks,
                                     Phase phase, yard::Duration timeout) {
  std::vector<T> out;
  auto waiting = refs;
  for (auto& o : gather(waiting, ranks, phase, timeout, {})) out.push_back(std::move(*o));
  return out;
}

std::string TrainerGroup::pid_list() const {
  std::string out;
  for (int p : pids_) out += " " + std::to_string(p);
  return out;
}

void TrainerGroup::stop() {
  for (auto& m : members_) {
    try {
      yard::kill(m);
    } catch (const std::exception&) {
    }
  }
  members_.clear();
  pids_.clear();
}

SetupInfo TrainerGroup::start(const TrainConfig& cfg) {
  stop();
  evaluators_ = cfg.strategy == "pipeline" ? static_cast<int>(cfg.pp) : 1;
  std::vector<int> ranks;
  for (int r = 0; r < workers_; ++r) {
    members_.push_back(yard::actor<RailwayTrainer>().resources(resources_).placement_group(pg_, r).remote());
    ranks.push_back(r);
  }
  std::vector<yard::ObjectRef<int>> pid_refs;
  for (auto& m : members_) pid_refs.push_back(m.call(&RailwayTrainer::pid).remote());
  pids_ = collect(pid_refs, ranks, Phase::kSetup, 600s);
  std::string pids = pid_list();
  std::printf("setting up the trainers: pids%s\n", pids.c_str());
  std::fflush(stdout);
  std::string gen = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  // What the earlier generations left running (parameter servers) is ended by the new one.
  TrainConfig c = cfg;
  c.retired_generations = generations_;
  generations_.push_back(gen);
  std::vector<yard::ObjectRef<SetupInfo>> ready;
  for (int r = 0; r < workers_; ++r)
    ready.push_back(members_[static_cast<size_t>(r)].call(&RailwayTrainer::setup).remote(c, r, workers_, gen, ckpts_));
  auto infos = collect(ready, ranks, Phase::kSetup, 600s);
  std::string nodes, held;
  for (auto& i : infos) nodes += " " + i.node, held += " " + std::to_string(i.parameters);
  std::printf("trainer pids:%s\ntrainer nodes:%s\nmodel parameters per trainer:%s\n", pids.c_str(), nodes.c_str(),
              held.c_str());
  if (!infos[0].ps_pids.empty()) {
    std::string ps;
    for (int p : infos[0].ps_pids) ps += " " + std::to_string(p);
    std::printf("parameter server pids:%s\n", ps.c_str());
  }
  std::fflush(stdout);
  return infos[0];
}

std::vector<ChunkStats> TrainerGroup::train(int64_t steps, bool save) {
  std::vector<yard::ObjectRef<ChunkStats>> parts;
  std::vector<int> ranks;
  for (size_t r = 0; r < members_.size(); ++r) {
    parts.push_back(members_[r].call(&RailwayTrainer::train_steps).remote(steps, save));
    ranks.push_back(static_cast<int>(r));
  }
  return collect(parts, ranks, Phase::kTraining, 3600s);
}

EvalStats TrainerGroup::evaluate() {
  std::vector<yard::ObjectRef<EvalStats>> refs;
  std::vector<int> ranks;
  for (int r = 0; r < evaluators_; ++r) {
    refs.push_back(members_[static_cast<size_t>(r)].call(&RailwayTrainer::evaluate).remote());
    ranks.push_back(r);
  }
  return collect(refs, ranks, Phase::kEvaluation, 600s)[0];
}

std::vector<std::string> TrainerGroup::finish() {
  std::vector<yard::ObjectRef<std::vector<std::string>>> done;
  std::vector<int> ranks;
  for (size_t r = 0; r < members_.size(); ++r) {
    done.push_back(members_[r].call(&RailwayTrainer::finish).remote());
    ranks.push_back(static_cast<int>(r));
  }
  std::vector<std::string> notes;
  for (auto& n : collect(done, ranks, Phase::kFinish, 600s)) notes.insert(notes.end(), n.begin(), n.end());
  return notes;
}

}  // namespace railway_train

namespace railway_train {

ReplacingTrainers::ReplacingTrainers(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
                                     std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts,
                                     yard::ActorHandle<yard::actors::BatchQueue> queue, int max_replacements,
                                     RecoveryReport report)
    : TrainerGroup(workers, std::move(resources), std::move(pg), std::move(ckpts)),
      queue_(std::move(queue)),
      max_replacements_(max_replacements),
      report_(std::move(report)) {}

SetupInfo ReplacingTrainers::start(const TrainConfig& cfg) {
  cfg_ = cfg;  // the pending replacements of the last group are ended by stop()
  return TrainerGroup::start(cfg);
}

// A new trainer in the lost one's bundle, set up to join the running group (its set-up is not
// waited for here).
void ReplacingTrainers::replace(int rank, const std::string& error) {
  auto r = static_cast<size_t>(rank);
  queue_.call(&yard::actors::BatchQueue::release).remote(rank).get(60s);  // its batch, to another
  Replacement rep;
  rep.lost = who(rank);
  rep.error = error;
  rep.since = std::chrono::steady_clock::now();
  TrainConfig c = cfg_;
  c.resume = false;
  c.join = true;
  c.retired_generations.clear();
  rep.member = yard::actor<RailwayTrainer>().resources(resources_).placement_group(pg_, rank).remote();
  rep.ready = rep.member.call(&RailwayTrainer::setup).remote(c, rank, workers_, generations_.back(), ckpts_);
  pids_[r] = 0;
  pending_[rank] = std::move(rep);
}

void ReplacingTrainers::adopt(bool wait_all) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& [rank, rep] = *it;
    bool must = wait_all || rank == 0;
    if (!must && yard::wait(std::vector{rep.ready}, 1, 0ms).ready.empty()) {
      ++it;
      continue;
    }
    auto info = collect(std::vector{rep.ready}, {rank}, Phase::kSetup, 600s)[0];
    members_[static_cast<size_t>(rank)] = rep.member;
    pids_[static_cast<size_t>(rank)] = info.pid;
    Recovery r;
    r.phase = Phase::kTraining;
    r.lost = rep.lost;
    r.error = rep.error;
    r.redone = "replaced by a new trainer (pid " + std::to_string(info.pid) +
               ") that took the weights from the parameter servers; the others trained on, its batch was handed out again";
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - rep.since).count();
    report_(r);
    std::printf("trainer pids:%s\n", pid_list().c_str());
    std::fflush(stdout);
    it = pending_.erase(it);
  }
}

// Every member's chunk; a member lost on the way is replaced while the others go on (their chunk
// takes its batches). Returns the stats of the members that finished, rank 0's first when it did.
std::vector<ChunkStats> ReplacingTrainers::train(int64_t steps, bool save) {
  adopt(false);
  std::vector<yard::ObjectRef<ChunkStats>> parts;
  std::vector<int> ranks;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (pending_.count(static_cast<int>(r))) continue;
    parts.push_back(members_[r].call(&RailwayTrainer::train_steps).remote(steps, save));
    ranks.push_back(static_cast<int>(r));
  }
  // Whichever ends first is looked at first: a lost member's claimed batch must go back to the
  // queue before rank 0's checkpoint can count the chunk's batches complete. A lost trainer is
  // replaced; anything else (a parameter server lost for good, a fault of the work) goes to the
  // job's recovery.
  auto got = gather(parts, ranks, Phase::kTraining, 3600s, [&](int rank, const std::exception& e) {
    if (++replaced_[rank] > max_replacements_)
      throw MemberLost(Phase::kTraining, who(rank),
                       std::string(e.what()) + " (lost " + std::to_string(replaced_[rank]) + " times: not replaced again)");
    replace(rank, e.what());
    return true;
  });
  std::vector<ChunkStats> out;
  for (auto& g : got)
    if (g) out.push_back(std::move(*g));
  if (out.empty()) throw MemberLost(Phase::kTraining, "every trainer", "all were lost in one chunk");
  adopt(false);  // a new rank 0 is ready before the next checkpoint or evaluation
  return out;
}

void ReplacingTrainers::stop() {
  for (auto& [rank, rep] : pending_) {
    try {
      yard::kill(rep.member);
    } catch (const std::exception&) {
    }
  }
  pending_.clear();
  TrainerGroup::stop();
}

ReplacingTrainers::~ReplacingTrainers() {
  try {
    stop();
  } catch (const std::exception&) {
  }
}

EvalStats ReplacingTrainers::evaluate() {
  adopt(false);  // rank 0 evaluates: waited for when it is being replaced
  return TrainerGroup::evaluate();
}

std::vector<std::string> ReplacingTrainers::finish() {
  adopt(true);
  return TrainerGroup::finish();
}

}  // namespace railway_train

namespace railway_train {

RedoingTrainers::RedoingTrainers(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
                                 std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts, int max_replacements,
                                 RecoveryReport report)
    : TrainerGroup(workers, std::move(resources), std::move(pg), std::move(ckpts)),
      max_replacements_(max_replacements),
      report_(std::move(report)) {}

SetupInfo RedoingTrainers::start(const TrainConfig& cfg) {
  cfg_ = cfg;
  auto info = TrainerGroup::start(cfg);
  at_ = info.global_step;
  return info;
}

yard::ObjectRef<ChunkStats> RedoingTrainers::redo(int rank, const std::string& error, int64_t end, bool save) {
  auto r = static_cast<size_t>(rank);
  if (++replaced_[rank] > max_replacements_)
    throw MemberLost(Phase::kTraining, who(rank),
                     error + " (lost " + std::to_string(replaced_[rank]) + " times: not replaced again)");
  auto since = std::chrono::steady_clock::now();
  Recovery rec;
  rec.phase = Phase::kTraining;
  rec.lost = who(rank);
  rec.error = error;
  TrainConfig c = cfg_;
  c.resume = false;
  c.join = true;
  c.join_step = at_;
  c.retired_generations.clear();
  members_[r] = yard::actor<RailwayTrainer>().resources(resources_).placement_group(pg_, rank).remote();
  pids_[r] = 0;
  auto ready = members_[r].call(&RailwayTrainer::setup).remote(c, rank, workers_, generations_.back(), ckpts_);
  auto info = collect(std::vector{ready}, {rank}, Phase::kSetup, 600s)[0];  // its loss: the job's restart
  pids_[r] = info.pid;
  const auto& mode = cfg_.ps_mode;  // sync, async or ssp:K (checked by the servers)
  std::string others = mode == "sync" || mode == "ssp:0" ? "the others waited for it at that step"
                       : mode == "async"                 ? "the others trained on"
                                                         : "the others trained on, at most " + mode.substr(4) + " steps ahead";
  rec.redone = "replaced by a new trainer (pid " + std::to_string(info.pid) +
               ") that took the weights from the parameter servers and went on from step " +
               std::to_string(info.global_step + 1) + ", the first they lacked from it; " + others;
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  report_(rec);
  std::printf("trainer pids:%s\n", pid_list().c_str());
  std::fflush(stdout);
  return members_[r].call(&RailwayTrainer::train_steps).remote(std::max<int64_t>(0, end - info.global_step), save);
}

// Every member's chunk; a lost member's replacement does the rest of its share, and its stats stand
// for the lost one's (the steps the lost one finished in the chunk are not reported).
std::vector<ChunkStats> RedoingTrainers::train(int64_t steps, bool save) {
  const int64_t end = at_ + steps;
  std::vector<yard::ObjectRef<ChunkStats>> parts;
  std::vector<int> ranks;
  for (size_t r = 0; r < members_.size(); ++r) {
    parts.push_back(members_[r].call(&RailwayTrainer::train_steps).remote(steps, save));
    ranks.push_back(static_cast<int>(r));
  }
  auto got = gather(parts, ranks, Phase::kTraining, 3600s, [&](int rank, const std::exception& e) {
    parts[static_cast<size_t>(rank)] = redo(rank, e.what(), end, save);
    return true;
  });
  std::vector<ChunkStats> out;
  for (auto& g : got) out.push_back(std::move(*g));
  at_ = out[0].global_step;
  return out;
}

}  // namespace railway_train
