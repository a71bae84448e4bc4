set terminal pngcairo size 1400,420 font 'sans,9'
set output 'bench/results-2026-12-07-io-ring-busy.json/2026-12-07T15-48-16Z/latency.png'
set multiplot layout 1,2 title 'latency percentiles (ms, log scale): p50 / p99 / p99.9 — 2026-12-07T15-48-16Z'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set grid ytics
set key top left
set xtics rotate by -20 noenhanced
set yrange [0.01:*]
set title "1. 2 KiB responses, keep-alive, 64 connections" noenhanced
plot 'bench/results-2026-12-07-io-ring-busy.json/2026-12-07T15-48-16Z/panel0.dat' using 2:xtic(1) title 'p50', '' using 3 title 'p99', '' using 4 title 'p99.9'
set title "2. 1 MiB responses, keep-alive, 16 connections" noenhanced
plot 'bench/results-2026-12-07-io-ring-busy.json/2026-12-07T15-48-16Z/panel1.dat' using 2:xtic(1) title 'p50', '' using 3 title 'p99', '' using 4 title 'p99.9'
unset multiplot
