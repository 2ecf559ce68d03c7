// bench/run shortage admissions: the job queue's admission decisions alone, at 10,000 jobs.
//
// A real head and its Redis, and simulated nodes (one simulator process, `yard start --simulate`)
// that declare the capacity: each offers 100,000 `sim` slots, so every job fits. JOBS (default
// 10,000) one-replica jobs (`--replicas 1:1 --replica sim=1`) are submitted to the head as `yard
// submit` submits them, IN_FLIGHT (default 64) at a time, with `--entrypoint-resources sim=1`: an
// admitted job's program is started on a simulated node, which runs no process. The head answers
// a submission once its queue has decided it (admitted, or why it waits), so a submission's round
// trip is its decision's latency.
//
// Cases:
//   admissions_per_s          jobs admitted ÷ seconds from the first submission to the last answer
//                             (target >= 1,000/s)
//   admission_decision_p99_ms p99 of submission -> its answer (target <= 20 ms)
//   admission_decision_p50_ms the median
// `settings` says how durably the queue's records were written (Redis' appendonly and
// appendfsync, and the replicas a write waits for).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scale_cluster.h"
#include "yard/internal/control_client.h"
#include "yard/internal/messaging.h"
#include "yard/yard.h"

namespace {

using namespace yard::detail;
using yard::bench::scale::Clock;
using yard::bench::scale::secs_since;

constexpr int kNodes = 20;

struct Tally {
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0, admitted = 0, waiting = 0, failed = 0;
  std::string first_problem;
  std::vector<double> ms;
  Clock::time_point last_answer;
};

void submit_one(Channel& io, const std::string& head, const std::string& token, Tally& t) {
  uint64_t rid = io.next_request_id();
  OutMessage m(token, rid, false);
  auto sj = m.env().getBody().initSubmitJob();
  sj.initEntrypoint(1).set(0, "admission-bench-job");
  sj.setCwd("/");
  set_resources(sj.initEntrypointResources(1), {{"sim", 1}});
  auto sh = sj.initShape();
  sh.setMinReplicas(1);
  sh.setMaxReplicas(1);
  set_resources(sh.initReplica(1), {{"sim", 1}});
  auto sent = Clock::now();
  io.request(
      head, rid, m.finish(),
      [&t, sent](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
        double ms = secs_since(sent) * 1000;
        std::lock_guard l(t.mu);
        std::string problem;
        if (err) {
          problem = err->message;
        } else if (r->env().getBody().isError()) {
          problem = describe(r->env().getBody().getError());
        } else {
          auto ji = r->env().getBody().getJobInfo();
          if (std::string(ji.getStatus().cStr()) == "RUNNING") {
            ++t.admitted;
          } else {
            ++t.waiting;
            if (t.first_problem.empty())
              t.first_problem = "waits: " + std::string(ji.getWaitReason().cStr()) + " " + ji.getWaitDetail().cStr();
          }
        }
        if (!problem.empty()) {
          ++t.failed;
          if (t.first_problem.empty()) t.first_problem = problem;
        }
        t.ms.push_back(ms);
        t.last_answer = Clock::now();
        --t.outstanding;
        t.cv.notify_all();
      },
      std::chrono::seconds(60));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// How the control store keeps what the queue writes.
nlohmann::json durability() {
  nlohmann::json d;
  try {
    auto c = cluster_control();
    c->run([&](Redis& r) {
      for (const char* k : {"appendonly", "appendfsync", "min-replicas-to-write"}) {
        auto rep = r.cmd({"CONFIG", "GET", k});
        if (rep.size() == 2) d[k] = rep.at(1);
      }
      return 0;
    });
  } catch (const std::exception& e) {
    d["unknown"] = e.what();
  }
  return d;
}

void emit(const char* name, double value, const char* unit, const nlohmann::json& settings) {
  nlohmann::json o{{"suite", "shortage"}, {"case", name}, {"value", value}, {"unit", unit}, {"settings", settings}};
  std::printf("%s\n", o.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: admission_bench YARD_BIN [JOBS] [IN_FLIGHT]\n");
    return 2;
  }
  int jobs = argc > 2 ? std::atoi(argv[2]) : 10000;
  int in_flight = argc > 3 ? std::atoi(argv[3]) : 64;
  yard::bench::scale::Cluster cluster(argv[1], kNodes);
  nlohmann::json settings{{"jobs", jobs}, {"in_flight", in_flight}, {"simulated_nodes", kNodes},
                          {"slots_per_node", 100000}, {"job", "--replicas 1:1 --replica sim=1 --entrypoint-resources sim=1"}};
  Channel io;
  io.open(std::make_unique<IoLoop>("127.0.0.1", 0, cluster.token, [](IoLoop::Incoming) {}));
  Tally t;
  auto t0 = Clock::now();
  for (int i = 0; i < jobs; ++i) {
    {
      std::unique_lock l(t.mu);
      t.cv.wait(l, [&] { return t.outstanding < in_flight; });
      ++t.outstanding;
    }
    submit_one(io, cluster.head, cluster.token, t);
  }
  {
    std::unique_lock l(t.mu);
    if (!t.cv.wait_for(l, std::chrono::seconds(120), [&] { return t.outstanding == 0; }))
      std::fprintf(stderr, "admission_bench: %d submissions unanswered after 120 s\n", t.outstanding);
  }
  io.close();
  yard::init();  // this process joins as a driver, for the control store's settings
  settings["durability"] = durability();
  std::lock_guard l(t.mu);
  double secs = std::chrono::duration<double>(t.last_answer - t0).count();
  settings["admitted"] = t.admitted;
  settings["waiting"] = t.waiting;
  settings["failed"] = t.failed;
  if (!t.first_problem.empty()) settings["first_problem"] = t.first_problem;
  std::fprintf(stderr, "admission_bench: %d admitted, %d waiting, %d failed in %.2f s%s%s\n", t.admitted, t.waiting,
               t.failed, secs, t.first_problem.empty() ? "" : "; first: ", t.first_problem.c_str());
  emit("admissions_per_s", secs > 0 ? t.admitted / secs : 0, "jobs/s", settings);
  emit("admission_decision_p99_ms", percentile(t.ms, 0.99), "ms", settings);
  emit("admission_decision_p50_ms", percentile(t.ms, 0.50), "ms", settings);
  yard::shutdown();
  return t.failed == 0 && t.admitted == jobs ? 0 : 1;
}
