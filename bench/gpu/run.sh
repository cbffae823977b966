#!/usr/bin/env bash
# bench/gpu/run.sh - the one command that checks and measures the GPU code. In a copy of the
# work tree on a GPU machine with nvcc, meson, ninja and PyTorch and no network, it:
#   1. configures a CUDA build in build-gpu/ (release, sm_90 + PTX) and builds it;
#   2. runs the gpu test suite (every CUDA op against its CPU twin, ctrain's model on the CUDA
#      op table against the CPU table, ctrain --device cuda / NCCL end to end), the multi-gpu
#      suite (skips with fewer than 2 GPUs) and the launchers' argument checks;
#   3. runs the kernel benchmark (bench/gpu/kernels_bench_gpu.c) at ml-1m sizes and the PyTorch
#      reference of the same ops and of one SASRec training step (bench/gpu/torch_ops.py), and
#      prints them side by side with ratios (bench/gpu/compare.py);
#   4. times ctrain's own training step (--device cuda, fp32 and --use_amp) against the PyTorch
#      reference (tests/worker/trainer/torch_ref.py --device cuda), eager and under
#      torch.compile, on the same GPU for SASRec ml-1m-r
#      (L=200, B=128), TiSASRec ml-100k and (ctrain only) the mHC variant, with the roofline
#      column (bench/gpu/step_bench.py;
#      data from $CT_DATA_DIR, else synthetic files of the same sizes).
#
#   bench/gpu/run.sh [--reps N] [--step-reps N] [--compile MODES] [--compile-limit S]
#                    [--skip-tests] [--sanitize]
#
#   --step-reps N    runs of each ctrain and eager PyTorch step measurement (median; default 3)
#   --compile MODES  torch.compile modes step_bench also times, comma-separated (default
#                    default,reduce-overhead,max-autotune; '' for none), once each after the
#                    eager rows
#   --compile-limit S  seconds one torch.compile run may take before it is stopped and its row
#                    says so (max-autotune compiled for more than 3 minutes on an H200)
#   --sanitize  also run the GPU tests under compute-sanitizer (memcheck: out-of-bounds and
#               uninitialised accesses; racecheck and synccheck: shared-memory races and
#               barrier misuse), which sees what the CPU emulator cannot; slow, minutes
#
# Results go to $OUT when it is set (a folder the caller collects), else build-gpu/results/:
#   summary.txt  gpu-tests.log  cuda-args.log  kernels_bench_gpu.txt  torch_ops.txt
#   step_bench.txt  step_bench.json  (+ logs)
# Missing Debian development packages (libuv, jansson, zlib, OpenBLAS, OpenSSL, libcurl, libyaml,
# libmicrohttpd, utf8proc and the libraries they link) can travel with the tree as .deb files in
# .debs/ (apt-get download ... on a Debian/Ubuntu machine with a network); they are unpacked
# under /tmp/ct-debs and found through pkg-config there.
# Exit status: 0 when the build and the GPU tests passed; the benchmarks are reported, not
# judged. 1 when something failed, with the step named.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1

reps=50
step_reps=3
compile_modes=default,reduce-overhead,max-autotune
compile_limit=
run_tests=1
sanitize=0
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) reps=${2:-}; shift 2 ;;
        --step-reps) step_reps=${2:-}; shift 2 ;;
        --compile) compile_modes=${2-}; shift 2 ;;
        --compile-limit) compile_limit=${2:-}; shift 2 ;;
        --skip-tests) run_tests=0; shift ;;
        --sanitize) sanitize=1; shift ;;
        -h|--help) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (expected --reps N, --step-reps N, --compile MODES, --compile-limit S, --skip-tests or --sanitize)" >&2
           exit 2 ;;
    esac
done
for n in "$reps" "$step_reps"; do
    case "$n" in
        ''|0|*[!0-9]*) echo "run.sh: --reps and --step-reps want a positive integer, got '$n'" >&2; exit 2 ;;
    esac
done

out=${OUT:-$top/build-gpu/results}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
fail() { say "run.sh: FAILED: $*"; exit 1; }

# ---- tools ---------------------------------------------------------------------------------
# shellcheck source=bench/gpu/env.sh
. bench/gpu/env.sh || fail "setting up the build environment (bench/gpu/env.sh)"

say "# bench/gpu/run.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say "# nvcc: $(nvcc --version | tail -n 1)"
if command -v nvidia-smi >/dev/null; then
    say "# gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1)"
else
    say "# gpu: nvidia-smi not found"
fi

# ---- build -------------------------------------------------------------------------------------
if [ ! -f build-gpu/build.ninja ]; then
    "${meson[@]}" setup build-gpu -Dcuda=enabled -Dbuildtype=release >"$out/meson-setup.log" 2>&1 \
        || { tail -n 30 "$out/meson-setup.log"; fail "meson setup (log: $out/meson-setup.log)"; }
fi
ninja -C build-gpu >"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; fail "build (log: $out/build.log)"; }
say "# build: build-gpu/ ok"

# ---- GPU tests ---------------------------------------------------------------------------------
status=0
if [ "$run_tests" = 1 ]; then
    # One at a time: the tests share the GPU and some time themselves against the CPU.
    if "${meson[@]}" test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 \
            >"$out/gpu-tests.log" 2>&1 \
        && "${meson[@]}" test -C build-gpu --suite multi-gpu --print-errorlogs --num-processes 1 \
            >"$out/multi-gpu-tests.log" 2>&1 \
        && "${meson[@]}" test -C build-gpu cuda_args >"$out/cuda-args.log" 2>&1; then
        say "# gpu tests: $(grep -E '^(Ok|Fail|Skipped):' "$out/gpu-tests.log" | tr -s ' ' | tr '\n' ' ')"
        say "# multi-gpu tests: $(grep -E '^(Ok|Fail|Skipped):' "$out/multi-gpu-tests.log" | tr -s ' ' | tr '\n' ' ')"
        say "# launcher argument checks (cuda_args): ok"
    else
        status=1
        grep -E 'FAIL|ERROR|TIMEOUT' "$out/gpu-tests.log" | head -n 20 | tee -a "$summary"
        say "# gpu tests: FAILED (log: $out/gpu-tests.log)"
    fi
    if grep -q 'SKIP' "$out/gpu-tests.log"; then
        say "# note: some gpu tests skipped (no GPU visible?): $(grep -c SKIP "$out/gpu-tests.log") rows"
    fi
fi

if [ "$sanitize" = 1 ]; then
    if command -v compute-sanitizer >/dev/null; then
        for t in build-gpu/tests/kernels/test_*_gpu; do
            for tool in memcheck racecheck synccheck; do
                log=$out/sanitize-$tool-$(basename "$t").log
                compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" >"$log" 2>&1
                rc=$?
                case $rc in
                    0) say "# compute-sanitizer $tool $(basename "$t"): clean" ;;
                    77) say "# compute-sanitizer $tool $(basename "$t"): skipped (no GPU)" ;;
                    *) status=1
                       say "# compute-sanitizer $tool $(basename "$t"): FAILED, exit $rc (log: $log)" ;;
                esac
            done
        done
    else
        say "# compute-sanitizer: not found, --sanitize skipped"
    fi
fi

# ---- benchmarks ------------------------------------------------------------------------------
if build-gpu/bench/kernels_bench_gpu "$reps" >"$out/kernels_bench_gpu.txt" 2>"$out/kernels_bench_gpu.err"; then
    say "# kernel benchmark: $out/kernels_bench_gpu.txt"
else
    say "# kernel benchmark: did not run: $(tail -n 1 "$out/kernels_bench_gpu.err")"
fi
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    if python3 bench/gpu/torch_ops.py --reps "$reps" >"$out/torch_ops.txt" 2>"$out/torch_ops.err"; then
        say "# PyTorch reference: $out/torch_ops.txt"
    else
        say "# PyTorch reference: failed: $(tail -n 1 "$out/torch_ops.err")"
    fi
else
    say "# PyTorch reference: not run (python3 has no PyTorch with a visible GPU)"
    : >"$out/torch_ops.txt"
fi
cat "$out/kernels_bench_gpu.txt" >>"$summary" 2>/dev/null
python3 bench/gpu/compare.py "$out/kernels_bench_gpu.txt" "$out/torch_ops.txt" | tee -a "$summary"

# ---- ctrain's step against the PyTorch reference -----------------------------------------------
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    if python3 bench/gpu/step_bench.py --ctrain build-gpu/worker/ctrain --reps "$step_reps" \
            --compile "$compile_modes" ${compile_limit:+--compile_limit "$compile_limit"} --out "$out" \
            >"$out/step_bench.txt" 2>"$out/step_bench.err"; then
        say "# ctrain step against PyTorch eager and torch.compile on this GPU (ms/step, median of $step_reps):"
        tee -a "$summary" <"$out/step_bench.txt"
    else
        say "# step benchmark: failed: $(tail -n 1 "$out/step_bench.err")"
    fi
else
    say "# step benchmark: not run (python3 has no PyTorch with a visible GPU)"
fi
exit $status
