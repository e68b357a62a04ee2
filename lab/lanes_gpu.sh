#!/usr/bin/env bash
# GPU runs in lanes: one lane per GPU of this host, each lane's commands one after another, all under one wall
# budget, so that a call of a few minutes on a host of several GPUs runs the steps of several issues at once.
#
#   RESULTS=DIR BUDGET_S=540 bash lab/lanes_gpu.sh STEPS_FILE
#
# STEPS_FILE (lab/steps/*.txt): lines "LANE: COMMAND", LANE 0, 1, ...; other lines are comments. Lane i runs on
# GPU i % (GPUs here), alone on it (CUDA_VISIBLE_DEVICES, so its commands say --device 0); the lines of the lanes
# that share a GPU run in the file's order. Lines "*: COMMAND" are shared: a GPU whose own lines are done takes the
# next one nobody has taken (in the file's order), so that no GPU idles while work is left. A command starts only
# while more than 60 s are left, and is stopped (SIGINT, which the autotune commands answer by keeping what they
# finished) 10 s before the budget ends. A command may read $LEFT (seconds left
# when it starts: --time-limit $((LEFT - 60))) and $RESULTS. Each GPU's output goes to RESULTS/gpuN.log; then
# what the steps changed or added under tuned_db/ (its code aside) and benchmarks/, and the studies, are packed
# into RESULTS/results.tgz (unpack it in the checkout with tar xzf, merge each database file there with
# `autotune db merge FILE` where the checkout's changed meanwhile), and each GPU's last lines are printed.
# Run from the project root, with the project importable (installed, or .whl as coverage_gpu.sh takes it).
set -uo pipefail
steps=${1:?usage: RESULTS=DIR BUDGET_S=540 bash lab/lanes_gpu.sh STEPS_FILE}
RESULTS=$(mkdir -p "${RESULTS:-lanes-results}" && cd "${RESULTS:-lanes-results}" && pwd)
BUDGET_S=${BUDGET_S:-540}
end=$(( $(date +%s) + BUDGET_S ))
rm -f "$RESULTS"/gpu*.log "$RESULTS"/results.tgz
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -gt 0 ] && [ -d .whl ] && [ ! -d .site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" \
    .whl/*.whl || exit 1
fi
[ -d .site ] && export PYTHONPATH="$PWD/.site:$PWD"
[ "$gpus" -gt 0 ] || gpus=1  # a dry run without a GPU: every lane on "GPU 0", one after another
export RESULTS NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1

run_step() {  # GPU, lane, command
  local g=$1 lane=$2 cmd=$3 left
  left=$(( end - $(date +%s) ))
  if [ "$left" -le 60 ]; then echo "== lane $lane: not started, $left s left: $cmd"; return; fi
  echo "== lane $lane on GPU $g, $left s left:$cmd"
  CUDA_VISIBLE_DEVICES=$g LEFT=$left timeout -s INT $((left - 10)) bash -c "$cmd" </dev/null  # not the step list
  echo "== lane $lane: exit $? after $(( left - (end - $(date +%s)) )) s"
}

run_gpu() {
  local g=$1 line lane n=0
  while IFS= read -r line; do
    lane=${line%%:*}
    [ $((lane % gpus)) = "$g" ] && run_step "$g" "$lane" "${line#*:}"
  done < <(grep -E '^[0-9]+:' "$steps")
  while IFS= read -r line; do  # shared lines: the first GPU to claim one (mkdir is atomic) runs it
    n=$((n + 1))
    mkdir "$claims/$n" 2>/dev/null && run_step "$g" "*" "${line#*:}"
  done < <(grep -E '^\*:' "$steps")
}

claims=$(mktemp -d)
trap 'rm -rf "$claims"; for p in $(jobs -p); do pkill -TERM -P "$p"; kill "$p"; done 2>/dev/null' EXIT
trap 'exit 130' INT TERM
for g in $(seq 0 $((gpus - 1))); do
  run_gpu "$g" > "$RESULTS/gpu$g.log" 2>&1 &
done
wait
changed=$(git status --porcelain --untracked-files=all tuned_db benchmarks | awk '{print $NF}' | grep -v '^tuned_db/code/')
tar czf "$RESULTS/results.tgz" $changed $(ls -d autotune-out/studies 2>/dev/null) 2>/dev/null
echo "packed $(echo $changed | wc -w) changed files into $RESULTS/results.tgz"
for f in "$RESULTS"/gpu*.log; do echo "=== $f"; tail -n 20 "$f"; done
