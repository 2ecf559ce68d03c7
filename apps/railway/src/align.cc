#include "yard/railway/align.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "yard/railway/nmea.h"
#include "yard/railway/sim.h"

namespace yard::railway {

namespace {

// The time messages a logger received beside its PPS line, or nullopt when it has none.
std::optional<std::vector<TimeMessage>> read_time_messages(const std::string& dir, const std::string& name,
                                                           const ReadPolicy& policy, ReadSummary& summary) {
  namespace fs = std::filesystem;
  for (auto file : {name + "_time.nmea", name + ".nmea"}) {
    if (!fs::exists(dir + "/" + file)) continue;
    NmeaReader r(dir + "/" + file, policy);
    NmeaRecord rec;
    std::vector<TimeMessage> out;
    while (r.next(rec)) out.push_back({rec.local, rec.utc});
    summary = r.summary();
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::map<std::string, ClockReport> align_clocks(const std::string& dir, const ReadPolicy& policy, bool with_truth) {
  namespace fs = std::filesystem;
  std::map<std::string, ClockReport> out;
  std::optional<nlohmann::json> truth;
  if (with_truth && fs::exists(dir + "/truth.json")) {
    std::ifstream in(dir + "/truth.json");
    truth = nlohmann::json::parse(in);
  }
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) {
    auto f = e.path().filename().string();
    if (f.size() > 8 && f.compare(f.size() - 8, 8, "_pps.csv") == 0) names.push_back(f.substr(0, f.size() - 8));
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) throw std::runtime_error("no *_pps.csv files in " + dir);
  for (auto& name : names) {
    ClockReport rep;
    std::string pps = dir + "/" + name + "_pps.csv";
    SensorCsvReader r(pps, policy);
    SensorRow row;
    std::vector<std::pair<double, double>> pairs;
    std::vector<double> edges;
    while (r.next(row)) {
      if (row.values.empty()) edges.push_back(row.time);  // an edge, unlabelled
      else pairs.emplace_back(row.time, row.values[0]);   // an edge with its second
    }
    rep.read = r.summary();
    if (r.columns().size() == 1) {
      auto msgs = read_time_messages(dir, name, policy, rep.messages_read);
      if (!msgs) throw std::runtime_error(pps + ": unlabelled PPS edges and no time messages (" + name +
                                          "_time.nmea or " + name + ".nmea): which second each edge marks is unknown");
      rep.pairing = pair_pps_edges(std::move(edges), std::move(*msgs));
      pairs = std::move(rep.pairing->pairs);
      rep.pairing->pairs.clear();
      if (pairs.size() < 10)
        throw std::runtime_error(fmt::format("{}: only {} of {} PPS edges could be paired with a time message", pps,
                                             pairs.size(), rep.pairing->edges));
    }
    rep.fit = fit_clock(pairs);
    if (truth && truth->contains("clocks") && (*truth)["clocks"].contains(name)) {
      auto c = (*truth)["clocks"][name];
      ClockModel m;
      m.offset_s = c["offset_s"];
      m.drift_ppm = c["drift_ppm"];
      for (auto& s : c["steps"]) m.steps.emplace_back(s["time_s"], s["step_s"]);
      rep.true_drift_ppm = m.drift_ppm;
      double duration = (*truth)["duration_s"];
      double ss = 0, mx = 0;
      long n = 0;
      for (double t = 0.5; t < duration - 1; t += 0.5) {
        bool near_step = false;
        for (auto& s : m.steps) near_step |= std::abs(t - s.first) < 1.0;
        if (near_step) continue;
        double e = rep.fit.to_reference(m.local(t), rep.fit.segment_at_reference(t)) - t;
        if (std::fmod(t, 10.0) < 0.25) {
          rep.error_t.push_back(t);
          rep.error_us.push_back(e * 1e6);
        }
        ss += e * e;
        mx = std::max(mx, std::abs(e));
        ++n;
      }
      if (n) {
        rep.error_rms_s = std::sqrt(ss / n);
        rep.error_max_s = mx;
      }
    }
    out[name] = std::move(rep);
  }
  return out;
}

nlohmann::json to_json(const std::map<std::string, ClockReport>& r) {
  nlohmann::json j = nlohmann::json::object();
  for (auto& [name, rep] : r) {
    nlohmann::json segs = nlohmann::json::array();
    for (auto& s : rep.fit.segments) segs.push_back({{"ref_start", s.ref_start}, {"ref_end", s.ref_end}, {"offset_s", s.offset_s}});
    j[name] = {{"drift_ppm", rep.fit.drift_ppm}, {"segments", segs}, {"sigma_s", rep.fit.sigma_s},
               {"pairs_used", rep.fit.pairs_used}, {"outliers", rep.fit.outliers},
               {"read", rep.read.to_string()}};
    if (rep.pairing) {
      auto& p = *rep.pairing;
      j[name]["pps"] = {{"edges", p.edges}, {"off_grid", p.off_grid}, {"unlabelled", p.unlabelled},
                        {"seconds_named", p.messages}, {"seconds_without_edge", p.messages_unused},
                        {"time_messages_read", rep.messages_read.to_string()}};
    }
    if (rep.error_rms_s) {
      j[name]["time_error_rms_us"] = *rep.error_rms_s * 1e6;
      j[name]["time_error_max_us"] = *rep.error_max_s * 1e6;
      j[name]["true_drift_ppm"] = *rep.true_drift_ppm;
    }
  }
  return j;
}

std::string to_table(const std::map<std::string, ClockReport>& r) {
  std::ostringstream o;
  o << fmt::format("{:<10} {:>12} {:>14} {:>6} {:>9} {:>10} {:>14} {:>14}\n", "sensor", "drift ppm", "offset s",
                   "steps", "outliers", "sigma us", "err rms us", "err max us");
  for (auto& [name, rep] : r) {
    o << fmt::format("{:<10} {:>12.3f} {:>14.6f} {:>6} {:>9} {:>10.1f} {:>14} {:>14}\n", name, rep.fit.drift_ppm,
                     rep.fit.segments[0].offset_s, rep.fit.segments.size() - 1, rep.fit.outliers, rep.fit.sigma_s * 1e6,
                     rep.error_rms_s ? fmt::format("{:.2f}", *rep.error_rms_s * 1e6) : "-",
                     rep.error_max_s ? fmt::format("{:.2f}", *rep.error_max_s * 1e6) : "-");
  }
  return o.str();
}

}  // namespace yard::railway
