# SPDX-License-Identifier: Apache-2.0
# Plots of kvadmit-bench results; bench/report.py writes the data and runs
#   gnuplot -e "datadir='...'; outdir='...'" bench/plots.gp
# step.dat:    waiting  kvadmit_ns  rescan_ns
# threads.dat: threads  submit  wfcq_raw  mutex_queue  reserve_release  mutex_counter (M items/s)

set terminal svg size 760,480 dynamic enhanced font "sans,12" background rgb "white"
set grid
set key top left

set output outdir."/step_vs_waiting.svg"
set title "Scheduler step with a blocked head, no events"
set logscale xy
set xlabel "requests waiting"
set ylabel "CPU time per step (ns)"
set format y "10^{%L}"
set format x "10^{%L}"
set xrange [300:2000000]
set key center right
plot datadir."/step.dat" using 1:2 with linespoints lw 2 pt 7 title "kvadmit kva\\_step", \
     datadir."/step.dat" using 1:3 with linespoints lw 2 pt 5 title "rescanning step (C port of vLLM's waiting pass)"

unset logscale
unset format
set format x "%g"
set format y "%g"
set xrange [0.5:2.5]
set xtics 1
set key top right
set yrange [0:*]
set output outdir."/threads.svg"
set terminal svg size 960,420 dynamic enhanced font "sans,12" background rgb "white"
set multiplot layout 1,2
set title "submit (one request)"
set xlabel "threads"
set ylabel "M items/s (all threads)"
plot datadir."/threads.dat" using 1:2 with linespoints lw 2 pt 7 title "kva\\_submit", \
     datadir."/threads.dat" using 1:3 with linespoints lw 2 pt 5 title "wfcq enqueue (raw)", \
     datadir."/threads.dat" using 1:4 with linespoints lw 2 pt 9 title "mutex + list"
set title "paired reservation + release"
plot datadir."/threads.dat" using 1:5 with linespoints lw 2 pt 7 title "lockfree/capacity", \
     datadir."/threads.dat" using 1:6 with linespoints lw 2 pt 9 title "mutex + counters"
unset multiplot
