#include "run_log.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "yard/railway/sim.h"

namespace fs = std::filesystem;

namespace railway_train {

namespace {

// The lines of a JSON-lines file that parse (a line cut short by a crash does not).
std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

// A plot that cannot be drawn is said and passed over: the numbers are in the JSON-lines files,
// and training goes on.
void draw(const std::string& path, const yard::railway::PlotSpec& spec) {
  try {
    yard::railway::write_plot(path, spec);
  } catch (const yard::railway::PlotError& e) {
    std::fprintf(stderr, "railway-train: %s\n", e.what());
  }
}

}  // namespace

RunLog::RunLog(std::string out, bool continuing) : out_(std::move(out)) {
  fs::create_directories(out_);
  std::string metrics = out_ + "/metrics.jsonl", steps = out_ + "/steps.jsonl";
  if (continuing) {
    // Rewrite both without a line a crash may have cut short.
    auto ms = read_lines(metrics);
    std::ofstream m(metrics, std::ios::trunc);
    for (auto& j : ms) {
      m << j.dump() << "\n";
      if (j.value("event", "") == "recovery") ++recoveries_;
      if (j.value("event", "") != "epoch") continue;
      auto e = j.value("epoch", uint64_t(0));
      reported_ = std::max(reported_, e);
    }
    auto ss = read_lines(steps);
    std::ofstream s(steps, std::ios::trunc);
    for (auto& j : ss) {
      s << j.dump() << "\n";
      last_step_ = std::max(last_step_, j.value("step", int64_t(0)));
      logged_ = last_step_;
    }
  }
  metrics_.open(metrics, continuing ? std::ios::app : std::ios::trunc);
  steps_.open(steps, continuing ? std::ios::app : std::ios::trunc);
  if (!metrics_ || !steps_) throw std::runtime_error("cannot write " + metrics + " or " + steps);
}

void RunLog::step(const StepLine& s) {
  nlohmann::json j = {{"step", s.step}, {"epoch", s.epoch}, {"loss", s.loss}, {"samples", s.samples}};
  if (s.ahead >= 0) j["ahead"] = s.ahead, j["stale_updates"] = s.stale;
  if (s.t > 0) j["t"] = std::round(s.t * 1000) / 1000;
  if (s.shares.size() > 1) {
    j["shares"] = s.shares;
    auto ms = [](const std::vector<double>& v) {
      std::vector<double> out;
      for (double x : v) out.push_back(std::round(x * 1e5) / 1e5);
      return out;
    };
    j["busy_s"] = ms(s.busy_s), j["wait_s"] = ms(s.wait_s);
  }
  steps_ << j.dump() << "\n";
  steps_.flush();
  logged_ = s.step;
}

std::map<int64_t, RunLog::StepLine> steps_by_global(const std::vector<ChunkStats>& got, int64_t last_logged) {
  std::map<int64_t, RunLog::StepLine> by_step;
  for (size_t rank = 0; rank < got.size(); ++rank) {
    const auto& g = got[rank];
    for (size_t i = 0; i < g.loss_sum.size(); ++i) {
      // A batch handed out again after its trainer was lost may count in a step already written:
      // it goes with the first new one.
      int64_t key = i < g.steps.size() ? g.steps[i] : static_cast<int64_t>(i);
      if (key <= last_logged) key = last_logged + 1;
      auto& t = by_step[key];
      t.loss += g.loss_sum[i], t.samples += g.samples[i];
      if (i < g.step_end.size()) t.t = std::max(t.t, g.step_end[i]);
      // Parameter servers: the most any replica's gradients of this step missed.
      if (i < g.ahead.size()) t.ahead = std::max(t.ahead, g.ahead[i]), t.stale = std::max(t.stale, g.stale_updates[i]);
      // Data parallel: each rank's share and times (ranks in order; one that cut the step short is left out).
      if (i < g.busy_s.size() && t.shares.size() == rank)
        t.shares.push_back(g.samples[i]), t.busy_s.push_back(g.busy_s[i]), t.wait_s.push_back(g.wait_s[i]);
    }
  }
  return by_step;
}

void RunLog::rewind(int64_t global_step) {
  steps_.close();
  std::string path = out_ + "/steps.jsonl";
  auto lines = read_lines(path);
  {
    std::ofstream s(path, std::ios::trunc);
    for (auto& j : lines)
      if (j.value("step", int64_t(0)) <= global_step) s << j.dump() << "\n";
  }
  steps_.open(path, std::ios::app);
  logged_ = std::min(logged_, global_step);
}

void RunLog::epoch(const EpochRecord& e) {
  nlohmann::json j = {{"event", "epoch"},
                      {"epoch", e.epoch},
                      {"steps", e.steps},
                      {"train_loss", e.train_loss},
                      {"val_loss", e.val.loss},
                      {"val_macro_f1", e.val.macro_f1},
                      {"val_accuracy", e.val.accuracy},
                      {"val_amplitude_rmse_mm", e.val.amplitude_rmse},
                      {"samples_per_s", e.samples_per_s},
                      {"workers", e.workers},
                      {"restarts", e.restarts},
                      {"recoveries", recoveries_},
                      {"step_ms", e.step_ms},
                      {"checkpoint_stall_ms", e.checkpoint_stall_ms}};
  nlohmann::json per = nlohmann::json::object();
  for (size_t c = 0; c < e.val.precision.size() && c < 5; ++c) {
    auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    per[yard::railway::defect_name(static_cast<yard::railway::DefectClass>(c))] = {{"precision", num(e.val.precision[c])}, {"recall", num(e.val.recall[c])}};
  }
  j["val_per_class"] = per;
  j["val_confusion"] = e.val.confusion;
  metrics_ << j.dump() << "\n";
  metrics_.flush();
  reported_ = std::max(reported_, e.epoch);
}

void RunLog::evaluation_images(const EvalStats& ev, uint64_t epoch) const {
  if (ev.confusion.size() != 25) return;
  std::vector<std::string> names;
  for (int c = 0; c < 5; ++c) names.push_back(yard::railway::defect_name(static_cast<yard::railway::DefectClass>(c)));
  yard::railway::write_svg_confusion(out_ + "/confusion.svg",
                                     "Held-out windows after epoch " + std::to_string(epoch) + " (rows: true class)", names,
                                     ev.confusion);
  yard::railway::PlotSpec pr;
  pr.title = "Precision against recall per class, held-out windows, epoch " + std::to_string(epoch);
  pr.xlabel = "recall";
  pr.ylabel = "precision";
  pr.xrange = pr.yrange = std::pair{0.0, 1.0};  // both are shares: the whole square, always
  for (size_t c = 0; c < ev.pr_curve.size(); ++c) {
    yard::railway::PlotSeries s{.name = names[c + 1]};
    for (size_t k = 0; k + 1 < ev.pr_curve[c].size(); k += 2) s.x.push_back(ev.pr_curve[c][k]), s.y.push_back(ev.pr_curve[c][k + 1]);
    pr.series.push_back(std::move(s));
  }
  draw(out_ + "/precision_recall.svg", pr);
}

void RunLog::recovery(const Recovery& r) {
  ++recoveries_;
  if (r.asked)
    std::printf("resumed: %s in %s (%s); %s\n", r.lost.c_str(), phase_name(r.phase), r.error.c_str(), r.redone.c_str());
  else
    std::printf("recovered: %s was lost in %s (%s); %s; took %.1f s\n", r.lost.c_str(), phase_name(r.phase),
                r.error.c_str(), r.redone.c_str(), r.seconds);
  std::fflush(stdout);
  nlohmann::json j = {{"event", "recovery"}, {"phase", phase_name(r.phase)}, {"lost", r.lost},
                      {"error", r.error},    {"redone", r.redone},           {"seconds", r.seconds},
                      {"steps_redone", r.steps_redone}, {"asked", r.asked}};
  metrics_ << j.dump() << "\n";
  metrics_.flush();
}

void RunLog::resize(const yard::actors::ElasticResize& r, double lr, double pause) {
  std::printf("resized: %d -> %d trainers at step %lld, lr %.3e, training paused %.2f s (regroup %.2f s, %.1f MB of state sent)\n",
              r.old_world, r.new_world, static_cast<long long>(r.step), lr, pause, r.seconds, double(r.bytes) / 1e6);
  std::fflush(stdout);
  nlohmann::json j = {{"event", "resize"}, {"time", r.time},          {"old_world", r.old_world}, {"new_world", r.new_world},
                      {"step", r.step},    {"lr", lr},                {"pause_s", pause},         {"regroup_s", r.seconds},
                      {"why", r.why},      {"from_checkpoint", r.from_disk}, {"state_bytes", r.bytes}};
  metrics_ << j.dump() << "\n";
  metrics_.flush();
}

// Per step from steps.jsonl: the training loss, and its mean over a window of about 2 % of the
// steps; per epoch from metrics.jsonl, where the epoch's last step is: the validation loss, and
// the validation macro-F1 against the right-hand axis (0 to 1).
void RunLog::write_curves() const {
  yard::railway::PlotSpec p;
  p.title = "Railway model training";
  p.xlabel = "step";
  p.ylabel = "loss";
  p.y2label = "validation macro-F1";
  p.y2range = std::pair{0.0, 1.0};
  yard::railway::PlotSeries loss{.name = "train loss per step", .color = "#aec7e8"};
  yard::railway::PlotSeries mean{.color = "#1f77b4"};
  std::map<uint64_t, int64_t> epoch_end;  // an epoch's last step
  for (auto& j : read_lines(out_ + "/steps.jsonl")) {
    auto step = j.value("step", int64_t(0));
    loss.x.push_back(double(step)), loss.y.push_back(j.value("loss", std::nan("")));
    auto& end = epoch_end[j.value("epoch", uint64_t(0))];
    end = std::max(end, step);
  }
  size_t window = std::max<size_t>(1, loss.y.size() / 50);
  mean.name = "train loss, mean of " + std::to_string(window) + " steps";
  double sum = 0;
  size_t counted = 0;
  for (size_t i = 0; i < loss.y.size(); ++i) {
    if (std::isfinite(loss.y[i])) sum += loss.y[i], ++counted;
    if (i >= window && std::isfinite(loss.y[i - window])) sum -= loss.y[i - window], --counted;
    if (i + 1 >= window && counted > 0) mean.x.push_back(loss.x[i]), mean.y.push_back(sum / double(counted));
  }
  yard::railway::PlotSeries val{.name = "validation loss (per epoch)", .style = yard::railway::PlotStyle::kLinePoints};
  yard::railway::PlotSeries f1{.name = "validation macro-F1 (per epoch, right axis)",
                               .style = yard::railway::PlotStyle::kLinePoints, .right_axis = true};
  for (auto& j : read_lines(out_ + "/metrics.jsonl")) {
    if (j.value("event", "") != "epoch") continue;
    auto e = j.value("epoch", uint64_t(0));
    auto it = epoch_end.find(e);
    if (it == epoch_end.end()) continue;  // its steps were not logged (a run resumed elsewhere)
    val.x.push_back(double(it->second)), val.y.push_back(j.value("val_loss", std::nan("")));
    f1.x.push_back(double(it->second)), f1.y.push_back(j.value("val_macro_f1", std::nan("")));
  }
  p.series = {std::move(loss), std::move(mean), std::move(val), std::move(f1)};
  draw(out_ + "/curves.svg", p);
}

}  // namespace railway_train
