// Minimal SVG line plots for reports (no plotting library needed to look at a result).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::railway {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;
};

// Writes an SVG line chart; long series are thinned to about 2000 points (keeping each bucket's
// extreme). Throws std::runtime_error when the file cannot be written.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<PlotSeries>& series);

// Writes a confusion matrix as an SVG table: counts[r * n + c] windows of true class r predicted
// as c, each cell shaded by its share of its row, with per-class precision and recall beside it.
void write_svg_confusion(const std::string& path, const std::string& title, const std::vector<std::string>& classes,
                         const std::vector<int64_t>& counts);

}  // namespace yard::railway
