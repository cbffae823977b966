#!/usr/bin/env bash
# bench/gpu/kernels_ab.sh - one short run on a GPU machine that checks the CUDA kernels and times
# each rewritten kernel against the previous one it replaced, side by side, in the same process:
#   1. configures build-gpu/ (release, as bench/gpu/run.sh) when it is not configured, and builds
#      only what the steps below run: the GPU tests of the kernels and of ctrain, ctrain and the
#      launchers it needs, the kernel benchmark;
#   2. runs those tests (every CUDA op against its CPU twin, the new kernels against their
#      baselines, ctrain's model on the CUDA table against the CPU table, ctrain --device cuda
#      against --device cpu as processes), one at a time;
#   3. optionally (--sanitize) runs the rewritten kernels' tests under compute-sanitizer
#      (memcheck, racecheck, synccheck: what the CPU emulator cannot see);
#   4. runs build-gpu/bench/kernels_bench_gpu (ml-1m sizes: B = 128, L = 200, d = 50) and prints
#      the pairs of rows "new kernel | baseline kept in ct_kernels_cuda.h" with their ratio.
#
#   bench/gpu/kernels_ab.sh [--reps N] [--sanitize] [--skip-tests]
#
#   --reps N      repetitions per benchmark row (median of N x 20 calls; default 10)
#   --sanitize    also the compute-sanitizer step (a few minutes more)
#   --skip-tests  only build and time
#
# Results go to $OUT when it is set, else build-gpu/results-ab/: ab.txt (the table),
# kernels_bench_gpu.txt (every row), tests.log, build.log, sanitize-*.log. Each step's line
# carries the seconds since the start; on a fresh build-gpu/ the build is most of the run.
# Exit status: 0 when the build and the tests passed (timings are reported, not judged); 1 when a
# step failed (named on the last line); 2 on a bad argument.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1

reps=10
sanitize=0
run_tests=1
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) reps=${2:-}; shift 2 ;;
        --sanitize) sanitize=1; shift ;;
        --skip-tests) run_tests=0; shift ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "kernels_ab.sh: unknown argument '$1' (expected --reps N, --sanitize or --skip-tests)" >&2
           exit 2 ;;
    esac
done
case "$reps" in
    ''|0|*[!0-9]*) echo "kernels_ab.sh: --reps wants a positive integer, got '$reps'" >&2; exit 2 ;;
esac

out=${OUT:-$top/build-gpu/results-ab}
mkdir -p "$out"
table=$out/ab.txt
: >"$table"
say() { echo "$*" | tee -a "$table"; }
fail() { say "kernels_ab.sh: FAILED: $*"; exit 1; }
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

# shellcheck source=bench/gpu/env.sh
. bench/gpu/env.sh || fail "setting up the build environment (bench/gpu/env.sh)"
say "# bench/gpu/kernels_ab.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi >/dev/null; then
    say "# gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1)"
fi

# ---- build: only what this run uses ----------------------------------------------------------------
units="adam attention bpr dropout elementwise embed encoder eval gpt2rec layernorm linear lm lm_model loss mhc rng sasrec temporal tisas xent"
targets=(bench/kernels_bench_gpu tests/worker/trainer/test_ctrain_cuda worker/ctrain launcher/ctrun
         launcher/ctrun-store)
for u in $units; do targets+=("tests/kernels/test_${u}_gpu"); done
if [ ! -f build-gpu/build.ninja ]; then
    "${meson[@]}" setup build-gpu -Dcuda=enabled -Dbuildtype=release >"$out/meson-setup.log" 2>&1 \
        || { tail -n 30 "$out/meson-setup.log"; fail "meson setup (log: $out/meson-setup.log)"; }
fi
ninja -C build-gpu "${targets[@]}" >"$out/build.log" 2>&1 \
    || { tail -n 40 "$out/build.log"; fail "build (log: $out/build.log)"; }
say "# build: ok ($(elapsed))"

# ---- tests -----------------------------------------------------------------------------------------
status=0
if [ "$run_tests" = 1 ]; then
    names=(ctrain_cuda) # ctrain --device cuda against --device cpu, 1-rank NCCL, --use_amp
    for u in $units; do names+=("${u}_gpu"); done
    if "${meson[@]}" test -C build-gpu --no-rebuild --print-errorlogs --num-processes 1 "${names[@]}" \
            >"$out/tests.log" 2>&1; then
        say "# gpu tests: $(grep -E '^(Ok|Fail|Skipped):' "$out/tests.log" | tr -s ' ' | tr '\n' ' ')($(elapsed))"
        if grep -q 'SKIP' "$out/tests.log"; then
            say "# note: tests skipped (no GPU visible?): $(grep -c SKIP "$out/tests.log") rows"
        fi
    else
        status=1
        grep -E 'FAIL|ERROR|TIMEOUT' "$out/tests.log" | head -n 20 | tee -a "$table"
        say "# gpu tests: FAILED (log: $out/tests.log)"
    fi
fi

if [ "$sanitize" = 1 ]; then
    if command -v compute-sanitizer >/dev/null; then
        for u in attention mhc xent; do
            for tool in memcheck racecheck synccheck; do
                log=$out/sanitize-$tool-$u.log
                compute-sanitizer --tool "$tool" --error-exitcode 99 "build-gpu/tests/kernels/test_${u}_gpu" \
                    >"$log" 2>&1
                rc=$?
                case $rc in
                    0) say "# compute-sanitizer $tool test_${u}_gpu: clean" ;;
                    77) say "# compute-sanitizer $tool test_${u}_gpu: skipped (no GPU)" ;;
                    *) status=1
                       say "# compute-sanitizer $tool test_${u}_gpu: FAILED, exit $rc (log: $log)" ;;
                esac
            done
        done
        say "# compute-sanitizer done ($(elapsed))"
    else
        say "# compute-sanitizer: not found, --sanitize skipped"
    fi
fi

# ---- old against new ---------------------------------------------------------------------------------
bench=$out/kernels_bench_gpu.txt
if ! build-gpu/bench/kernels_bench_gpu "$reps" >"$bench" 2>"$out/kernels_bench_gpu.err"; then
    say "# kernel benchmark: did not run: $(tail -n 1 "$out/kernels_bench_gpu.err")"
    [ "$status" = 0 ] || fail "gpu kernel tests (log: $out/tests.log)"
    exit 0
fi
grep -E '^# (device|measured|sizes)' "$bench" | tee -a "$table"
# Pairs: new row (op, dir, which occurrence) | baseline row. Row format of kernels_bench_gpu: op in
# columns 3-24, dir in 26-29, then ms.
python3 - "$bench" <<'EOF' | tee -a "$table"
import sys

rows, seen = {}, {}
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("  ") or len(line) < 36:
        continue
    op, d = line[2:24].strip(), line[25:29].strip()
    try:
        ms = float(line[29:].split()[0])
    except (IndexError, ValueError):
        continue
    k = seen.get((op, d), 0)
    seen[(op, d)] = k + 1
    rows[(op, d, k)] = ms
pairs = [
    ("layernorm backward", ("layernorm", "bwd", 0), ("layernorm (4-warp)", "bwd", 0)),
    ("attention backward, dropout 0.2", ("attention", "bwd", 0), ("attention (recompute)", "bwd", 0)),
    ("attention backward, padding skipped", ("attention skip-pad", "bwd", 0),
     ("att skip-pad (recomp)", "bwd", 0)),
    ("mHC mappings backward, n = 4", ("mhc mappings n=4", "bwd", 0), ("mhc mappings (pertok)", "bwd", 0)),
    ("TiSASRec interval masks (2)", ("tisas masks (2)", "fwd", 0), ("tisas masks (per-word)", "fwd", 0)),
    ("full softmax CE, forward + backward", ("full CE loss", "f+b", 0), ("full CE (multipass)", "f+b", 0)),
    ("LM attention forward (GPT-2 heads)", ("lm attention", "fwd", 0), ("lm attention (rows)", "fwd", 0)),
    ("LM attention backward (GPT-2 heads)", ("lm attention", "bwd", 0), ("lm attention (rows)", "bwd", 0)),
]
print("# %-38s %10s %10s %8s" % ("kernel", "new ms", "old ms", "old/new"))
for name, new, old in pairs:
    a, b = rows.get(new), rows.get(old)
    if a is None or b is None:
        print("  %-38s %10s %10s %8s" % (name, "-" if a is None else "%.4f" % a,
                                         "-" if b is None else "%.4f" % b, "-"))
    else:
        print("  %-38s %10.4f %10.4f %7.2fx" % (name, a, b, b / a if a > 0 else float("inf")))
g = rows.get(("step (CUDA graph)", "-", 0))
print("# SASRec step as one CUDA graph (new kernels): %s ms" % ("-" if g is None else "%.4f" % g))
EOF
say "# done ($(elapsed)); every row: $bench"
[ "$status" = 0 ] || fail "gpu kernel tests or compute-sanitizer (logs in $out)"
exit 0
