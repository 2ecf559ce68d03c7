// railway-detect's last step, from the windows' outputs to defects, on outputs made by hand.
#include <catch2/catch.hpp>

#include "../../../apps/railway/detect/detect_impl.h"

using railway_detect::Detection;
using railway_detect::WindowOutput;

namespace {

constexpr int64_t kT = 128;
constexpr double kTokenM = 0.25;

// Windows every half window over `windows` strides, every token "none" and every window's middle
// half classed "none".
std::vector<WindowOutput> quiet(int windows) {
  std::vector<WindowOutput> ws;
  for (int i = 0; i < windows; ++i) {
    WindowOutput w;
    w.start = size_t(i) * kT / 2;
    w.cls = {0.98f, 0.005f, 0.005f, 0.005f, 0.005f};
    w.tokens.assign(kT * 5, 0.f);
    for (int64_t j = 0; j < kT; ++j) w.tokens[size_t(j * 5)] = 1.f;
    w.amplitude_mm = 1.5f;
    ws.push_back(w);
  }
  return ws;
}

// Window `i` says class c at absolute token `at` with probability p.
void say(std::vector<WindowOutput>& ws, size_t i, size_t at, int c, float p) {
  auto& w = ws[i];
  size_t j = at - w.start;
  w.tokens[j * 5] = 1 - p;
  w.tokens[j * 5 + size_t(c)] = p;
}

void classed(std::vector<WindowOutput>& ws, size_t i, int c, float p) {
  ws[i].cls.assign(5, (1 - p) / 4);
  ws[i].cls[size_t(c)] = p;
}

}  // namespace

TEST_CASE("a defect both overlapping windows see is found at its token", "[railway][detect]") {
  auto ws = quiet(4);
  // Token 100: in window 1's middle half (64 + 32..96) and window 0's last quarter.
  say(ws, 0, 100, 2, 0.9f);
  say(ws, 1, 100, 2, 0.95f);
  classed(ws, 1, 2, 0.8f);
  auto found = railway_detect::find_defects(ws, kT, kTokenM);
  REQUIRE(found.size() == 1);
  CHECK(found[0].kind == 2);
  CHECK(found[0].start_m == 100 * kTokenM);
  CHECK(found[0].confidence == Approx(0.8));
}

TEST_CASE("a window's stray response that the overlapping window does not confirm is no defect", "[railway][detect]") {
  auto ws = quiet(4);
  say(ws, 0, 100, 2, 0.9f);
  say(ws, 1, 100, 2, 0.95f);
  classed(ws, 1, 2, 0.8f);
  // Window 1 also answers "weld" 54 tokens on, where window 2 (which sees that token too) says
  // nothing: an echo of the real one.
  say(ws, 1, 154, 2, 0.97f);
  auto found = railway_detect::find_defects(ws, kT, kTokenM);
  REQUIRE(found.size() == 1);
  CHECK(found[0].start_m == 100 * kTokenM);
}

TEST_CASE("a place both heads split between squat and joint is one defect, of the class both favour", "[railway][detect]") {
  auto ws = quiet(4);
  for (size_t i : {1u, 2u}) {
    auto& w = ws[i];
    size_t j = 140 - w.start;
    w.tokens[j * 5] = 0.1f;
    w.tokens[j * 5 + 1] = 0.4f;   // squat
    w.tokens[j * 5 + 3] = 0.5f;   // insulated joint
  }
  ws[1].cls = {0.3f, 0.3f, 0.f, 0.4f, 0.f};  // window 1 holds token 140 in its middle half
  auto found = railway_detect::find_defects(ws, kT, kTokenM);
  REQUIRE(found.size() == 1);
  CHECK(found[0].kind == 3);
}

TEST_CASE("nothing is found where the windows' middle halves all say none", "[railway][detect]") {
  auto ws = quiet(4);
  say(ws, 0, 100, 2, 0.9f);
  say(ws, 1, 100, 2, 0.9f);  // the tokens say weld, but no window gives the place any weight
  CHECK(railway_detect::find_defects(ws, kT, kTokenM).empty());
}

TEST_CASE("a corrugation patch broken by one window classed otherwise is one patch", "[railway][detect]") {
  auto ws = quiet(6);
  for (size_t i : {1u, 3u}) {
    classed(ws, i, 4, 0.9f);
    for (int64_t j = kT / 4; j < 3 * kT / 4; ++j) say(ws, i, ws[i].start + size_t(j), 4, 0.9f);
  }
  auto found = railway_detect::find_defects(ws, kT, kTokenM);
  REQUIRE(found.size() == 1);
  CHECK(found[0].kind == 4);
  CHECK(found[0].start_m == (64 + 32) * kTokenM);
  CHECK(found[0].end_m == (192 + 96) * kTokenM);
}
