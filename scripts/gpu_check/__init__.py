"""The GPU check's modules (scripts/gpu_check.py is the program; scripts/README.md the calls).

runner   the clock, a time limit on every command, one result line per step, and the results
         written into the output folder and copied into $OUT after every line
report   the summary: the table of every run, the checks and issue 4's goals; log parsers
pack     `pack` on the CPU machine: the carried build, its manifest, the source hash
steps    the steps both paths share (exports, GPU tests, bench runs, profiles, ...)
paths    the preflights, the build there, the cold path and the full path
"""
