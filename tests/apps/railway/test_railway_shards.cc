// Distance-domain windows and shard files: round trip, corruption caught, and the aligner's worth:
// with alignment a defect's vibration sits on its labelled token; without, it does not.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "yard/railway/shards.h"
#include "yard/railway/sim.h"

using namespace yard::railway;
namespace fs = std::filesystem;

namespace {
struct Data {
  std::string dir;
  Data() : dir((fs::temp_directory_path() / ("yard-shards-" + std::to_string(getpid()))).string()) {
    auto cfg = default_config(77);
    cfg.length_m = 20000;
    cfg.max_duration_s = 1500;
    simulate(cfg, dir);
  }
  ~Data() { fs::remove_all(dir); }
};
Data& data() {
  static Data d;
  return d;
}

// Fraction of squats and insulated joints whose strongest high-band token lies within 1 m of
// the defect, looking ±5 m around it.
double localised(const std::vector<Window>& ws, const nlohmann::json& defects, uint32_t tokens) {
  int total = 0, hit = 0;
  for (auto& d : defects) {
    std::string kind = d["kind"];
    if (kind != "squat" && kind != "insulated_joint") continue;
    double c = d["chainage"];
    for (auto& w : ws) {
      double mid_lo = w.start_chainage + tokens * 0.25 * 0.25, mid_hi = w.start_chainage + tokens * 0.25 * 0.75;
      if (c < mid_lo || c >= mid_hi) continue;
      ++total;
      int centre = static_cast<int>((c - w.start_chainage) / 0.25);
      int best = -1;
      float best_e = -1e30f;
      for (int j = std::max(0, centre - 20); j < std::min<int>(tokens, centre + 20); ++j) {
        float e = w.x[size_t(j) * kFeatures + kLogAbove850];
        if (e > best_e) best_e = e, best = j;
      }
      hit += std::abs(best - centre) <= 4;
      break;
    }
  }
  return total ? double(hit) / total : 0;
}
}  // namespace

TEST_CASE("windows are labelled, shards round-trip and corruption is caught", "[railway][shards]") {
  ShardOptions o;
  o.windows_per_shard = 500;
  auto ws = build_windows(data().dir, o);
  REQUIRE(ws.size() > 100);
  int labelled = 0;
  for (auto& w : ws) labelled += w.label != 0;
  CHECK(labelled > 5);
  auto out = data().dir + "/shards";
  auto m = write_shards(ws, out, o);
  CHECK(m.windows == ws.size());
  CHECK(fs::exists(out + "/manifest.json"));
  std::vector<Window> back;
  for (auto& f : m.files) {
    auto part = read_shard(out + "/" + f);
    back.insert(back.end(), part.begin(), part.end());
  }
  REQUIRE(back.size() == ws.size());
  CHECK(back[7].x == ws[7].x);
  CHECK(back[7].label == ws[7].label);
  CHECK(back[7].token_label == ws[7].token_label);
  // A window's class is the most severe one among the tokens of its middle half.
  int consistent = 0;
  for (auto& w : back) {
    bool there = w.label == 0;
    for (uint32_t j = o.tokens / 4; j < 3 * o.tokens / 4; ++j) there |= w.token_label[j] == w.label;
    consistent += there;
  }
  CHECK(consistent == static_cast<int>(back.size()));
  CHECK(back.back().start_chainage == ws.back().start_chainage);

  // A flipped byte and a truncated file are both refused with the file named.
  auto p = out + "/" + m.files[0];
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c;
    f.seekg(100);
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x40));
  }
  CHECK_THROWS_WITH(read_shard(p), Catch::Contains(p) && Catch::Contains("checksum"));
  fs::resize_file(out + "/" + m.files[1], 1000);
  CHECK_THROWS_WITH(read_shard(out + "/" + m.files[1]), Catch::Contains("checksum"));
  CHECK_THROWS_WITH(read_shard(out + "/manifest.json"), Catch::Contains("not a shard"));
}

TEST_CASE("alignment puts defect vibrations on their labels; without it they miss", "[railway][shards][align]") {
  std::ifstream in(data().dir + "/truth.json");
  auto truth = nlohmann::json::parse(in);
  ShardOptions o;
  auto aligned = build_windows(data().dir, o);
  o.aligned = false;
  auto raw = build_windows(data().dir, o);
  double a = localised(aligned, truth["defects"], o.tokens);
  double r = localised(raw, truth["defects"], o.tokens);
  INFO("aligned " << a << ", unaligned " << r);
  CHECK(a >= 0.8);
  CHECK(r < a - 0.3);
}
