// railway-align: aligns a log directory's sensor clocks to the GNSS PPS reference and, with
// --report, prints the errors against the ground truth.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "yard/railway/align.h"

int main(int argc, char** argv) {
  CLI::App app{"Align railway sensor logs: clock offset, drift and steps per sensor against GNSS time.", "railway-align"};
  std::string in, json_out;
  bool report = false, strict = false;
  app.add_option("--in", in, "log directory (one CSV per sensor, *_pps.csv pairs)")->required()->check(CLI::ExistingDirectory);
  app.add_flag("--report", report, "print the errors against truth.json (when present)");
  app.add_option("--json", json_out, "write the fits (and errors) as JSON here");
  app.add_flag("--strict", strict, "stop at the first malformed line instead of dropping and counting it");
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
    if (!json_out.empty()) std::ofstream(json_out) << yard::railway::to_json(r).dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "railway-align: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
