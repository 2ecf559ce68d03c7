// A synthetic railway line: alignment (curves with cant, gradients), speed limits, tunnels,
// cuttings, stations, balise groups, km posts, track irregularity and localised defects.
#include <algorithm>
#include <cmath>

#include "rng.h"
#include "yard/railway/sim.h"

namespace yard::railway {

const char* defect_name(DefectClass c) {
  switch (c) {
    case DefectClass::kNone: return "none";
    case DefectClass::kSquat: return "squat";
    case DefectClass::kWeld: return "weld";
    case DefectClass::kInsulatedJoint: return "insulated_joint";
    case DefectClass::kCorrugation: return "corrugation";
  }
  return "?";
}

namespace {
constexpr double kLineMax = 160 / 3.6;  // m/s
constexpr double kStationLimit = 80 / 3.6;

// Vertical irregularity PSD (low-disturbance track; Av in m^2 rad/m, wavenumbers in rad/m).
double psd(double k) {
  const double av = 4.032e-7, kc = 0.8246, kr = 0.0206;
  return av * kc * kc / ((k * k + kr * kr) * (k * k + kc * kc));
}

template <class T>
const T* find_at(const std::vector<T>& v, double s) {
  for (const auto& x : v)
    if (s >= x.start && s < x.end) return &x;
  return nullptr;
}
}  // namespace

double Line::curvature(double s) const {
  auto* c = find_at(curves, s);
  return c ? 1.0 / c->radius : 0.0;
}
double Line::cant(double s) const {
  auto* c = find_at(curves, s);
  return c ? c->cant : 0.0;
}
double Line::gradient(double s) const {
  double g = 0;
  for (auto& [start, pm] : gradients)
    if (s >= start) g = pm;
  return g;
}
double Line::limit(double s) const {
  double v = kLineMax;
  for (auto& l : limits)
    if (s >= l.start && s < l.end) v = std::min(v, l.v_max);
  return v;
}
bool Line::in(const std::vector<Zone>& zones, double s) const {
  for (auto& z : zones)
    if (s >= z.start && s < z.end) return true;
  return false;
}
DefectClass Line::label(double s) const {
  for (auto& d : defects)
    if (s >= d.chainage && s < d.chainage + d.length) return d.kind;
  return DefectClass::kNone;
}
DefectClass Line::label(double s0, double s1) const {
  DefectClass best = DefectClass::kNone;
  for (auto& d : defects)
    if (d.chainage < s1 && d.chainage + d.length > s0 && severity_rank(d.kind) > severity_rank(best)) best = d.kind;
  return best;
}
int severity_rank(DefectClass c) {
  switch (c) {
    case DefectClass::kSquat: return 4;
    case DefectClass::kInsulatedJoint: return 3;
    case DefectClass::kWeld: return 2;
    case DefectClass::kCorrugation: return 1;
    case DefectClass::kNone: return 0;
  }
  return 0;
}
float Line::irregularity_at(double s) const {
  double f = s / step;
  size_t i = static_cast<size_t>(std::clamp(f, 0.0, double(irregularity.size() - 2)));
  double w = std::clamp(f - double(i), 0.0, 1.0);
  return static_cast<float>(irregularity[i] * (1 - w) + irregularity[i + 1] * w);
}
std::pair<double, double> Line::position(double s) const {
  double f = s / step;
  size_t i = static_cast<size_t>(std::clamp(f, 0.0, double(x.size() - 2)));
  double w = std::clamp(f - double(i), 0.0, 1.0);
  return {x[i] * (1 - w) + x[i + 1] * w, y[i] * (1 - w) + y[i + 1] * w};
}

namespace {

// Alignment: straights and curves, cant for the line speed, curve speed limits; gradients.
void lay_alignment(Line& L, Rng& rng, double length_m) {
  for (double s = rng.uniform(300, 1500); s < length_m - 500;) {
    double len = rng.uniform(250, 1200);
    double r = rng.uniform(700, 4000) * (rng.chance(0.5) ? 1 : -1);
    double cant = std::min(150.0, 0.55 * 11.8 * 160.0 * 160.0 / std::abs(r));
    L.curves.push_back({s, std::min(s + len, length_m - 200), r, cant});
    double v = std::sqrt(std::abs(r) * (0.65 + 9.81 * cant / 1500.0));
    if (v < kLineMax) L.limits.push_back({s - 50, s + len + 50, v});
    s += len + rng.uniform(400, 2500);
  }
  for (double s = 0; s < length_m; s += rng.uniform(1000, 4000))
    L.gradients.emplace_back(s, rng.uniform(-12, 12));
}

// Stations: at both ends and every 8-15 km, slow zones around them.
void place_stations(Line& L, Rng& rng, double length_m) {
  L.stations.push_back({0, 0, "S0"});
  int n = 1;
  for (double s = rng.uniform(8000, 15000); s < length_m - 3000; s += rng.uniform(8000, 15000))
    L.stations.push_back({s, rng.uniform(30, 60), "S" + std::to_string(n++)});
  L.stations.push_back({length_m, 0, "S" + std::to_string(n)});
  for (auto& st : L.stations) L.limits.push_back({st.chainage - 600, st.chainage + 600, kStationLimit});
}

// Tunnels (one long enough for a GNSS outage of over 30 s at line speed), cuttings, degraded track.
void place_zones(Line& L, Rng& rng, double length_m) {
  auto place = [&](std::vector<Zone>& zones, int count, double lo, double hi) {
    for (int i = 0; i < count; ++i) {
      double len = rng.uniform(lo, hi);
      double s = rng.uniform(1000, std::max(1001.0, length_m - len - 1000));
      zones.push_back({s, s + len});
    }
    std::sort(zones.begin(), zones.end(), [](auto& a, auto& b) { return a.start < b.start; });
  };
  double km = length_m / 1000;
  place(L.tunnels, 1, 1500, 2200);
  place(L.tunnels, static_cast<int>(km / 25), 300, 1500);
  place(L.cuttings, std::max(2, static_cast<int>(km / 8)), 200, 800);
  place(L.degraded, std::max(2, static_cast<int>(km / 10)), 300, 1500);
}

// Balise groups about every km, two balises 3 m apart; km posts.
void place_balises(Line& L, Rng& rng, double length_m) {
  int g = 0;
  for (double s = rng.uniform(200, 800); s < length_m - 10; s += rng.uniform(900, 1100)) {
    char id[32];
    std::snprintf(id, sizeof id, "BG%03d", g++);
    L.balises.push_back({std::string(id) + ".1", s});
    L.balises.push_back({std::string(id) + ".2", s + 3.0});
  }
  for (double s = 0; s <= length_m; s += 1000) L.km_posts.push_back(s);
}

// Localised defects. Insulated joints sit near signals and look like squats.
void place_defects(Line& L, Rng& rng, double length_m) {
  double km = length_m / 1000;
  auto add = [&](DefectClass k, double per_km, double len_lo, double len_hi) {
    int count = static_cast<int>(std::round(per_km * km));
    for (int i = 0; i < count; ++i)
      L.defects.push_back({k, rng.uniform(200, length_m - 200), rng.uniform(len_lo, len_hi), rng.uniform(0.3, 1.0)});
  };
  add(DefectClass::kSquat, 0.6, 0.04, 0.12);
  add(DefectClass::kWeld, 2.5, 0.03, 0.06);
  add(DefectClass::kInsulatedJoint, 0.7, 0.01, 0.02);
  add(DefectClass::kCorrugation, 0.1, 20, 100);
  std::sort(L.defects.begin(), L.defects.end(), [](auto& a, auto& b) { return a.chainage < b.chainage; });
}

// Irregularity: a sum of sinusoids following the PSD over wavelengths 3-70 m, stronger in
// degraded sections.
void lay_irregularity(Line& L, Rng& rng, size_t npts) {
  L.irregularity.assign(npts, 0.f);
  const int kWaves = 120;
  double kmin = 2 * M_PI / 70, kmax = 2 * M_PI / 3;
  double dk = (kmax - kmin) / kWaves;
  for (int w = 0; w < kWaves; ++w) {
    double k = kmin + (w + rng.uniform()) * dk;
    double amp = std::sqrt(2 * psd(k) * dk) * 1000;  // mm
    double phase = rng.uniform(0, 2 * M_PI);
    double c = std::cos(k * L.step), sn = std::sin(k * L.step);
    double re = std::sin(phase), im = std::cos(phase);  // rotating phasor: sin(k s + phase)
    for (size_t i = 0; i < npts; ++i) {
      L.irregularity[i] += static_cast<float>(amp * re);
      double nre = re * c + im * sn, nim = im * c - re * sn;
      re = nre;
      im = nim;
    }
  }
  for (auto& z : L.degraded)
    for (size_t i = static_cast<size_t>(z.start / L.step); i < std::min(npts, size_t(z.end / L.step)); ++i)
      L.irregularity[i] *= 2.5f;
}

// Plan geometry from curvature.
void lay_plan(Line& L, Rng& rng, size_t npts) {
  L.x.resize(npts);
  L.y.resize(npts);
  double heading = rng.uniform(0, 2 * M_PI), px = 0, py = 0;
  for (size_t i = 0; i < npts; ++i) {
    L.x[i] = static_cast<float>(px);
    L.y[i] = static_cast<float>(py);
    heading += L.curvature(i * L.step) * L.step;
    px += std::cos(heading) * L.step;
    py += std::sin(heading) * L.step;
  }
}

}  // namespace

Line make_line(uint64_t seed, double length_m) {
  Line L;
  L.length = length_m;
  Rng rng(seed, "line");
  lay_alignment(L, rng, length_m);
  place_stations(L, rng, length_m);
  place_zones(L, rng, length_m);
  place_balises(L, rng, length_m);
  place_defects(L, rng, length_m);
  size_t npts = static_cast<size_t>(length_m / L.step) + 2;
  lay_irregularity(L, rng, npts);
  lay_plan(L, rng, npts);
  return L;
}

}  // namespace yard::railway
