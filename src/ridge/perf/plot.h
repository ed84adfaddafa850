// perf/plot: PNG charts of a plan through gnuplot (pngcairo terminal; Debian package
// gnuplot-nox). ridge writes the data (.dat) and the script (.gp) next to the PNGs, so a chart
// can be re-rendered or restyled by hand; only rendering needs gnuplot.
//   roofline.png  the device roofline (min(peak, I x bandwidth)) with every op of a decode step
//                 and a prefill step placed at (intensity, attained FLOP/s)
//   splits.png    goodput per GPU against the prefill share of GPUs (and of SMs)
// Other charts (ridge bench serve --plot) render through render_gnuplot() the same way.
#pragma once

#include <string>
#include <vector>

#include "ridge/perf/planner.h"

namespace ridge::perf {

// Writes the scripts and data into `dir` (created if missing) and runs gnuplot on them. Returns
// the PNG paths. Throws ridge::Error when gnuplot is missing or fails (the message names the
// package and the script to run by hand).
std::vector<std::string> write_plots(const PlanResult& plan, const std::vector<SplitPoint>& splits,
                                     const std::string& dir);
// The gnuplot executable ($RIDGE_GNUPLOT or `gnuplot` on PATH), or empty when none is found.
std::string find_gnuplot();

struct PlotFile {
  std::string name;  // file name inside the plot folder
  std::string text;
};
// Writes `files` into `dir` (created if missing), then runs gnuplot there on each of `scripts`
// (names among `files`), in order (none: only writes the files). Throws ridge::Error when gnuplot is missing (the message names
// the package and the command to run by hand once it is installed) or fails.
void render_gnuplot(const std::string& dir, const std::vector<PlotFile>& files,
                    const std::vector<std::string>& scripts);
// A gnuplot string literal (double quotes, escaped).
std::string gnuplot_string(const std::string& s);

}  // namespace ridge::perf
