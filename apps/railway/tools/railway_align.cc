// railway-align: aligns a log directory's sensor clocks to the GNSS PPS reference and, with
// --report, prints the errors against the ground truth.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "yard/railway/align.h"
#include "yard/railway/position.h"
#include "yard/railway/plot.h"
#include "yard/railway/resample.h"
#include "yard/railway/shards.h"

#include <filesystem>
#include <optional>

int main(int argc, char** argv) {
  CLI::App app{"Align railway sensor logs: clock offset, drift and steps per sensor against GNSS time.", "railway-align"};
  std::string in, json_out;
  bool report = false, strict = false;
  app.add_option("--in", in, "log directory (one CSV per sensor, *_pps.csv edges with *_time.nmea or gnss.nmea)")->required()->check(CLI::ExistingDirectory);
  app.add_flag("--report", report, "print the errors against the truth (when present) and plot them");
  std::string plots;
  app.add_option("--plots", plots, "with --report: directory for the SVG plots (default: the input directory)");
  app.add_option("--json", json_out, "write the fits (and errors) as JSON here");
  app.add_flag("--strict", strict, "stop at the first malformed line instead of dropping and counting it");
  std::string shards;
  yard::railway::ShardOptions so;
  bool unaligned = false;
  app.add_option("--shards", shards, "write training shards (windows of distance-domain tokens) here");
  app.add_option("--window", so.tokens, "tokens per window (0.25 m each)")->default_val(128)->check(CLI::Range(16, 1024));
  app.add_option("--stride", so.stride, "tokens between window starts")->default_val(64)->check(CLI::Range(1, 1024));
  app.add_flag("--unaligned", unaligned, "the baseline without alignment: raw clocks and raw odometer distance");
  double timebase_hz = 0;
  app.add_option("--timebase", timebase_hz, "also write the IMU and odometer resampled onto one GNSS-time grid at this rate (Hz) into DIR/aligned/")
      ->check(CLI::Range(1.0, 1000.0));
  CLI11_PARSE(app, argc, argv);
  try {
    yard::railway::ReadPolicy policy;
    if (strict) policy.malformed = policy.non_finite = yard::railway::OnBad::kStop;
    auto r = yard::railway::align_clocks(in, policy);
    std::cout << yard::railway::to_table(r);
    if (report) {
      for (auto& [name, rep] : r)
        if (rep.read.dropped_total()) std::cout << name << ": " << rep.read.to_string() << "\n";
    }
    auto j = yard::railway::to_json(r);
    // The position track, made once for whatever below needs it.
    std::optional<yard::railway::PositionTrack> track_cache;
    auto track_of = [&]() -> const yard::railway::PositionTrack& {
      if (!track_cache) track_cache = yard::railway::estimate_position(in, r);
      return *track_cache;
    };
    if (std::filesystem::exists(in + "/line.json") && std::filesystem::exists(in + "/odometer.csv")) {
      const auto& track = track_of();
      std::printf("\nposition: %zu estimates, GNSS fixes used %llu (rejected %llu), balises %llu, %zu slip/slide intervals\n",
                  track.t.size(), (unsigned long long)track.gnss_used, (unsigned long long)track.gnss_rejected,
                  (unsigned long long)track.balises_used, track.slips.size());
      std::printf("odometer clock (from speed cross-correlation): drift %.2f ppm, offset %.4f s\n",
                  track.odometer_clock.drift_ppm, track.odometer_clock.segments[0].offset_s);
      j["position"] = {{"estimates", track.t.size()}, {"gnss_used", track.gnss_used}, {"gnss_rejected", track.gnss_rejected},
                       {"slips", track.slips.size()}};
      if (report && std::filesystem::exists(in + "/truth.csv")) {
        auto pr = yard::railway::evaluate_position(in, track);
        std::printf("chainage error: rms %.3f m, max %.3f m, worst in a GNSS outage >= 30 s: %.3f m\n"
                    "slip/slide detection: recall %.3f, precision %.3f\n",
                    pr.chainage_rms_m, pr.chainage_max_m, pr.outage_max_m, pr.slip_recall, pr.slip_precision);
        j["position"]["chainage_rms_m"] = pr.chainage_rms_m;
        j["position"]["chainage_max_m"] = pr.chainage_max_m;
        j["position"]["chainage_outage30s_max_m"] = pr.outage_max_m;
        j["position"]["slip_detect_recall"] = pr.slip_recall;
        j["position"]["slip_detect_precision"] = pr.slip_precision;
        std::string pd = plots.empty() ? in : plots;
        std::filesystem::create_directories(pd);
        yard::railway::write_plot(pd + "/position_error_over_time.svg",
                                  {.title = "Along-track position error", .xlabel = "GNSS time (s)",
                                   .ylabel = "estimate - truth (m)",
                                   .series = {{.name = "chainage error", .x = pr.t, .y = pr.error_m}}});
        yard::railway::write_plot(pd + "/position_error_over_chainage.svg",
                                  {.title = "Along-track position error", .xlabel = "chainage (m)",
                                   .ylabel = "estimate - truth (m)",
                                   .series = {{.name = "chainage error", .x = pr.chainage, .y = pr.error_m}}});
        yard::railway::PlotSpec clocks{.title = "Clock alignment error per sensor", .xlabel = "GNSS time (s)",
                                       .ylabel = "mapped - true time (us)"};
        for (auto& [name, rep] : r)
          if (!rep.error_t.empty()) clocks.series.push_back({.name = name, .x = rep.error_t, .y = rep.error_us});
        yard::railway::write_plot(pd + "/time_error_over_time.svg", clocks);
        std::printf("plots: %s/{time_error_over_time,position_error_over_time,position_error_over_chainage}.svg\n", pd.c_str());
      }
    }
    if (timebase_hz > 0) {
      const auto& track = track_of();
      std::filesystem::create_directories(in + "/aligned");
      auto write_stream = [&](const std::string& name, const yard::railway::ClockFit& fit) {
        yard::railway::ReadPolicy p;
        p.non_monotonic = yard::railway::OnBad::kDrop;
        yard::railway::SensorCsvReader rd(in + "/" + name + ".csv", p);
        yard::railway::ClockMapper mapper(fit);
        std::vector<double> t;
        std::vector<std::vector<double>> cols(rd.columns().size() - 1);
        yard::railway::SensorRow row;
        while (rd.next(row)) {
          double ref = mapper.map(row.time);
          if (!t.empty() && ref <= t.back()) continue;
          t.push_back(ref);
          for (size_t c = 0; c < cols.size() && c < row.values.size(); ++c) cols[c].push_back(row.values[c]);
        }
        if (t.size() < 2) return;
        double t0 = std::ceil(t.front()), t1 = std::floor(t.back());
        std::vector<yard::railway::Grid> grids;
        for (auto& c : cols) grids.push_back(yard::railway::resample(t, c, timebase_hz, t0, t1));
        FILE* f = std::fopen((in + "/aligned/" + name + ".csv").c_str(), "w");
        std::fprintf(f, "gps_time");
        for (size_t c = 1; c < rd.columns().size(); ++c) std::fprintf(f, ",%s", rd.columns()[c].c_str());
        std::fprintf(f, "\n");
        for (size_t i = 0; i < grids[0].values.size(); ++i) {
          std::fprintf(f, "%.6f", t0 + i / timebase_hz);
          for (auto& g : grids) std::fprintf(f, ",%.5f", g.values[i]);
          std::fprintf(f, "\n");
        }
        std::fclose(f);
      };
      if (r.count("imu")) write_stream("imu", r.at("imu").fit);
      write_stream("odometer", track.odometer_clock);
      std::printf("\nresampled imu and odometer onto a %.0f Hz GNSS-time grid in %s/aligned/\n", timebase_hz, in.c_str());
    }
    if (!shards.empty()) {
      so.aligned = !unaligned;
      auto axle = r.find("axlebox");
      auto windows = so.aligned && axle != r.end() ? yard::railway::build_windows(in, so, &track_of(), &axle->second.fit)
                                                   : yard::railway::build_windows(in, so);
      auto m = yard::railway::write_shards(windows, shards, so);
      std::printf("\nwrote %llu windows in %zu shards to %s (classes none/squat/weld/insulated/corrugation: %llu/%llu/%llu/%llu/%llu)\n",
                  (unsigned long long)m.windows, m.files.size(), shards.c_str(), (unsigned long long)m.class_counts[0],
                  (unsigned long long)m.class_counts[1], (unsigned long long)m.class_counts[2],
                  (unsigned long long)m.class_counts[3], (unsigned long long)m.class_counts[4]);
    }
    if (!json_out.empty()) std::ofstream(json_out) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "railway-align: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
