#!/usr/bin/env bash
# bench/gpu/scaling.sh - data-parallel scaling of ctrain on GPUs, run the way
# bench/gpu/run.sh is (a copy of the work tree on a GPU machine, no network; it builds
# build-gpu/ when run.sh has not):
#   - step time (ms) and throughput (target positions/s) of SASRec ml-1m-r (L=200, B=128 global)
#     with ctrain --device cuda at 1 GPU, and at 2, 4, 8 GPUs where the machine has them, each
#     through `ctrun --nproc_per_node N` with --backend nccl (the bucketed gradient reduction);
#     speedup = throughput / throughput at 1;
#   - on every machine, the cost of the reduction that is not hidden: one process without a
#     reduction (world 1, local) against a world of 1 through NCCL (--backend nccl: the buckets,
#     the events, the watchdog), same steps, with the buckets started during the backward pass
#     (the default) and after it (--overlap_reduction false);
#   - the bus bandwidth of NCCL's all-reduce at the gradient's size and around it
#     (build-gpu/bench/allreduce_bench, nccl-tests' busbw) on all visible GPUs.
#
#   bench/gpu/scaling.sh [--epochs N]
#
# Results go to $OUT when set, else build-gpu/results/: scaling.txt (+ logs). Data from
# $CT_DATA_DIR/ml-1m-r/ml-1m-r.txt, else a synthetic file of its size (step_bench.py).
# Exit status 0 when every run finished; the numbers are reported, not judged.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
epochs=1
while [ $# -gt 0 ]; do
    case "$1" in
        --epochs) epochs=${2:-}; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scaling.sh: unknown argument '$1' (expected --epochs N)" >&2; exit 2 ;;
    esac
done
case "$epochs" in ''|*[!0-9]*) echo "scaling.sh: --epochs wants a positive integer" >&2; exit 2 ;; esac

out=${OUT:-$top/build-gpu/results}
mkdir -p "$out"
rep=$out/scaling.txt
: >"$rep"
say() { echo "$*" | tee -a "$rep"; }
fail() { say "scaling.sh: FAILED: $*"; exit 1; }

# shellcheck source=bench/gpu/env.sh
. bench/gpu/env.sh || fail "setting up the build environment (bench/gpu/env.sh)"
if [ ! -x build-gpu/worker/ctrain ]; then
    if [ ! -f build-gpu/build.ninja ]; then
        "${meson[@]}" setup build-gpu -Dcuda=enabled -Dbuildtype=release >"$out/scaling-setup.log" 2>&1 \
            || fail "meson setup (log: $out/scaling-setup.log)"
    fi
    ninja -C build-gpu >"$out/scaling-build.log" 2>&1 || fail "build (log: $out/scaling-build.log)"
fi
ctrain=build-gpu/worker/ctrain
ctrun=build-gpu/launcher/ctrun
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || fail "no GPU visible (nvidia-smi -L)"
say "# bench/gpu/scaling.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $gpus GPU(s)"
say "# gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"

# data: the file, else a synthetic one of the same size
data=$(python3 - "$out" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "bench", "gpu"))
import step_bench
w = step_bench.WORKLOADS["sasrec-ml1m"]
path, kind = step_bench.dataset("sasrec-ml1m", w, sys.argv[1])
print(path)
EOF
) || fail "preparing the data"
say "# data: $data"
args=(--dataset "$data" --no_time --no_mhc --maxlen 200 --batch_size 128 --hidden_units 50
      --num_blocks 2 --num_heads 1 --dropout_rate 0.2 --layout post_ln --l2_emb 0
      --num_epochs "$epochs" --eval sampled --eval_every 0 --resume never --device cuda)

# summary_of LOG -> "ms_per_step positions_per_s"
summary_of() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
log, metrics = sys.argv[1], sys.argv[2]
s = None
for line in open(log, errors="replace"):
    if line.startswith("# summary: ") or "# summary: " in line:
        s = json.loads(line.split("# summary: ", 1)[1])
pps = 0.0
try:
    for line in open(metrics):
        pps = json.loads(line).get("positions_per_s", pps)
except OSError:
    pass
print("%.3f %.0f" % (1000.0 * s["train_seconds"] / max(s["steps"], 1), pps) if s else "- -")
EOF
}

status=0
run_one() { # run_one NAME NPROC BACKEND [CTRAIN FLAGS...]
    local name=$1 n=$2 be=$3 dir=$out/scaling-$1
    shift 3
    local extra=("$@")
    rm -rf "$dir"
    if [ "$n" = 0 ]; then
        env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT \
            "$ctrain" --train_dir "$dir" "${args[@]}" >"$out/scaling-$name.log" 2>&1
    else
        "$ctrun" --nproc_per_node "$n" "$ctrain" --train_dir "$dir" "${args[@]}" --backend "$be" \
            "${extra[@]}" \
            >"$out/scaling-$name.log" 2>&1
    fi
    local rc=$?
    if [ $rc -ne 0 ]; then
        say "$(printf '%-26s failed (exit %d; log %s)' "$name" "$rc" "$out/scaling-$name.log")"
        echo "- -"
        return
    fi
    summary_of "$out/scaling-$name.log" "$dir/metrics.jsonl"
}

say "$(printf '%-26s %10s %14s %8s' run ms/step positions/s speedup)"
read -r ms1 pps1 < <(run_one "1 GPU, no reduction" 0 local | tail -n 1)
[ "$ms1" = - ] && status=1
say "$(printf '%-26s %10s %14s %8s' "1 GPU, no reduction" "$ms1" "$pps1" 1.00)"
read -r msn pps < <(run_one "1 GPU, NCCL world of 1" 1 nccl | tail -n 1)
[ "$msn" = - ] && status=1
say "$(printf '%-26s %10s %14s %8s' "1 GPU, NCCL world of 1" "$msn" "$pps" -)"
read -r msq ppsq < <(run_one "1 GPU, NCCL, no overlap" 1 nccl --overlap_reduction false | tail -n 1)
[ "$msq" = - ] && status=1
say "$(printf '%-26s %10s %14s %8s' "1 GPU, NCCL, no overlap" "$msq" "$ppsq" -)"
if [ "$ms1" != - ] && [ "$msn" != - ]; then
    say "# reduction not hidden (world of 1): $(python3 -c "print('%.3f ms per step (%.1f%%)' % ($msn - $ms1, 100 * ($msn - $ms1) / $ms1))")"
fi
for n in 2 4 8; do
    [ "$n" -le "$gpus" ] || break
    read -r ms pps < <(run_one "$n GPUs, NCCL" "$n" nccl | tail -n 1)
    [ "$ms" = - ] && status=1
    sp=-
    if [ "$pps" != - ] && [ "$pps1" != - ]; then
        sp=$(python3 -c "print('%.2f' % ($pps / $pps1))")
    fi
    say "$(printf '%-26s %10s %14s %8s' "$n GPUs, NCCL" "$ms" "$pps" "$sp")"
done
[ "$gpus" -ge 2 ] || say "# one GPU: no multi-GPU rows; the world-of-1 row above is the reduction's cost"

# NCCL bus bandwidth around the gradient's size (SASRec ml-1m: ~212k floats, 0.85 MB)
if [ -x build-gpu/bench/allreduce_bench ]; then
    ranks=$gpus
    build-gpu/bench/allreduce_bench --ctrun-store build-gpu/launcher/ctrun-store \
        --nranks "$ranks" --minbytes 64K --maxbytes 64M --backend nccl \
        >"$out/scaling-busbw.txt" 2>&1 \
        && { say "# NCCL all-reduce on $ranks GPU(s):"; tee -a "$rep" <"$out/scaling-busbw.txt"; } \
        || say "# allreduce_bench failed (log: $out/scaling-busbw.txt)"
fi
exit $status
