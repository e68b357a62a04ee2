#!/usr/bin/env bash
# On the lent GPU machine (device tool, carry [".whl"]): tune the rest of the reduce suite (small sizes, max/min/dot
# and float64 at 2^20 and 2^24, skinny 2-D shapes along both axes), then bench the sum suites. Two tarballs in $OUT.
T=/root/t; B=/root/b; mkdir -p $T $B
R="--trials 20 --timeout 15"
OUT=$T TUNE_TIMEOUT=60 bash scripts/device-tune.sh "reduce --op sum --shape 1024 --shape 65536 $R" "reduce --op max --shape 1048576 --shape 16777216 $R" "reduce --op min --shape 1048576 --shape 16777216 $R" "reduce --op dot --shape 1048576 --shape 16777216 $R" "reduce --op sum --dtype float64 --shape 1048576 --shape 16777216 $R" "reduce --op sum --axis 0 --shape 65536x256 --shape 256x65536 $R" "reduce --op sum --axis 1 --shape 65536x256 --shape 256x65536 $R" | grep -E "^\| reduce|replaced|kept|added" | cut -c1-100
tar czf $OUT/tune.tgz -C $T .
OUT=$B BENCH_TIMEOUT=100 bash scripts/device-bench.sh "reduce --op sum --shape 1024 --shape 65536 --shape 1048576 --shape 16777216 --shape 268435456" "reduce --op sum --axis 0 --shape 16384x16384 --shape 65536x256 --shape 256x65536" "reduce --op sum --axis 1 --shape 16384x16384 --shape 65536x256 --shape 256x65536" > $B/bench-tables.txt
tar czf $OUT/bench.tgz -C $B .
grep -E "^## |autotune  |cupy.sum  " $B/bench-tables.txt | cut -c1-100
