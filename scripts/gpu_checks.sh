#!/usr/bin/env bash
# Everything PTXBench checks on a GPU, in one command on a machine without internet, in sections that
# each have their own time limit, so one call of a lent GPU can run what fits and a run cut short
# keeps what finished. Logs, JUnit files and benchmark results are collected into one archive,
# $OUT/gpu_checks.tar.gz (or ./gpu_checks.tar.gz), because the lent machines return only a few files.
#
#   scripts/gpu_checks.sh [SECTION...]     (default: examples gold fixit scaleout refs, about 17 minutes)
#
# Sections (seconds are each one's limit; PTXBENCH_GPU_CHECK_SCALE multiplies them). The pytest ones:
#   examples     tests/gpu/test_examples_gpu.py: the plain examples and the vendor baselines, 400 s
#   adversarial  tests/gpu/test_evaluator_gpu.py: the evaluator on every known cheat but the ones only Nsight
#                Compute catches, and tests/gpu/test_lanes_memory_gpu.py: a lane that takes the GPU's memory, 480 s
#                (on an H100, 2026-12-07: 29 of its 42 tests reached in 540 s with ncu on PATH: run it with a scale of 1.2,
#                or in two calls: adversarial1 and adversarial2, each half of its tests, 540 s each)
#   timed        tests/gpu/test_evaluator_gpu.py's every bundled example PASSED with timings (honest kernels are not
#                accused), 540 s (on an H100 the examples and the cases together did not fit one call: 13 of 16
#                examples in 552 s)
#   profiled     tests/gpu/test_evaluator_gpu.py's cases that Nsight Compute must catch (about 35 s each), 300 s
#   hostile      tests/gpu/test_hostile_run_gpu.py: one run of every adversarial case beside the honest
#                examples (other items unaffected, no process left, no record changed), 600 s; under ncu unless
#                PTXBENCH_HOSTILE_PROFILE=0 (the run without ncu fits one device call; profiled covers the ncu cases).
#                The examples of the cases' tasks are evaluated first in the same session: the run starts from
#                the baselines they timed (on an H200: about 230 s of examples, then the run in about 170 s)
#   gold         tests/gpu/test_reference_gpu.py and the wrapper header's GPU test, 270 s (on an H200, 2026-12-04, the
#                limit of 150 s ran out in the attention_bwd edge lengths, the last but one test)
#   fixit        tests/gpu/test_fixit_gpu.py (needs the --llm wheels), 80 s
#   serve        tests/gpu/test_serve_gpu.py: a batch and a Fixit repair through a real `ptxbench serve` (needs the --serve wheels), 360 s
#   scaleout     tests/gpu/test_scaleout_gpu.py (the Ray part needs the --ray wheels), 240 s
#   evidence     tests/gpu/test_evidence_profiles_gpu.py: sweep against publish (status, speedup) on the GEMM reference,
#                plain examples and failing adversarial cases (issue 40), and tests/gpu/test_profile_batching_gpu.py: a
#                batched ncu session judges each candidate as its own session does, 540 s
# and the benchmarks:
#   refs       benchmarks/reference_kernels.py (the expert kernels against the vendor libraries), 240 s
#   evaluator  benchmarks/evaluator_benchmark.py (timing spread, ncu agreement, throughput), 300 s
#   multigpu   benchmarks/multi_gpu_throughput.py (1 GPU vs all visible), 300 s
#   concurrent1, concurrent2: benchmarks/concurrent_evals.py --part 1/2 and 2/2, each one device call: half of the
#              examples and half of the adversarial cases as two `ptxbench eval` runs at once on one GPU (issue 36: no
#              item lost, no HARNESS_ERROR); both lists at once took about 1,000 s on an H100, so each half gets 540 s
#   variants_attention, variants_memory, variants_gemm: benchmarks/kernel_variants.py on the prepared variants of
#              the references that miss their targets (benchmarks/variants/), each one device call: attention_bwd;
#              rmsnorm and transpose; gemm_fp8 (limits 250, 450 and 500 s; on an H200, 2026-12-04: 136, 249 and 68 s,
#              the first with attention_fwd variants since adopted or removed, and before attention_bwd's
#              dq_workspace, prepared since and not yet timed)
#   servebench benchmarks/serve_throughput.py against a warm `ptxbench serve --lanes 4` on GPU 0: 100 GEMM candidates
#              without ncu, then 100 with it (each stops at its share of the limit and reports the finished
#              ones' rate; PTXBENCH_SERVE_BUDGET_MS sets the jobs' timing budget, default eval's), 520 s
#   sweepbench benchmarks/serve_throughput.py --mix --evidence both against a warm `ptxbench serve --lanes 4` on GPU 0:
#              100 mixed candidates under sweep, then the first 20 again under publish, with the agreement table, then
#              100 more under sweep without ncu (each stops at its share of the limit; needs the --serve wheels), up to
#              90 s of server start, 410 s and 140 s (scale 0.8 fits one device call)
#   misses     benchmarks/ncu_against_vendor.py on the reference misses last profiled side by side with their best
#              baseline (the evidence of benchmarks/reference_limits.toml for gemm_bf16's decode, rmsnorm's decode and
#              softmax's long rows), about 40 s each, 200 s
#   serving_misses  the serving references' misses not yet profiled (MLA decode at 1 and 64 sequences, the MoE's
#              Mixtral prefill, RoPE's two small workloads, the paged decode at 8 sequences) side by side with their best
#              baseline, after FlashInfer's kernels for them are built (needs the --flashinfer wheels), about 560 s
#   serving_refs  `ptxbench eval` of the fp8 attention and ragged prefill references, whose best baseline is now
#              FlashAttention-3's own kernel, and cuDNN's own fp8 SDPA (needs the --fa3 and --cudnn-frontend wheels;
#              FlashInfer's and fa3-fwd's together are more than one call may carry beside the repository: this
#              section wants those two only), 560 s
#
# Wheels: the package's pure-Python needs (scripts/fetch_device_wheels.sh [--ray] [--llm] [--baselines] [--serve])
# are installed from .whl/ first when that folder exists: every wheel there, without dependencies, so
# Liger-Kernel (--baselines) uses the machine's own torch and triton.
set -uo pipefail
cd "$(dirname "$0")/.."
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(examples gold fixit scaleout refs)
scale=${PTXBENCH_GPU_CHECK_SCALE:-1}
dest=${OUT:-$PWD}
work=$(mktemp -d /tmp/gpu_checks.XXXXXX)
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
# One cache for every pytest section of this machine (tests/conftest.py): each baseline's clean time measured and
# each case built once, also across the calls of one warm lent machine
export PTXBENCH_TEST_CACHE=${PTXBENCH_TEST_CACHE:-/tmp/ptxbench-gpu-checks-cache}
# Every hold of the GPU's lock, for diagnosing a stage that waits: in scratch space, where the processes
# holding candidate code may still write (their view of the machine is read-only elsewhere).
export PTXBENCH_LOCK_TRACE=${PTXBENCH_LOCK_TRACE:-$work/locks.jsonl}
PROFILED="dead_code or fake_ncu or fake_counter or profiler_detect or token_bulk or forged_timing or rejected_once_ncu"

archive() {
    tar -czf "$dest/gpu_checks.tar.gz" -C "$work" . && echo "results: $dest/gpu_checks.tar.gz"
}
trap archive EXIT

limit() { python3 -c "print(int($1 * $scale))"; }

start_server() {  # port, state folder, log: `ptxbench serve --lanes 4` on GPU 0, its pid in $server; waits up to 90 s for its health
    python3 -m ptxbench serve --gpus 0 --lanes 4 --state "$2" --port "$1" > "$3" 2>&1 &
    server=$!
    for _ in $(seq 90); do
        python3 -c "import httpx; httpx.get('http://127.0.0.1:$1/v1/health', timeout=2).raise_for_status()" \
            2>/dev/null && break
        sleep 1
    done
}

export PYTHONPATH=$PWD/src
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl; then
        export PYTHONPATH=/tmp/site:$PWD/src
    elif python3 -c "import pydantic" 2>/dev/null; then
        echo "note: the wheels in .whl/ do not fit this Python; using the installed packages" >&2
    else
        echo "the wheels in .whl/ would not install and pydantic is missing" >&2; exit 1
    fi
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c \
    "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"; \
    ncu --version | tail -1; git rev-parse HEAD 2>/dev/null; date -u; } > "$work/environment.txt" 2>&1

side_by_side() {  # section, limit in seconds per profile, "task workload baseline"...: benchmarks/ncu_against_vendor.py
    local section=$1 seconds=$2 spec
    shift 2
    for spec in "$@"; do
        set -- $spec
        timeout "$(limit "$seconds")" python3 benchmarks/ncu_against_vendor.py \
            "src/ptxbench/kernels/reference/sm_90a/$1.cu" --workload "$2" --baseline "$3" --timeout-s $((seconds - 5)) \
            --out "$work/ncu" > "$work/ncu_$1_$2.log" 2>&1
        echo "$section $1 $2: exit $?"
    done
}

run_pytest() {  # name, limit in seconds, test files...
    local name=$1 seconds=$2
    shift 2
    timeout "$(limit "$seconds")" python3 -m pytest -q -m gpu "$@" -p no:cacheprovider -rA -s \
        --junitxml "$work/$name.xml" > "$work/$name.log" 2>&1
    echo "$name: exit $? — $(grep -E ' in [0-9.]+s' "$work/$name.log" | tail -1)"
}

for section in "${sections[@]}"; do
    case "$section" in
        examples) run_pytest examples 400 tests/gpu/test_examples_gpu.py ;;
        adversarial) run_pytest adversarial 480 tests/gpu/test_evaluator_gpu.py tests/gpu/test_lanes_memory_gpu.py \
                         -k "not ($PROFILED) and not test_examples_pass_with_timings" ;;
        adversarial1|adversarial2)
            run_pytest "$section" 540 tests/gpu/test_evaluator_gpu.py tests/gpu/test_lanes_memory_gpu.py \
                -k "not ($PROFILED) and not test_examples_pass_with_timings" --shard "${section#adversarial}/2" ;;
        timed) run_pytest timed 540 tests/gpu/test_evaluator_gpu.py -k "test_examples_pass_with_timings" ;;
        profiled) run_pytest profiled 300 tests/gpu/test_evaluator_gpu.py -k "$PROFILED" ;;
        hostile) run_pytest hostile 600 tests/gpu/test_evaluator_gpu.py tests/gpu/test_hostile_run_gpu.py \
                     -k "(test_examples_pass_with_timings and (gemm_bf16 or rmsnorm or softmax or transpose)) or hostile" ;;
        gold) run_pytest gold 270 tests/gpu/test_reference_gpu.py tests/context/test_wrappers_gpu.py ;;
        fixit) run_pytest fixit 80 tests/gpu/test_fixit_gpu.py ;;
        serve) run_pytest serve 360 tests/gpu/test_serve_gpu.py ;;
        scaleout) run_pytest scaleout 240 tests/gpu/test_scaleout_gpu.py ;;
        evidence) run_pytest evidence 540 tests/gpu/test_profile_batching_gpu.py tests/gpu/test_evidence_profiles_gpu.py ;;
        sweepbench)
            start_server 8766 "$work/sweep-state" "$work/sweep_server.log"
            share=$(limit 130)
            timeout $((2 * share + 150)) python3 benchmarks/serve_throughput.py --server http://127.0.0.1:8766 --mix \
                --evidence both --count 100 --publish-count 20 --deadline-s "$share" --workdir "$work/candidates-sweep" \
                --out "$work/serve_sweep_publish.json" > "$work/sweepbench.log" 2>&1
            echo "sweepbench: exit $?"
            grep -E '"(evidence|finished|seconds|candidates_per_minute|compared|verdicts_differ|largest_speedup_difference_pct)"' \
                "$work/sweepbench.log"
            share=$(limit 80)  # then sweep without the proof, on the same warm server
            timeout $((share + 60)) python3 benchmarks/serve_throughput.py --server http://127.0.0.1:8766 --mix \
                --evidence sweep --no-profile --count 100 --deadline-s "$share" --workdir "$work/candidates-sweep-noprof" \
                --out "$work/serve_sweep_no_profile.json" > "$work/sweepbench_no_profile.log" 2>&1
            echo "sweepbench without the proof: exit $?"
            grep -E '"(evidence|finished|seconds|candidates_per_minute)"' "$work/sweepbench_no_profile.log"
            # the batched ncu sessions that formed (proof.batching traces each one)
            grep -ho '"ncu batch of [0-9]*: [0-9]* confirmed"' "$PTXBENCH_LOCK_TRACE" 2>/dev/null | sort | uniq -c
            kill -INT "$server"; sleep 3; kill -9 "$server" 2>/dev/null ;;
        refs) timeout "$(limit 240)" python3 benchmarks/reference_kernels.py --out "$work/refs" > "$work/refs.log" 2>&1
              echo "refs: exit $?"; grep -E "^## " "$work/refs.log" ;;
        evaluator) timeout "$(limit 300)" python3 benchmarks/evaluator_benchmark.py --copies 4 \
                       --candidates kernels/reference/sm_90a/gemm_bf16.cu --out "$work/evaluator" > "$work/evaluator.log" 2>&1
                   echo "evaluator: exit $?"; tail -12 "$work/evaluator.log" ;;
        concurrent1|concurrent2)
            part=${section#concurrent}
            timeout "$(limit 560)" python3 benchmarks/concurrent_evals.py --part "$part/2" --timeout-s "$(limit 540)" \
                --out "$work/concurrent" > "$work/$section.log" 2>&1
            echo "$section: exit $?"; grep -E "^- (run|items)" "$work/$section.log" ;;
        multigpu) timeout "$(limit 300)" python3 benchmarks/multi_gpu_throughput.py --out "$work/multigpu" \
                      > "$work/multigpu.log" 2>&1
                  echo "multigpu: exit $?"; tail -12 "$work/multigpu.log" ;;
        variants_attention|variants_memory|variants_gemm)
            R=src/ptxbench/kernels/reference/sm_90a
            run_variants() {  # name, seconds, kernel_variants.py arguments...
                local name=$1 seconds=$2
                shift 2
                timeout "$(limit "$seconds")" python3 benchmarks/kernel_variants.py "$@" --trials 2 --out "$work/$name" \
                    > "$work/variants_$name.log" 2>&1
                echo "variants $name: exit $?"; tail -25 "$work/variants_$name.log" | grep -E "^\|" | head -25
            }
            case "$section" in
                variants_attention)
                    run_variants attention_bwd 250 $R/attention_bwd.cu --budget-ms 100 \
                        --variant "dq_ahead:@attention_bwd.dq_scores_ahead.cu" \
                        --variant "dkdv_ahead64:@attention_bwd.dkdv_scores_ahead.cu" \
                        --variant "both:@attention_bwd.dq_scores_ahead.cu;@attention_bwd.dkdv_scores_ahead.cu" \
                        --variant "dq_workspace:@attention_bwd.dq_workspace.cu" ;;
                variants_memory)
                    run_variants rmsnorm 250 $R/rmsnorm.cu --budget-ms 100 --variant "t128:kThreads=128" \
                        --variant "regs:@rmsnorm.regs_one_barrier.cu" --variant "regs128:@rmsnorm.regs_one_barrier.cu;kThreads=128" \
                        --variant "bulkstore:@rmsnorm.bulk_store.cu" --variant "lean:@rmsnorm.ring_sizing.cu" \
                        --variant "regs-decode:@rmsnorm.regs_one_barrier.cu;@rmsnorm.ring_sizing.cu;kRingBytesPerSm=0"
                    run_variants transpose 200 $R/transpose.cu --budget-ms 100 --variant "warps:@transpose.warp_tiles.cu" \
                        --variant "g16:kGroup=16" --variant "d16:kDeepStages=16" ;;
                variants_gemm)
                    run_variants gemm_fp8 500 $R/gemm_fp8.cu --budget-ms 100 --vendor-error \
                        --variant "wave:@gemm_fp8.wave_width.cu" --variant "wave128:@gemm_fp8.wave_width.cu;WIDE_BN=128" \
                        --variant "lazy:@gemm_fp8.lazy_release.cu" \
                        --variant "wave-lazy:@gemm_fp8.wave_width.cu;@gemm_fp8.lazy_release.cu" ;;
            esac ;;
        servebench)
            start_server 8765 "$work/serve-state" "$work/server.log"
            budget=()
            [ -n "${PTXBENCH_SERVE_BUDGET_MS:-}" ] && budget=(--timing-budget-ms "$PTXBENCH_SERVE_BUDGET_MS")
            share=$(limit 220)
            for profile in no-profile profile; do
                timeout $((share + 60)) python3 benchmarks/serve_throughput.py --count 100 "--$profile" "${budget[@]}" \
                    --deadline-s "$share" --workdir "$work/candidates-$profile" --out "$work/serve_$profile.json" \
                    > "$work/servebench_$profile.log" 2>&1
                echo "servebench $profile: exit $?"
                grep -E '"(finished|seconds|candidates_per_minute)"' "$work/servebench_$profile.log"
            done
            kill -INT "$server"; sleep 3; kill -9 "$server" 2>/dev/null ;;
        misses)
            side_by_side misses 60 "gemm_bf16 llama3-8b-qkv-decode cublas" "rmsnorm t32-h4096-decode liger" \
                "softmax r8192-c32768 liger" ;;
        serving_misses)
            # FlashInfer's kernels for the baselines profiled here, built and installed first (else each side's
            # process would compile them under ncu), then the serving misses not yet profiled, side by side
            timeout "$(limit 300)" python3 scripts/flashinfer_prebuild.py --tasks mla_decode_paged,rope,decode_gqa_paged \
                > "$work/prebuild.log" 2>&1
            echo "serving_misses prebuild: exit $?"
            side_by_side serving_misses 70 "mla_decode_paged dsv3-b1-p64 flashinfer" \
                "mla_decode_paged dsv3-b64-p64 flashinfer" "moe_grouped_gemm mixtral-up-prefill loop" \
                "rope q3-8b-prefill flashinfer" "rope l3-8b-decode flashinfer" "decode_gqa_paged l8b-b8-p64 flashinfer" ;;
        serving_refs)
            R=src/ptxbench/kernels/reference/sm_90a
            timeout "$(limit 560)" python3 -m ptxbench eval "$R/attention_fp8_fwd.cu" "$R/prefill_gqa_ragged.cu" \
                --timing-budget-ms 200 --trials 3 --out "$work/serving_refs" > "$work/serving_refs.log" 2>&1
            echo "serving_refs: exit $? — $(grep -E '^\[[0-9]+/' "$work/serving_refs.log" | tr '\n' ' ')" ;;
        *) echo "unknown section: $section (examples adversarial adversarial1 adversarial2 timed profiled hostile gold fixit serve scaleout evidence refs evaluator multigpu concurrent1 concurrent2 variants_attention variants_memory variants_gemm servebench sweepbench misses serving_misses serving_refs)" >&2 ;;
    esac
done
