# ridge bench serve --plot: goodput vs request rate. Re-render: gnuplot sweep.gp
reset
set terminal pngcairo size 1100,1000 noenhanced font 'sans,11'
set output "sweep.png"
set multiplot layout 2,1 title "completions: input 256 / output 128 tokens (lognormal), highest rate meeting the SLOs 84 req/s"
set grid
set key left top
set xrange [0:94.5]
set yrange [0:*]
set xlabel 'offered request rate (requests/s, Poisson)'
set ylabel 'requests/s'
set arrow from 84, graph 0 to 84, graph 1 nohead dt 2 lc rgb 'gray40'
plot x title 'offered' dt 3 lc rgb 'gray50', \
  "sweep.dat" using 1:2 with linespoints pt 7 ps 1.4 lw 2 lc rgb '#2ca02c' title "goodput: rate x share of requests meeting every SLO"
unset arrow
set logscale y
set yrange [*:*]
set ylabel 'p99 latency (ms)'
set key left top
plot "sweep.dat" using 1:4 with linespoints pt 7 ps 1.2 lw 2 lc rgb '#d62728' title 'p99 TTFT', \
  '' using 1:5 with linespoints pt 5 ps 1.2 lw 2 lc rgb '#9467bd' title 'p99 TPOT', \
  500 title 'TTFT SLO' dt 2 lw 1.5 lc rgb '#d62728', \
  50 title 'TPOT SLO' dt 2 lw 1.5 lc rgb '#9467bd'
unset multiplot
