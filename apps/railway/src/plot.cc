#include "yard/railway/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

namespace yard::railway {

namespace {

// A string as a gnuplot string literal (single quotes: no escapes but a doubled quote).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else if (c != '\n') out.push_back(c);
  }
  return out + "'";
}

// The series' points as a data block, thinned to about kMaxPoints.
constexpr size_t kMaxPoints = 4000;
std::string data_block(const PlotSeries& s, size_t index) {
  std::string out = fmt::format("$s{} << EOD\n", index);
  size_t n = std::min(s.x.size(), s.y.size()), bucket = std::max<size_t>(1, (n + kMaxPoints - 1) / kMaxPoints);
  for (size_t i = 0; i < n; i += bucket) {
    size_t best = i;
    for (size_t j = i; j < std::min(n, i + bucket); ++j)
      if (std::isfinite(s.y[j]) && (!std::isfinite(s.y[best]) || std::abs(s.y[j]) > std::abs(s.y[best]))) best = j;
    if (std::isfinite(s.x[best]) && std::isfinite(s.y[best])) out += fmt::format("{:.9g} {:.9g}\n", s.x[best], s.y[best]);
  }
  return out + "EOD\n";
}

std::string range(const char* axis, const std::optional<std::pair<double, double>>& r) {
  return r ? fmt::format("set {}range [{:.9g}:{:.9g}]\n", axis, r->first, r->second) : std::string();
}

std::string script(const std::string& path, const PlotSpec& spec) {
  std::string gp =
      "set terminal svg size 900,480 dynamic enhanced font 'sans,12' background rgb 'white'\n"
      "set output " + quoted(path) + "\n"
      "set encoding utf8\nset border 3\nset tics nomirror out\nset grid lc rgb '#dddddd'\n"
      "set key outside below center horizontal noenhanced\nset format y '%g'\nset format x '%g'\n";
  gp += "set title " + quoted(spec.title) + " noenhanced\n";
  gp += "set xlabel " + quoted(spec.xlabel) + " noenhanced\nset ylabel " + quoted(spec.ylabel) + " noenhanced\n";
  bool right = false;
  for (auto& s : spec.series) right = right || s.right_axis;
  if (right) gp += "set y2label " + quoted(spec.y2label) + " noenhanced\nset y2tics out\nset format y2 '%g'\nset border 11\n";
  gp += range("x", spec.xrange) + range("y", spec.yrange) + range("y2", spec.y2range);
  for (size_t i = 0; i < spec.series.size(); ++i) gp += data_block(spec.series[i], i);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  std::string plot;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    auto& s = spec.series[i];
    const char* with = s.style == PlotStyle::kLine ? "lines lw 1.2" : s.style == PlotStyle::kPoints ? "points pt 7 ps 0.8"
                                                                                                   : "linespoints lw 1.5 pt 7 ps 0.8";
    plot += fmt::format("{}$s{} using 1:2 axes x1y{} with {} lc rgb '{}' title {}", plot.empty() ? "plot " : ", \\\n     ",
                        i, s.right_axis ? 2 : 1, with, s.color.empty() ? colors[i % 6] : s.color, quoted(s.name));
  }
  if (plot.empty()) plot = "set key off\nplot 1/0 notitle";  // no series: the axes alone
  return gp + plot + "\n";
}

// Runs gnuplot on `script_path`: "" on success, else what went wrong.
std::string run_gnuplot(const std::string& script_path) {
  std::string log = script_path + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {"gnuplot", script_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    std::remove(log.c_str());
    return "gnuplot could not be started (" + std::string(std::strerror(rc)) + "): install Debian's gnuplot-nox";
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(log);
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "gnuplot failed" + (said.empty() ? std::string() : ": " + said.substr(0, 2000));
}

}  // namespace

void write_plot(const std::string& path, const PlotSpec& spec) {
  std::string gp_path = path + ".gp";
  {
    std::ofstream gp(gp_path, std::ios::trunc);
    if (!gp) throw PlotError("cannot write " + gp_path);
    gp << script(path, spec);
    if (!gp.flush()) throw PlotError("cannot write " + gp_path);
  }
  if (auto err = run_gnuplot(gp_path); !err.empty()) throw PlotError("plot " + path + ": " + err);
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
