// railway-align: aligns a log directory's sensor clocks to the GNSS PPS reference and, with
// --report, prints the errors against the ground truth.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "yard/railway/align.h"
#include "yard/railway/plot.h"
#include "yard/railway/position.h"
#include "yard/railway/resample.h"
#include "yard/railway/shards.h"

namespace rw = yard::railway;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string in, json_out, plots, shards;
  bool report = false, strict = false, unaligned = false;
  rw::ShardOptions so;
  double timebase_hz = 0;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--in", a.in, "log directory (one CSV per sensor, *_pps.csv edges with *_time.nmea or gnss.nmea)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_flag("--report", a.report, "print the errors against the truth (when present) and plot them");
  app.add_option("--plots", a.plots, "with --report: directory for the SVG plots (default: the input directory)");
  app.add_option("--json", a.json_out, "write the fits (and errors) as JSON here");
  app.add_flag("--strict", a.strict, "stop at the first malformed line instead of dropping and counting it");
  app.add_option("--shards", a.shards, "write training shards (windows of distance-domain tokens) here");
  app.add_option("--window", a.so.tokens, "tokens per window (0.25 m each)")->default_val(128)->check(CLI::Range(16, 1024));
  app.add_option("--stride", a.so.stride, "tokens between window starts")->default_val(64)->check(CLI::Range(1, 1024));
  app.add_flag("--unaligned", a.unaligned, "the baseline without alignment: raw clocks and raw odometer distance");
  app.add_option("--timebase", a.timebase_hz,
                 "also write the IMU and odometer resampled onto one GNSS-time grid at this rate (Hz) into DIR/aligned/")
      ->check(CLI::Range(1.0, 1000.0));
}

// The position and clock errors against the truth, as plots in `dir`.
void plot_errors(const std::string& dir, const rw::PositionReport& pr, const std::map<std::string, rw::ClockReport>& r) {
  fs::create_directories(dir);
  rw::write_plot(dir + "/position_error_over_time.svg",
                 {.title = "Along-track position error", .xlabel = "GNSS time (s)", .ylabel = "estimate - truth (m)",
                  .series = {{.name = "chainage error", .x = pr.t, .y = pr.error_m}}});
  rw::write_plot(dir + "/position_error_over_chainage.svg",
                 {.title = "Along-track position error", .xlabel = "chainage (m)", .ylabel = "estimate - truth (m)",
                  .series = {{.name = "chainage error", .x = pr.chainage, .y = pr.error_m}}});
  rw::PlotSpec clocks{.title = "Clock alignment error per sensor", .xlabel = "GNSS time (s)",
                      .ylabel = "mapped - true time (us)"};
  for (auto& [name, rep] : r)
    if (!rep.error_t.empty()) clocks.series.push_back({.name = name, .x = rep.error_t, .y = rep.error_us});
  rw::write_plot(dir + "/time_error_over_time.svg", clocks);
  std::printf("plots: %s/{time_error_over_time,position_error_over_time,position_error_over_chainage}.svg\n", dir.c_str());
}

// The position track's summary (and with --report, its errors against the truth and the plots).
void report_position(const Args& a, const std::map<std::string, rw::ClockReport>& r, const rw::PositionTrack& track,
                     nlohmann::json& j) {
  std::printf("\nposition: %zu estimates, GNSS fixes used %llu (rejected %llu), balises %llu, %zu slip/slide intervals\n",
              track.t.size(), (unsigned long long)track.gnss_used, (unsigned long long)track.gnss_rejected,
              (unsigned long long)track.balises_used, track.slips.size());
  std::printf("odometer clock (from speed cross-correlation): drift %.2f ppm, offset %.4f s\n",
              track.odometer_clock.drift_ppm, track.odometer_clock.segments[0].offset_s);
  j["position"] = {{"estimates", track.t.size()}, {"gnss_used", track.gnss_used}, {"gnss_rejected", track.gnss_rejected},
                   {"slips", track.slips.size()}};
  if (!a.report || !fs::exists(a.in + "/truth.csv")) return;
  auto pr = rw::evaluate_position(a.in, track);
  std::printf("chainage error: rms %.3f m, max %.3f m, worst in a GNSS outage >= 30 s: %.3f m\n"
              "slip/slide detection: recall %.3f, precision %.3f\n",
              pr.chainage_rms_m, pr.chainage_max_m, pr.outage_max_m, pr.slip_recall, pr.slip_precision);
  j["position"]["chainage_rms_m"] = pr.chainage_rms_m;
  j["position"]["chainage_max_m"] = pr.chainage_max_m;
  j["position"]["chainage_outage30s_max_m"] = pr.outage_max_m;
  j["position"]["slip_detect_recall"] = pr.slip_recall;
  j["position"]["slip_detect_precision"] = pr.slip_precision;
  plot_errors(a.plots.empty() ? a.in : a.plots, pr, r);
}

// A sensor's columns resampled onto a GNSS-time grid of `hz`: DIR/aligned/NAME.csv.
void write_resampled(const std::string& in, const std::string& name, const rw::ClockFit& fit, double hz) {
  rw::ReadPolicy p;
  p.non_monotonic = rw::OnBad::kDrop;
  rw::SensorCsvReader rd(in + "/" + name + ".csv", p);
  rw::ClockMapper mapper(fit);
  std::vector<double> t;
  std::vector<std::vector<double>> cols(rd.columns().size() - 1);
  rw::SensorRow row;
  while (rd.next(row)) {
    double ref = mapper.map(row.time);
    if (!t.empty() && ref <= t.back()) continue;
    t.push_back(ref);
    for (size_t c = 0; c < cols.size() && c < row.values.size(); ++c) cols[c].push_back(row.values[c]);
  }
  if (t.size() < 2) return;
  double t0 = std::ceil(t.front()), t1 = std::floor(t.back());
  std::vector<rw::Grid> grids;
  for (auto& c : cols) grids.push_back(rw::resample(t, c, hz, t0, t1));
  FILE* f = std::fopen((in + "/aligned/" + name + ".csv").c_str(), "w");
  std::fprintf(f, "gps_time");
  for (size_t c = 1; c < rd.columns().size(); ++c) std::fprintf(f, ",%s", rd.columns()[c].c_str());
  std::fprintf(f, "\n");
  for (size_t i = 0; i < grids[0].values.size(); ++i) {
    std::fprintf(f, "%.6f", t0 + i / hz);
    for (auto& g : grids) std::fprintf(f, ",%.5f", g.values[i]);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

void print_shards(const rw::ShardManifest& m, const std::string& dir) {
  std::printf("\nwrote %llu windows in %zu shards to %s (classes none/squat/weld/insulated/corrugation: %llu/%llu/%llu/%llu/%llu)\n",
              (unsigned long long)m.windows, m.files.size(), dir.c_str(), (unsigned long long)m.class_counts[0],
              (unsigned long long)m.class_counts[1], (unsigned long long)m.class_counts[2],
              (unsigned long long)m.class_counts[3], (unsigned long long)m.class_counts[4]);
}

int run(Args& a) {
  rw::ReadPolicy policy;
  if (a.strict) policy.malformed = policy.non_finite = rw::OnBad::kStop;
  auto r = rw::align_clocks(a.in, policy);
  std::cout << rw::to_table(r);
  if (a.report)
    for (auto& [name, rep] : r)
      if (rep.read.dropped_total()) std::cout << name << ": " << rep.read.to_string() << "\n";
  auto j = rw::to_json(r);
  // The position track, made once for whatever below needs it.
  std::optional<rw::PositionTrack> track_cache;
  auto track = [&]() -> const rw::PositionTrack& {
    if (!track_cache) track_cache = rw::estimate_position(a.in, r);
    return *track_cache;
  };
  if (fs::exists(a.in + "/line.json") && fs::exists(a.in + "/odometer.csv")) report_position(a, r, track(), j);
  if (a.timebase_hz > 0) {
    const auto& t = track();
    fs::create_directories(a.in + "/aligned");
    if (r.count("imu")) write_resampled(a.in, "imu", r.at("imu").fit, a.timebase_hz);
    write_resampled(a.in, "odometer", t.odometer_clock, a.timebase_hz);
    std::printf("\nresampled imu and odometer onto a %.0f Hz GNSS-time grid in %s/aligned/\n", a.timebase_hz, a.in.c_str());
  }
  if (!a.shards.empty()) {
    a.so.aligned = !a.unaligned;
    auto axle = r.find("axlebox");
    auto windows = a.so.aligned && axle != r.end() ? rw::build_windows(a.in, a.so, &track(), &axle->second.fit)
                                                   : rw::build_windows(a.in, a.so);
    print_shards(rw::write_shards(windows, a.shards, a.so), a.shards);
  }
  if (!a.json_out.empty()) std::ofstream(a.json_out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Align railway sensor logs: clock offset, drift and steps per sensor against GNSS time.", "railway-align"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "railway-align: " << e.what() << "\n";
    return 1;
  }
}
