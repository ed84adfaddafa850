// perf/plot: PNG charts of a plan through gnuplot (pngcairo terminal; Debian package
// gnuplot-nox). ridge writes the data (.dat) and the script (.gp) next to the PNGs, so a chart
// can be re-rendered or restyled by hand; only rendering needs gnuplot.
//   roofline.png  the device roofline (min(peak, I x bandwidth)) with every op of a decode step
//                 and a prefill step placed at (intensity, attained FLOP/s)
//   splits.png    goodput per GPU against the prefill share of GPUs (and of SMs)
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

}  // namespace ridge::perf
