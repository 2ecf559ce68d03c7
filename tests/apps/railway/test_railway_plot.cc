// Plots drawn by gnuplot: the SVG has round ticks (not the data's raw values), its legend, fixed
// ranges where asked, a second axis; the script stays beside it; a path that cannot be written or
// a missing gnuplot is a PlotError that says so. Skipped, with the reason, where gnuplot is not
// installed (scripts/setup-deps installs it).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "yard/railway/plot.h"

namespace fs = std::filesystem;
using namespace yard::railway;

namespace {
std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }
}  // namespace

TEST_CASE("a plot has round ticks, its legend, fixed ranges and a second axis", "[railway][plot]") {
  if (!have_gnuplot()) {
    WARN("skipped: gnuplot is not installed (Debian's gnuplot-nox)");
    return;
  }
  auto dir = fs::temp_directory_path() / ("yard-plot-" + std::to_string(getpid()));
  fs::create_directories(dir);
  PlotSpec p;
  p.title = "Training's curves";  // a quote in a title is no gnuplot syntax error
  p.xlabel = "step";
  p.ylabel = "loss";
  p.y2label = "F1";
  p.y2range = std::pair{0.0, 1.0};
  PlotSeries loss{.name = "train loss"};
  for (int i = 0; i < 10000; ++i) loss.x.push_back(i), loss.y.push_back(0.9043 - 0.00007234 * i);
  loss.y[5] = std::nan("");  // not drawn, not an error
  p.series = {loss, {.name = "validation macro-F1", .x = {4999, 9999}, .y = {0.327, 0.41}, .style = PlotStyle::kLinePoints,
                     .right_axis = true}};
  auto svg_path = (dir / "curves.svg").string();
  write_plot(svg_path, p);
  auto svg = read(svg_path);
  REQUIRE(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("train loss") != std::string::npos);
  CHECK(svg.find("validation macro-F1") != std::string::npos);
  CHECK(svg.find("Training's curves") != std::string::npos);
  CHECK(svg.find(">0.5<") != std::string::npos);     // the F1 axis: round ticks from 0 to 1
  CHECK(svg.find(">0.9043<") == std::string::npos);  // no tick at a raw data value
  // The script is kept, the long series thinned in it.
  auto gp = read(svg_path + ".gp");
  CHECK(gp.find("set output") != std::string::npos);
  CHECK(std::count(gp.begin(), gp.end(), '\n') < 6000);

  PlotSpec pr{.title = "precision against recall", .xlabel = "recall", .ylabel = "precision",
              .xrange = std::pair{0.0, 1.0}, .yrange = std::pair{0.0, 1.0},
              .series = {{.name = "bump", .x = {0.3, 0.6, 0.9}, .y = {0.9, 0.8, 0.5}}}};
  write_plot((dir / "pr.svg").string(), pr);
  auto prs = read((dir / "pr.svg").string());
  CHECK(prs.find(">0<") != std::string::npos);  // the axes start at 0, whatever the data
  CHECK(prs.find(">1<") != std::string::npos);

  CHECK_THROWS_WITH(write_plot("/nonexistent-dir/x.svg", pr),
                    Catch::Contains("/nonexistent-dir/x.svg"));
  fs::remove_all(dir);
}

TEST_CASE("without gnuplot a plot fails with a PlotError that says what to install", "[railway][plot]") {
  auto dir = fs::temp_directory_path() / ("yard-plot-nognuplot-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  setenv("PATH", "/nonexistent", 1);
  PlotSpec p{.title = "t", .xlabel = "x", .ylabel = "y", .series = {{.name = "s", .x = {0, 1}, .y = {0, 1}}}};
  CHECK_THROWS_AS(write_plot((dir / "a.svg").string(), p), PlotError);
  try {
    write_plot((dir / "a.svg").string(), p);
  } catch (const PlotError& e) {
    CHECK_THAT(e.what(), Catch::Contains("gnuplot-nox") && Catch::Contains("a.svg"));
  }
  setenv("PATH", path.c_str(), 1);
  fs::remove_all(dir);
}
