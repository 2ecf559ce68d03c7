// Plots for reports, drawn by gnuplot (Debian's gnuplot-nox): round axis ticks, a legend below
// the data, and the script kept beside the picture (<path>.gp, the data inside it) so a plot can
// be drawn again or restyled by hand. A confusion matrix is a table, written as SVG directly.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace yard::railway {

enum class PlotStyle { kLine, kPoints, kLinePoints };

// Every member has its default, so that a designated initializer may name only some.
struct PlotSeries {
  std::string name{};
  std::vector<double> x{}, y{};
  PlotStyle style = PlotStyle::kLine;
  bool right_axis = false;  // against the right-hand y axis (PlotSpec::y2label)
  std::string color{};      // "#rrggbb"; "": the next of the palette's
};

struct PlotSpec {
  std::string title{}, xlabel{}, ylabel{};
  std::string y2label{};  // the right-hand axis, for series with right_axis set
  std::optional<std::pair<double, double>> xrange{}, yrange{}, y2range{};  // fixed ranges; else gnuplot's
  std::vector<PlotSeries> series{};
};

class PlotError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes the plot as an SVG at `path` (and its script at path + ".gp"). Points that are not
// finite are left out; a series longer than about 4,000 points is thinned (keeping each bucket's
// extreme). Throws PlotError naming the file when it cannot be written, or when gnuplot is missing
// or fails (with what gnuplot said).
void write_plot(const std::string& path, const PlotSpec& spec);

// Writes a confusion matrix as an SVG table: counts[r * n + c] windows of true class r predicted
// as c, each cell shaded by its share of its row, with per-class precision and recall beside it.
void write_svg_confusion(const std::string& path, const std::string& title, const std::vector<std::string>& classes,
                         const std::vector<int64_t>& counts);

}  // namespace yard::railway
