// bench/run scale: one real head and its Redis against many simulated nodes (`yard start
// --simulate`, each process a few hundred nodes), at every cluster size given (default 100 and
// 1000 nodes), so that the growth shows. Per size N:
//   actor_create_first_contact_per_s_Nn
//                               one actor on every node (min(N, SCALE_ACTORS)), asked for at once,
//                               then one call to each: every creation opens a link from the head
//                               and one from the driver to a node not linked yet
//   actor_create_one_by_one_per_s_Nn
//                               SCALE_ACTORS actors by 4 client threads, each creating one and
//                               waiting for its first answer before the next
//   placement_p99_ms_Nn         p99 of create -> first answer under that continuous load
//   zmq_fanout_per_s_Nn         the transport alone at the same fan-out (scale_fanout.h), measured
//                               before the cluster starts; peer: the same at the smallest size;
//                               zmq_fanout_cpu_us_{sender,echo}_Nn: the CPU of a round trip
//   actor_create_per_s_Nn       actors created and answering per second in batches, as users make
//                               many (and as Ray's many-actors benchmark measures): SCALE_BATCHED
//                               actors (default 5000), 1,000 asked for at once, then one call to
//                               each, the next 1,000 when all have answered. At the largest size
//                               its peer is the same case at the smallest size (ratio = large ÷
//                               small); actor_create_one_by_one_per_s_Nn has the same peer
//   pg_create_remove_per_s_Nn   single-bundle placement groups created, waited for and removed
//   dead_node_detect_s_Nn       kill -9 of one more simulated node -> marked DEAD; peer: the
//                               heartbeat timeout + 1 s (ratio <= 1 meets the target)
//   status_ms_Nn                `yard status` as a user runs it (the summary), process start
//                               included; status_json_ms_Nn: `yard status --json`, every row
//   head_cpu_idle_frac_Nn       the head's CPU time ÷ wall time over 3 s with nothing asked of it;
//                               redis_cpu_idle_frac_Nn: its Redis's (the nodes' heartbeats);
//                               simulators_cpu_idle_frac_Nn: the simulator processes' together
//   takeover_s_Nn_A_actors      kill -9 of the head with every actor alive -> a new head at the same
//                               address answers `yard status` with them all ALIVE
//   actor_create_cpu_ms_Nn      CPU of all processes (driver, head, Redis, simulators) per
//                               creation; actor_call_cpu_ms_Nn: per later call, one at a time
//   head_rss_mb_per_1k_actors_Nn, redis_mb_per_1k_actors_Nn: memory the actors cost
// This binary is the driver; the actors are yard::SimulatedCounter, hosted by the simulator.
//   pg_create_alive_per_s_Nn_G  G groups alive at once (SCALE_GROUPS, default 1000): all asked
//                               for, then waited for; head_rss_mb_per_1k_groups_Nn and
//                               redis_mb_per_1k_groups_Nn, status_ms_Nn_G_groups with them alive,
//                               pg_remove_per_s_Nn_G their removal
//   status_ms_Nn_A_actors       the summary with the A actors alive
//   placement_p99_ms_status_polled_Nn
//                               placement_p99_ms_Nn's creations (at most 400) while `yard status
//                               --json` runs back to back (a dashboard); peer: placement_p99_ms_Nn;
//                               status_json_ms_polled_Nn: the median full status meanwhile
//   actor_kill_per_s_Nn         all of them killed, one request each, until none is alive
// SCALE_FANOUT_ONLY=1 measures zmq_fanout_per_s only. SCALE_SOAK_S=S runs, instead of the above,
// a soak of S seconds at each size (see run_soak).
// SCALE_LAT_FILE=F writes each creation's start (s) and latency (ms) to F.N for N nodes, to see
// when the slow ones come.
// SCALE_ACTORS sets the number of actors made one by one (default 1000), SCALE_BATCHED those made in
// batches (default 5000); SCALE_KEEP_HOME=1 keeps each size's
// cluster directory (the head's and simulators' logs) and prints where it is.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "proc_stats.h"
#include "scale_fanout.h"
#include "scale_cluster.h"
#include "scale_report.h"
#include "yard/process.h"
#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/node_state.h"
#include "yard/simulated.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

using yard::bench::cpu_seconds;
using yard::bench::rss_mb;
using yard::bench::start_daemon;
using yard::bench::scale::emit;
using yard::bench::scale::emit_against_smallest;
using yard::bench::scale::Cluster;
using yard::bench::scale::Figures;
using yard::bench::scale::kPerSimProcess;
using yard::bench::scale::secs_since;

constexpr double kHeartbeatTimeout = 4;  // the default

using Counter = yard::ActorHandle<yard::SimulatedCounter>;

// One actor on a node of its own where it can: SPREAD, each needing one "sim".
Counter make_counter() { return yard::actor<yard::SimulatedCounter>(int64_t{1}).resources({{"sim", 1}}).spread().remote(); }

// `count` actors made by 4 threads, each creating one and waiting for its first answer before the
// next. (actors per second, p99 ms of one creation).
std::pair<double, double> create_actors(int count, std::vector<Counter>& out) {
  std::mutex mu;
  std::vector<std::pair<double, double>> lat;  // (start, seconds from t0; latency, ms)
  std::atomic<int> next{0};
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      std::vector<Counter> mine;
      std::vector<std::pair<double, double>> ms;
      while (next.fetch_add(1) < count) {
        auto s = Clock::now();
        auto a = make_counter();
        if (*a.call(&yard::SimulatedCounter::add).remote(int64_t{1}).get(120s) != 2) throw std::runtime_error("wrong answer");
        ms.emplace_back(std::chrono::duration<double>(s - t0).count(), secs_since(s) * 1000);
        mine.push_back(std::move(a));
      }
      std::lock_guard l(mu);
      lat.insert(lat.end(), ms.begin(), ms.end());
      for (auto& a : mine) out.push_back(std::move(a));
    });
  for (auto& t : ts) t.join();
  double rate = count / secs_since(t0);
  if (const char* f = getenv("SCALE_LAT_FILE"); f && *f) {
    std::sort(lat.begin(), lat.end());
    const char* size = getenv("SCALE_ONE_SIZE");
    std::ofstream out(std::string(f) + "." + (size ? size : "all"));
    for (auto& [at, ms] : lat) out << at << " " << ms << "\n";
  }
  std::sort(lat.begin(), lat.end(), [](auto& x, auto& y) { return x.second < y.second; });
  return {rate, lat.empty() ? 0 : lat[lat.size() * 99 / 100].second};
}

// The cluster's control store, through the runtime's own client: this bench measures what Redis
// holds and does.
class Store {
 public:
  Store() : c_(yard::detail::cluster_control()) {}
  yard::detail::RedisReply cmd(const std::vector<std::string>& args) {
    return c_->run([&](yard::detail::Redis& r) { return r.cmd(args); });
  }

 private:
  std::shared_ptr<yard::detail::ControlClient> c_;
};

double redis_used_mb(Store& r) {
  auto info = r.cmd({"INFO", "memory"}).str();
  auto at = info.find("used_memory:");
  return at == std::string::npos ? 0 : std::stod(info.substr(at + 12)) / (1024.0 * 1024.0);
}


// `count` actors in batches of 1,000: each batch asked for at once, then one call to each, the
// next batch when all have answered. Actors per second.
double create_batched(int count, std::vector<Counter>& out) {
  constexpr int kBatch = 1000;
  auto t0 = Clock::now();
  for (int done = 0; done < count;) {
    int n = std::min(kBatch, count - done);
    std::vector<Counter> batch;
    batch.reserve(size_t(n));
    for (int i = 0; i < n; ++i) batch.push_back(make_counter());
    std::vector<yard::ObjectRef<int64_t>> refs;
    refs.reserve(size_t(n));
    for (auto& a : batch) refs.push_back(a.call(&yard::SimulatedCounter::add).remote(int64_t{1}));
    for (auto& r : refs)
      if (*r.get(120s) != 2) throw std::runtime_error("wrong answer");
    for (auto& a : batch) out.push_back(std::move(a));
    done += n;
  }
  return count / secs_since(t0);
}

// What `count` creations cost all processes together, per creation, and each of them:
// NAME_TAG (on 2 cores the rate cannot exceed 2 ÷ this), NAME_head_TAG, ...
void emit_cpu(const std::string& name, const std::string& tag, const Cluster::Cpu& a, const Cluster::Cpu& b, int count) {
  emit(name + tag, (b.all() - a.all()) * 1000 / count, "ms");
  emit(name + "_head" + tag, (b.head - a.head) * 1000 / count, "ms");
  emit(name + "_redis" + tag, (b.redis - a.redis) * 1000 / count, "ms");
  emit(name + "_driver" + tag, (b.driver - a.driver) * 1000 / count, "ms");
  emit(name + "_simulators" + tag, (b.sims - a.sims) * 1000 / count, "ms");
}

// The head's and Redis's CPU share over 3 s with nothing asked of them.
void measure_idle(Cluster& c, const std::string& tag) {
  pid_t redis_pid = c.redis_pid();
  double idle0 = cpu_seconds(c.head_pid), redis_idle0 = redis_pid > 0 ? cpu_seconds(redis_pid) : 0;
  double sims0 = c.cpu().sims;
  auto t_idle = Clock::now();
  std::this_thread::sleep_for(3s);  // measuring an idle head: nothing to wait for
  double idle_secs = secs_since(t_idle);
  emit("head_cpu_idle_frac" + tag, (cpu_seconds(c.head_pid) - idle0) / idle_secs, "cpu/wall");
  emit("simulators_cpu_idle_frac" + tag, (c.cpu().sims - sims0) / idle_secs, "cpu/wall");
  if (redis_pid > 0) emit("redis_cpu_idle_frac" + tag, (cpu_seconds(redis_pid) - redis_idle0) / idle_secs, "cpu/wall");
}

// `yard status` (the summary, the second of two runs) and `yard status --json`, as a user runs them.
void measure_status(Cluster& c, const std::string& tag) {
  double status_ms = 0, full_ms = 0;
  c.run_status("", &status_ms);
  c.run_status("", &status_ms);
  c.run_status("--json", &full_ms);
  emit("status_ms" + tag, status_ms, "ms");
  emit("status_json_ms" + tag, full_ms, "ms");
}

// Actors in state ALIVE in `yard status`'s summary ("  actors:  N ALIVE, ..."); -1 without one.
long alive_in_summary(const std::string& out) {
  auto at = out.find("  actors:  ");
  if (at == std::string::npos) return -1;
  std::string line = out.substr(at, out.find('\n', at) - at);
  auto a = line.find(" ALIVE");
  if (a == std::string::npos) return 0;
  auto b = line.rfind(' ', a - 1);
  return std::stol(line.substr(b + 1, a - b - 1));
}

// Groups PENDING or CREATED in `yard status`'s summary ("  placement groups: N CREATED, ...").
long groups_left_in_summary(const std::string& out) {
  auto at = out.find("  placement groups: ");
  if (at == std::string::npos) return -1;
  std::istringstream line(out.substr(at + 20, out.find('\n', at) - at - 20));
  long left = 0, k = 0;
  std::string state;
  while (line >> k >> state) {
    if (state.back() == ',') state.pop_back();
    if (state == "CREATED" || state == "PENDING") left += k;
  }
  return left;
}

// One single-bundle group created, waited for and removed.
void create_remove_group() {
  auto g = yard::placement_group({{{"sim", 1}}});
  if (!g.wait(30s)) throw std::runtime_error("placement group not placed");
  g.remove();
}

// Placement while the full status is asked for back to back, as a dashboard open on the cluster
// does (every row: the nodes, the actors made so far): p99 of a creation, against the same without
// it (`p99`); and the median time a full status took meanwhile.
void measure_placement_polled(Cluster& c, const std::string& tag, int count, double p99, std::vector<Counter>& made) {
  std::vector<double> full_ms;
  std::vector<Counter> more;
  double p99_polled = 0;
  {
    struct Poller {  // stopped and joined however the creations end
      std::atomic<bool> on{true};
      std::thread t;
      ~Poller() {
        on = false;
        t.join();
      }
    } poller;
    poller.t = std::thread([&] {
      for (double ms = 0; poller.on.load(); full_ms.push_back(ms)) c.run_status("--json", &ms);
    });
    p99_polled = create_actors(count, more).second;
  }
  std::sort(full_ms.begin(), full_ms.end());
  emit("placement_p99_ms_status_polled" + tag, p99_polled, "ms", "placement_p99_ms", p99);
  emit("status_json_ms_polled" + tag, full_ms[full_ms.size() / 2], "ms");
  for (auto& a : more) made.push_back(std::move(a));
}

// Single-bundle groups created, waited for and removed one at a time by one client, for 3 s; then
// `groups` of them alive at once: created (all asked for, then each waited for), what they cost the
// head and Redis, the status summary with them, and their removal.
void measure_groups(Cluster& c, Store& redis, const std::string& tag, int groups) {
  int k = 0;
  auto t0 = Clock::now();
  for (; secs_since(t0) < 3.0; ++k) create_remove_group();
  emit("pg_create_remove_per_s" + tag, k / secs_since(t0), "groups/s");
  if (groups <= 0) return;
  double rss0 = rss_mb(c.head_pid), redis0 = redis_used_mb(redis);
  std::vector<yard::PlacementGroup> alive;
  alive.reserve(size_t(groups));
  t0 = Clock::now();
  for (int i = 0; i < groups; ++i) alive.push_back(yard::placement_group({{{"sim", 1}}}));
  for (auto& g : alive)
    if (!g.wait(120s)) throw std::runtime_error("placement group not placed");
  std::string n = std::to_string(groups);
  emit("pg_create_alive_per_s" + tag + "_" + n, groups / secs_since(t0), "groups/s");
  emit("head_rss_mb_per_1k_groups" + tag, (rss_mb(c.head_pid) - rss0) * 1000.0 / groups, "MB");
  emit("redis_mb_per_1k_groups" + tag, (redis_used_mb(redis) - redis0) * 1000.0 / groups, "MB");
  double ms = 0;
  c.run_status("", &ms);
  emit("status_ms" + tag + "_" + n + "_groups", ms, "ms");
  // Removal does not wait for the head (as in Ray): until the summary counts none left.
  t0 = Clock::now();
  for (auto& g : alive) g.remove();
  while (secs_since(t0) < 120 && groups_left_in_summary(c.run_status("", nullptr)) > 0) {
  }
  emit("pg_remove_per_s" + tag + "_" + n, groups / secs_since(t0), "groups/s");
}

// The actors, in three phases (the file's head says what each case measures): one on every node
// (first contacts), `actors` one by one, `batched` in batches; what a creation costs all
// processes in each phase, a later call over open links, what the actors cost the head and Redis,
// and the status summary with them all alive. `trips`: the transport's fan-out at this size.
void measure_actors(Cluster& c, Store& redis, const std::string& tag, int actors, int batched,
                    const yard::bench::fanout::Figures& trips, const Figures& smallest, std::vector<Counter>& made) {
  double head_rss0 = rss_mb(c.head_pid), redis0 = redis_used_mb(redis);
  int first = std::min(c.nodes, actors);
  auto cpu0 = c.cpu();
  double first_rate = create_batched(first, made);
  auto cpu1 = c.cpu();
  double head_rss1 = rss_mb(c.head_pid);
  emit("actor_create_first_contact_per_s" + tag, first_rate, "actors/s");
  emit_cpu("actor_create_first_contact_cpu_ms", tag, cpu0, cpu1, first);
  emit("head_rss_mb_per_1k_first_contacts" + tag, (head_rss1 - head_rss0) * 1000.0 / first, "MB");

  auto [one_by_one_rate, p99] = create_actors(actors, made);
  auto cpu2 = c.cpu();
  emit_cpu("actor_create_one_by_one_cpu_ms", tag, cpu1, cpu2, actors);
  emit_against_smallest("actor_create_one_by_one_per_s", tag, one_by_one_rate, "actors/s", smallest);
  emit("placement_p99_ms" + tag, p99, "ms");

  double rate = create_batched(batched, made);
  auto cpu3 = c.cpu();
  emit_cpu("actor_create_cpu_ms", tag, cpu2, cpu3, batched);
  emit_against_smallest("actor_create_per_s", tag, rate, "actors/s", smallest);
  if (!smallest.empty()) {
    // The most creation could reach here if nothing grew but what the transport's two fan-out
    // round trips (head -> node, driver -> node) cost: in wall time, and in CPU at the smallest
    // size's rate per CPU. Their ratios bound the case's.
    double rate0 = smallest.at("actor_create_per_s"), cpu0_ms = smallest.at("actor_create_cpu_ms");
    double trip_cpu0_us = smallest.at("zmq_fanout_cpu_us_sender") + smallest.at("zmq_fanout_cpu_us_echo");
    double wall = 1 / (1 / rate0 + 2 * (1 / trips.per_s - 1 / smallest.at("zmq_fanout_per_s")));
    emit("actor_create_per_s_transport_bound" + tag, wall, "actors/s", "actor_create_per_s_smallest_size", rate0);
    double grown_ms = 2 * (trips.sender_cpu_us + trips.echo_cpu_us - trip_cpu0_us) / 1000;
    emit("actor_create_per_s_transport_cpu_bound" + tag, rate0 * cpu0_ms / (cpu0_ms + grown_ms), "actors/s",
         "actor_create_per_s_smallest_size", rate0);
  }
  emit("head_rss_mb_per_1k_actors" + tag, (rss_mb(c.head_pid) - head_rss1) * 1000.0 / (actors + batched), "MB");
  emit("redis_mb_per_1k_actors" + tag, (redis_used_mb(redis) - redis0) * 1000.0 / double(made.size()), "MB");

  // One more call to every actor, one at a time, over the links the first calls opened.
  for (auto& a : made)
    if (!a.call(&yard::SimulatedCounter::add).remote(int64_t{0}).get(120s)) throw std::runtime_error("no answer");
  emit("actor_call_cpu_ms" + tag, (c.cpu_all() - cpu3.all()) * 1000 / double(made.size()), "ms");
  double ms = 0;
  c.run_status("", &ms);
  c.run_status("", &ms);
  emit("status_ms" + tag + "_" + std::to_string(made.size()) + "_actors", ms, "ms");
  measure_placement_polled(c, tag, std::min(actors, 400), p99, made);
}

// One more simulated node, killed: seconds until the head marks it DEAD.
void measure_dead_node(Cluster& c, const std::string& tag) {
  auto [pid, addr] = c.simulate(1, "victim");
  std::string id;
  for (int tries = 0; id.empty() && tries < 500; ++tries) {
    for (auto& n : yard::nodes())
      if (n.address == addr) id = n.id;
    if (id.empty()) std::this_thread::sleep_for(10ms);
  }
  auto t0 = Clock::now();
  kill(pid, SIGKILL);
  double secs = -1;
  while (secs_since(t0) < 60) {
    if (yard::node_state(id) == yard::NodeState::kDead) {
      secs = secs_since(t0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  emit("dead_node_detect_s" + tag, secs, "s", "heartbeat_timeout_plus_1s", kHeartbeatTimeout + 1);
}

// kill -9 of the head with every actor alive: seconds until a new head at the same address answers
// `yard status` with them all ALIVE.
void measure_takeover(Cluster& c, const std::string& tag, int actors) {
  kill(c.head_pid, SIGKILL);
  while (!yard::sys::process_dead(c.head_pid)) std::this_thread::sleep_for(10ms);
  auto t0 = Clock::now();
  auto port = c.head.substr(c.head.rfind(':') + 1);
  c.head_pid = c.start_head(port).first;
  double secs = -1;
  while (secs_since(t0) < 300) {
    if (alive_in_summary(c.run_status("", nullptr)) >= actors) {
      secs = secs_since(t0);
      break;
    }
  }
  emit("takeover_s" + tag + "_" + std::to_string(actors) + "_actors", secs, "s");
}

// What a soak samples: memory and open files of the long-lived processes.
struct Sample {
  double t, head_mb, head_fds, redis_mb, redis_keys, driver_mb, driver_heap_mb, sims_mb;
};

Sample take_sample(Cluster& c, Store& redis, double t) {
  auto fds = [](pid_t pid) {
    std::error_code ec;
    double n = 0;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec); !ec && it != fs::directory_iterator();
         it.increment(ec))
      ++n;
    return n;
  };
  double sims = 0;
  for (auto p : c.sims) sims += rss_mb(p);
  return {t, rss_mb(c.head_pid), fds(c.head_pid), redis_used_mb(redis),
          double(redis.cmd({"DBSIZE"}).integer()), rss_mb(getpid()), double(yard::sys::heap_bytes_in_use()) / 1e6, sims};
}

// SCALE_SOAK_S seconds of a cluster whose size stays the same: 1,000 actors alive, the oldest 100
// killed and 100 new ones created in turn, and 100 groups created and removed, without pause.
// Sampled every minute (stderr); reported: each figure when a third of the time has passed (the
// dead actors the head remembers have reached their cap by then) and its growth over the rest.
void run_soak(Cluster& c, Store& redis, const std::string& tag, double seconds) {
  std::deque<Counter> alive;
  long created = 0;
  auto t0 = Clock::now();
  double next = 0;
  std::optional<Sample> third;
  while (secs_since(t0) < seconds) {
    if (secs_since(t0) >= next) {
      auto x = take_sample(c, redis, secs_since(t0));
      std::fprintf(stderr, "soak %4.0f s: head %.1f MB, %.0f files; redis %.1f MB, %.0f keys; driver %.1f MB (heap in use %.1f); simulators %.1f MB; %ld actors made\n",
                   x.t, x.head_mb, x.head_fds, x.redis_mb, x.redis_keys, x.driver_mb, x.driver_heap_mb, x.sims_mb, created);
      if (!third && x.t >= seconds / 3) third = x;
      next += 60;
    }
    std::vector<Counter> fresh;
    create_actors(100, fresh);
    created += 100;
    for (auto& a : fresh) alive.push_back(std::move(a));
    for (; alive.size() > 1000; alive.pop_front()) alive.front().kill();
    for (int i = 0; i < 100; ++i) create_remove_group();
  }
  auto end = take_sample(c, redis, secs_since(t0));
  if (!third) third = end;
  emit("soak_actors_made_per_s" + tag, double(created) / end.t, "actors/s");
  auto both = [&](const char* what, double at_third, double at_end, const char* unit) {
    emit(std::string("soak_") + what + tag, at_third, unit);
    emit(std::string("soak_") + what + "_growth" + tag, at_end - at_third, unit);
  };
  both("head_rss_mb", third->head_mb, end.head_mb, "MB");
  both("head_open_files", third->head_fds, end.head_fds, "files");
  both("redis_mb", third->redis_mb, end.redis_mb, "MB");
  both("redis_keys", third->redis_keys, end.redis_keys, "keys");
  both("driver_rss_mb", third->driver_mb, end.driver_mb, "MB");
  both("driver_heap_mb", third->driver_heap_mb, end.driver_heap_mb, "MB");
  both("simulators_rss_mb", third->sims_mb, end.sims_mb, "MB");
  for (auto& a : alive) a.kill();
}

void run_size(const std::string& yard_bin, int n, int actors, int batched, int groups, const Figures& smallest) {
  std::string tag = "_" + std::to_string(n) + "n";
  // The transport alone, before the cluster starts (scale_fanout.h).
  auto trips = yard::bench::fanout::round_trips(n, kPerSimProcess, 20000, 1000);
  emit_against_smallest("zmq_fanout_per_s", tag, trips.per_s, "round trips/s", smallest);
  emit("zmq_fanout_cpu_us_sender" + tag, trips.sender_cpu_us, "us");
  emit("zmq_fanout_cpu_us_echo" + tag, trips.echo_cpu_us, "us");
  if (getenv("SCALE_FANOUT_ONLY")) return;
  Cluster c(yard_bin, n);
  yard::init();
  Store redis;
  if (const char* soak = getenv("SCALE_SOAK_S")) {
    run_soak(c, redis, tag, std::atof(soak));
    yard::shutdown();
    return;
  }
  measure_idle(c, tag);
  measure_status(c, tag);
  measure_groups(c, redis, tag, groups);
  std::vector<Counter> made;
  measure_actors(c, redis, tag, actors, batched, trips, smallest, made);
  measure_dead_node(c, tag);
  measure_takeover(c, tag, int(made.size()));
  // Every actor killed (by the new head): until the summary counts none alive.
  auto t0 = Clock::now();
  for (auto& a : made) a.kill();
  while (secs_since(t0) < 600 && alive_in_summary(c.run_status("", nullptr)) > 0) {
  }
  emit("actor_kill_per_s" + tag, double(made.size()) / secs_since(t0), "actors/s");
  yard::shutdown();
}

}  // namespace

// One cluster size per process (yard::init once per process); the parent runs each size in turn
// and passes the smallest size's figures on, for the ratios.
int main(int argc, char** argv) {
  // This binary is the job's: a worker the cluster starts from it (a warm pool) serves, no more.
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
  // An echo process of the transport's own measure (scale_fanout.h).
  if (argc == 5 && std::string(argv[1]) == "--echo-nodes")
    return yard::bench::fanout::serve_echo(std::atoi(argv[2]), std::atoi(argv[4]));
  std::string yard_bin = argc > 1 ? argv[1] : "build/scheduler/yard";
  int actors = getenv("SCALE_ACTORS") ? std::atoi(getenv("SCALE_ACTORS")) : 1000;
  int groups = getenv("SCALE_GROUPS") ? std::atoi(getenv("SCALE_GROUPS")) : 1000;
  int batched = getenv("SCALE_BATCHED") ? std::atoi(getenv("SCALE_BATCHED")) : 5000;
  if (const char* one = getenv("SCALE_ONE_SIZE")) {
    run_size(yard_bin, std::atoi(one), actors, batched, groups,
             yard::bench::scale::smallest_figures(getenv("SCALE_SMALLEST")));
    return 0;
  }
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {100, 1000};
  std::string smallest;  // its cases, "name value ...", once the smallest size has run
  for (int n : sizes) {
    std::string tag = "_" + std::to_string(n) + "n", cases;
    std::string cmd = "SCALE_ONE_SIZE=" + std::to_string(n) + " SCALE_SMALLEST='" + smallest + "' '" +
                      yard::sys::self_exe() + "' '" + yard_bin + "'";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return 1;
    char line[4096];
    while (fgets(line, sizeof line, p)) {
      std::fputs(line, stdout);
      std::fflush(stdout);
      yard::bench::scale::add_case(cases, line, tag);
    }
    if (pclose(p) != 0) return 1;
    if (smallest.empty()) smallest = cases;
  }
  return 0;
}
