#!/usr/bin/env bash
# The checks that await a GPU (docs/verification-on-gpu.md, the issues "Runs on a GPU", "DFlash as
# published", "Verification on the GPU", "GPU speed"), grouped so that each group fits one device
# call of at most 10 minutes. Run from the repository root on the GPU machine, after building the
# packages it lacks here (`bash ../shared/gpu/wheelhouse.sh .gpu --ray --mlflow`) and carrying `.gpu`:
#
#   bash tools/gpu_checks.sh first     # the first GPU call (8 min): tests/gpu, the CLI, the headline figures
#   bash tools/gpu_checks.sh profile   # top kernels of a pass and the host-sync sites of a round
#   bash tools/gpu_checks.sh tests     # make test-gpu: tests/gpu (capture, decode, verifiers, trees)
#   bash tools/gpu_checks.sh cli       # speculab on cuda: inline, Ray, capture off, a refused device
#   bash tools/gpu_checks.sh bench     # benchmarks/gpu_systems.py (8B shapes), verify.py, ddtree.py
#   bash tools/gpu_checks.sh qwen3     # gpu_systems.py --arch qwen3, the random Qwen3-8B + DFlash pair
#   bash tools/gpu_checks.sh trees     # gpu_systems.py (p) and (q): a DFlash round by budget, break-even, projection
#   bash tools/gpu_checks.sh baselines # (9 min) tests/gpu, a run against compiled and eager generate, table (a)
#   bash tools/gpu_checks.sh fused     # (8 min) compiled layers and captured verifiers: tests, a run, tables (b), (c), (a)
#   bash tools/gpu_checks.sh ahead     # (8 min) drafting ahead on a draft actor of its own: tests, benchmarks/ahead.py
#   bash tools/gpu_checks.sh dflash2   # (8 min) the random 8B Qwen3 + DFlash2 pair decoding captured; the selector's time
#   bash tools/gpu_checks.sh adaptive  # (9 min) algorithm.L=auto against fixed L, batch 1, 8, 32, 8B shapes
#   bash tools/gpu_checks.sh budgets   # (7 min) algorithm.budget=auto against fixed DDTree budgets, batch 1, 8, 8B shapes
#
# Each step is bounded by `timeout`; its output goes to $OUT/<group>/<step>.log and one line per
# step (exit status, seconds) to $OUT/<group>/summary.txt, which comes back from the device call.
set -u
group=${1:?usage: gpu_checks.sh first|profile|tests|cli|bench|qwen3|trees|baselines|fused|ahead|dflash2|adaptive|budgets}
out=${OUT:-/tmp/gpu_checks}/$group
mkdir -p "$out" /tmp/site
[[ -f .gpu/site.tar.xz && ! -d /tmp/site/ray ]] && tar -xJf .gpu/site.tar.xz -C /tmp/site
# absolute: the CLI tests start `speculab` in a temporary directory
export PYTHONPATH=$PWD/platform:$PWD/tests:/tmp/site MLFLOW_ALLOW_FILE_STORE=true PYTHONUNBUFFERED=1
cli=(python -m speculab.launch.cli tracking.uri=file:/tmp/mlruns dataset.num_prompts=4 sampling.max_new_tokens=32)

step() {  # NAME SECONDS COMMAND...
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}

# RUNS REGEX: the columns of every run the CLI steps wrote
runs=(env MLFLOW_TRACKING_URI=file:/tmp/mlruns python -c "import mlflow, sys; print(mlflow.search_runs(
search_all_experiments=True).filter(regex='tags.mlflow.runName|syncs|' + sys.argv[1]).to_string())")

python -c "import torch, transformers; print(torch.__version__, 'CUDA', torch.version.cuda, 'transformers', \
transformers.__version__, torch.cuda.get_device_name())" | tee "$out/versions.txt"
case $group in
first)
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1
    # The tests that start a CLI or Ray (4 tests, 3 to 4 minutes: each CLI start imports for about 20 s
    # on that machine) run in a second pytest process beside the in-process tests (2 minutes) and the
    # CLI steps; the figures wait for both, so nothing else shares the GPU while they are measured.
    slow=(tests/gpu/test_capture_cuda.py::test_the_cli_runs_with_capture_on_and_off_and_logs_host_syncs
        tests/gpu/test_decode_cuda.py::test_ray_with_both_actors_on_one_gpu_decodes_like_inline
        tests/gpu/test_decode_cuda.py::test_a_gpu_run_logs_its_device_and_memory_peaks)
    deselect=("${slow[@]/#/--deselect=}")
    pytest=(python -m pytest -v -m gpu -p no:cacheprovider --timeout 150 -rfE --durations=10)
    step tests_subprocess 330 "${pytest[@]}" --basetemp=/tmp/pt_subprocess "${slow[@]}" &
    step tests_in_process 200 "${pytest[@]}" --basetemp=/tmp/pt_in_process tests/gpu "${deselect[@]}"
    step ddtree_cli 60 "${cli[@]}" model=tiny-pycode_dflash drafter=dflash algorithm=ddtree model.device=cuda runtime=inline
    step refused_device 60 "${cli[@]}" model.device=cuda:7 runtime=inline  # must fail, naming the GPUs
    step runs 20 "${runs[@]}" 'block_efficiency|speedup_vs_ar$|tokens_per_s$'
    wait
    # a test process stopped at its limit can leave its Ray cluster running, which would share the
    # CPUs with the figures (an eager pass is host-bound)
    step ray_stop 30 python -m ray.scripts.scripts stop --force
    step figures 200 python benchmarks/gpu_systems.py --tables bca --sizes 1,16,64,256 --contexts 1024 \
        --vocabs 128256 --verifiers token,block,gbv --max-new-tokens 64
    ;;
profile)  # where the time goes: the top kernels of a pass, the host-sync sites of a round
    step kernels 60 python tools/gpu_profile.py kernels
    step syncs 45 python tools/gpu_profile.py syncs
    ;;
tests)
    step test_gpu 540 python -m pytest -q -m gpu tests/gpu -p no:cacheprovider
    ;;
cli)
    step inline 150 "${cli[@]}" model.device=cuda runtime=inline
    step ray 200 "${cli[@]}" model.device=cuda cluster=gpu1
    step capture_off 120 "${cli[@]}" model.device=cuda runtime=inline model.capture=false
    step refused_device 60 "${cli[@]}" model.device=cuda:7 runtime=inline  # must fail, naming the GPUs
    ;;
bench)  # the tables `first` leaves out (draft step and DFlash block pass, the engine's loop, the tiny pair)
    step gpu_systems 240 python benchmarks/gpu_systems.py --tables edt
    step ddtree 60 python benchmarks/ddtree.py --skip-e2e --device cuda
    step verify 90 python benchmarks/verify.py --device cuda
    ;;
qwen3)  # real scale end to end: an 8B checkpoint in the published layout, read from disk, DDTree budgets
    step random_pair 90 python tools/random_dflash_pair.py /tmp/q3 --device cuda
    step ddtree_budgets 330 "${cli[@]}" -m model=qwen3-8b_dflash model.target_path=/tmp/q3/target \
        model.draft_path=/tmp/q3/draft drafter=dflash algorithm=ddtree algorithm.budget=16,64,256,1024 runtime=inline
    step runs 20 "${runs[@]}" 'budget|block_efficiency|speedup_vs_ar$|tokens_per_s$|memory'
    step gpu_systems_qwen3 130 python benchmarks/gpu_systems.py --arch qwen3 --tables bt
    ;;
trees)  # issue 52's question: what a tree must gain over the chain to pay, by budget, at 8B shapes
    step tree_costs 420 python benchmarks/gpu_systems.py --tables bedapq --sizes 1,16,32,64,128,256,512,1024 \
        --contexts 1024 --max-new-tokens 64
    ;;
baselines)  # the baseline a GPU user runs: generate with a static cache + torch.compile (measure.generate)
    step tests_in_process 170 python -m pytest -q -m gpu -p no:cacheprovider --timeout 120 -rfE --durations=5 \
        --basetemp=/tmp/pt_in_process tests/gpu -k "not cli and not ray and not logs_its_device"
    # six prompts: the fewest whose speedups carry an interval (stats.MIN_UNITS)
    step generate_forms 220 "${cli[@]}" -m measure.generate=compiled,eager dataset.num_prompts=6 model.device=cuda runtime=inline
    step runs 20 "${runs[@]}" 'measure.generate|speedup_vs_ar$|speedup_vs_hf$|tokens_per_s$'
    step figures 170 python benchmarks/gpu_systems.py --tables a --contexts 1024 --max-new-tokens 64
    ;;
fused)  # issue 52, items 3 and 4: layers compiled by inductor in the captured pass, verifiers captured
    # the compiled cases (ids end in True, or true-true) and the captured verifiers
    step tests_compiled 200 python -m pytest -q -m gpu -p no:cacheprovider --timeout 150 -rfE --durations=5 \
        --basetemp=/tmp/pt_compiled tests/gpu/test_capture_cuda.py tests/gpu/test_verify_cuda.py -k "True or captured"
    step cli_compiled 90 "${cli[@]}" model.device=cuda runtime=inline model.compile=true model.capture_verifier=true
    step runs 20 "${runs[@]}" 'model.compile|model.capture_verifier|speedup_vs_ar$|tokens_per_s$'
    # the goals: 16 and 64 nodes at most 1.10x and 1.25x a 1-node pass; autoregressive at most 1.35x the
    # roofline; a captured verifier call at most 50 us (token, block) or 250 us (multi-path, K <= 8)
    step figures 240 python benchmarks/gpu_systems.py --tables bca --sizes 1,16,64 --contexts 1024 \
        --vocabs 128256 --verifiers token,block,gbv,spectr,traversal --max-new-tokens 64
    ;;
ahead)  # issue 66: drafting ahead against the synchronous loop with the draft in an actor of its own and beside
    # the target, the tiny pair on cuda; one GPU: the draft actor shares it (half each), two: a GPU of its own
    gpus=$(python -c "import torch; print(torch.cuda.device_count())")
    share=$( ((gpus >= 2)) && echo 1 || echo 0.5)
    step tests 150 python -m pytest -q -p no:cacheprovider tests/drafting/test_ahead.py tests/runtime/test_draft_channel.py
    step bench 360 python benchmarks/ahead.py --prompts 8 --max-new-tokens 64 --repeats 2 --budgets 4 8 \
        --overrides algorithm=block algorithm.L=4 model.device=cuda cluster=gpu1 "cluster.num_gpus=$((gpus >= 2 ? 2 : 1))" \
        "cluster.draft_gpu=$share"
    ;;
dflash2)  # issue 74: an 8B-shaped Qwen3 target with a DFlash2 drafter in vLLM's layout, read from disk, its block
    # pass captured (model.capture, the default on CUDA) under DDTree and token verification; the selector against
    # the block pass (eager, synchronised)
    step random_pair 120 python tools/random_dflash_pair.py /tmp/q3d2 --device cuda --dflash2
    step decode_captured 300 "${cli[@]}" -m model=qwen3-8b_dflash model.target_path=/tmp/q3d2/target \
        model.draft_path=/tmp/q3d2/draft drafter=dflash2 algorithm=ddtree,token algorithm.budget=64 runtime=inline
    step runs 20 "${runs[@]}" 'algorithm.name|block_efficiency|speedup_vs_ar$|tokens_per_s$|time_draft|syncs'
    step selector 90 python benchmarks/selector.py --draft /tmp/q3d2/draft --target /tmp/q3d2/target --device cuda \
        --dtype bfloat16 --context 1024 --batches 1 8 32
    ;;
adaptive)  # issue 77: algorithm.L=auto against every fixed L and the AR loop, paired, on the device's clock
    # A random Qwen3-8B target and a random 0.6B-shaped Qwen3 draft with its vocabulary: random weights, so
    # these are cost figures (the policy's choice as the costs move with the batch), not acceptance figures
    step tests 120 python -m pytest -q -p no:cacheprovider tests/test_adaptive.py
    step random_pair 90 python tools/random_dflash_pair.py /tmp/q3 --device cuda
    step ar_draft 90 python -c "import shutil, torch, transformers as t; from pathlib import Path
c = t.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True, torch_dtype='bfloat16')
with torch.device('cuda'): m = t.Qwen3ForCausalLM(c).to(torch.bfloat16)
m.save_pretrained('/tmp/q3/ar_draft')
[shutil.copy(f, '/tmp/q3/ar_draft') for f in Path('/tmp/q3/target').iterdir() if 'token' in f.name]"
    step bench 420 python benchmarks/adaptive.py --batch-sizes 1 8 32 --prompts 32 --max-new-tokens 32 \
        --repeats 1 --lengths 1 2 4 8 --overrides algorithm=block model.target_path=/tmp/q3/target \
        model.draft_path=/tmp/q3/ar_draft model.device=cuda model.dtype=bfloat16
    ;;
budgets)  # issue 77: algorithm.budget=auto against fixed DDTree budgets, paired, on the device's clock
    # The random Qwen3-8B target and its random DFlash drafter (cost figures, as above): where on a GPU the
    # target's pass stays flat in the nodes, the policy should move to larger trees than on the CPU
    step tests 120 python -m pytest -q -p no:cacheprovider tests/test_adaptive_budget.py
    step random_pair 90 python tools/random_dflash_pair.py /tmp/q3 --device cuda
    step bench 300 python benchmarks/adaptive.py --budgets 16 64 256 1024 --batch-sizes 1 8 --prompts 16 \
        --max-new-tokens 32 --repeats 1 --overrides model=qwen3-8b_dflash model.target_path=/tmp/q3/target \
        model.draft_path=/tmp/q3/draft drafter=dflash algorithm=ddtree sampling.temperature=0 model.device=cuda \
        model.dtype=bfloat16
    ;;
*)
    echo "unknown group $group: first, profile, tests, cli, bench, qwen3, trees, baselines, fused, ahead, dflash2, adaptive or budgets" && exit 2
    ;;
esac
