#include "yard/railway/plot.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace yard::railway {

void write_svg_plot(const std::string& path, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<PlotSeries>& series) {
  const double W = 900, H = 420, L = 70, R = 20, T = 40, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
      }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  y0 = std::min(y0, 0.0);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='12'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='22' font-size='15' text-anchor='middle'>{}</text>\n"
      "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n"
      "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n"
      "<text x='16' y='{}' transform='rotate(-90 16 {})' text-anchor='middle'>{}</text>\n",
      W, H, W / 2, title, L, H - B, W - R, H - B, L, T, L, H - B, (L + W - R) / 2, H - 12, xlabel, (T + H - B) / 2,
      (T + H - B) / 2, ylabel);
  for (int i = 0; i <= 5; ++i) {
    double xv = x0 + (x1 - x0) * i / 5, yv = y0 + (y1 - y0) * i / 5;
    svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{:.4g}</text>\n", px(xv), H - B + 16, xv);
    svg += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end'>{:.4g}</text>\n", L - 6, py(yv) + 4, yv);
    svg += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#ddd'/>\n", L, py(yv), W - R, py(yv));
  }
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  for (size_t k = 0; k < series.size(); ++k) {
    auto& s = series[k];
    size_t n = s.x.size(), bucket = std::max<size_t>(1, n / 2000);
    std::string pts;
    for (size_t i = 0; i < n; i += bucket) {
      size_t best = i;
      for (size_t j = i; j < std::min(n, i + bucket); ++j)
        if (std::abs(s.y[j]) > std::abs(s.y[best])) best = j;
      if (std::isfinite(s.x[best]) && std::isfinite(s.y[best])) pts += fmt::format("{:.1f},{:.1f} ", px(s.x[best]), py(s.y[best]));
    }
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1' points='{}'/>\n", colors[k % 6], pts);
    svg += fmt::format("<text x='{}' y='{}' fill='{}'>{}</text>\n", W - R - 160, T + 14 * (k + 1), colors[k % 6], s.name);
  }
  svg += "</svg>\n";
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << svg;
}

void write_svg_confusion(const std::string& path, const std::string& title, const std::vector<std::string>& classes,
                         const std::vector<int64_t>& counts) {
  const size_t n = classes.size();
  if (counts.size() != n * n) throw std::invalid_argument("confusion matrix: " + std::to_string(n * n) + " counts needed");
  const double cell = 70, L = 150, T = 80;
  double W = L + cell * double(n) + 200, H = T + cell * double(n) + 60;
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='12'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='22' font-size='15' text-anchor='middle'>{}</text>\n"
      "<text x='{}' y='50' text-anchor='middle'>predicted</text>\n"
      "<text x='16' y='{}' transform='rotate(-90 16 {})' text-anchor='middle'>true</text>\n",
      W, H, W / 2, title, L + cell * double(n) / 2, T + cell * double(n) / 2, T + cell * double(n) / 2);
  for (size_t r = 0; r < n; ++r) {
    int64_t row = 0, col = 0;
    for (size_t c = 0; c < n; ++c) row += counts[r * n + c], col += counts[c * n + r];
    double y = T + cell * double(r);
    svg += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end'>{}</text>\n", L - 8, y + cell / 2 + 4, classes[r]);
    svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>\n", L + cell * double(r) + cell / 2, T - 8, classes[r]);
    for (size_t c = 0; c < n; ++c) {
      double share = row > 0 ? double(counts[r * n + c]) / double(row) : 0;
      int shade = static_cast<int>(255 - 200 * share);
      svg += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{}' height='{}' fill='rgb({},{},255)' stroke='#999'/>\n",
                         L + cell * double(c), y, cell, cell, shade, shade);
      svg += fmt::format("<text x='{:.1f}' y='{:.1f}' text-anchor='middle'>{}</text>\n", L + cell * double(c) + cell / 2,
                         y + cell / 2 + 4, counts[r * n + c]);
    }
    double tp = double(counts[r * n + r]);
    auto pct = [](double a, int64_t b) { return b > 0 ? fmt::format("{:.0f}%", 100 * a / double(b)) : std::string("-"); };
    svg += fmt::format("<text x='{:.1f}' y='{:.1f}'>precision {} recall {}</text>\n", L + cell * double(n) + 10,
                       y + cell / 2 + 4, pct(tp, col), pct(tp, row));
  }
  svg += "</svg>\n";
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << svg;
}

}  // namespace yard::railway
