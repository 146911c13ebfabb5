#!/usr/bin/env bash
# The checks that await a GPU (docs/verification-on-gpu.md, the issues "Runs on a GPU", "DFlash as
# published", "Verification on the GPU", "GPU speed"), grouped so that each group fits one device
# call of at most 10 minutes. Run from the repository root on the GPU machine, after building the
# packages it lacks here (`bash ../shared/gpu/wheelhouse.sh .gpu --ray --mlflow`) and carrying `.gpu`:
#
#   bash tools/gpu_checks.sh first     # the first GPU call (8 min): tests/gpu, the CLI, the headline figures
#   bash tools/gpu_checks.sh rest      # the GPU tests `first` did not reach; top kernels and host-sync sites
#   bash tools/gpu_checks.sh tests     # make test-gpu: tests/gpu (capture, decode, verifiers, trees)
#   bash tools/gpu_checks.sh cli       # speculab on cuda: inline, Ray, capture off, a refused device
#   bash tools/gpu_checks.sh bench     # benchmarks/gpu_systems.py (8B shapes), verify.py, ddtree.py
#   bash tools/gpu_checks.sh qwen3     # gpu_systems.py --arch qwen3, the random Qwen3-8B + DFlash pair
#
# Each step is bounded by `timeout`; its output goes to $OUT/<group>/<step>.log and one line per
# step (exit status, seconds) to $OUT/<group>/summary.txt, which comes back from the device call.
set -u
group=${1:?usage: gpu_checks.sh first|rest|tests|cli|bench|qwen3}
out=${OUT:-/tmp/gpu_checks}/$group
mkdir -p "$out" /tmp/site
[[ -f .gpu/site.tar.xz && ! -d /tmp/site/ray ]] && tar -xJf .gpu/site.tar.xz -C /tmp/site
# absolute: the CLI tests start `speculab` in a temporary directory
export PYTHONPATH=$PWD/platform:$PWD/tests:/tmp/site MLFLOW_ALLOW_FILE_STORE=true PYTHONUNBUFFERED=1
cli=(python -m speculab.cli tracking.uri=file:/tmp/mlruns dataset.num_prompts=4 sampling.max_new_tokens=32)

step() {  # NAME SECONDS COMMAND...
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}

python -c "import torch, transformers; print(torch.__version__, 'CUDA', torch.version.cuda, 'transformers', \
transformers.__version__, torch.cuda.get_device_name())" | tee "$out/versions.txt"
case $group in
first)
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1
    step tests 300 python -m pytest -q -m gpu tests/gpu -p no:cacheprovider --timeout 100 -rfE --durations=15
    step ddtree_cli 40 "${cli[@]}" model=tiny-pycode_dflash drafter=dflash algorithm=ddtree model.device=cuda runtime=inline
    step refused_device 25 "${cli[@]}" model.device=cuda:7 runtime=inline  # must fail, naming the GPUs
    step runs 15 env MLFLOW_TRACKING_URI=file:/tmp/mlruns python -c "import mlflow; print(mlflow.search_runs(search_all_experiments=True).filter(
        regex='tags.mlflow.runName|syncs|block_efficiency|speedup_vs_ar$|tokens_per_s$').to_string())"
    step figures 120 python benchmarks/gpu_systems.py --tables bca --sizes 1,16,64,256 --contexts 1024 \
        --vocabs 128256 --verifiers token,block,gbv --max-new-tokens 64
    ;;
rest)  # what the first call's time did not reach, then where the time goes
    step tests_rest 220 python -m pytest -q -m gpu tests/gpu/test_paths_cuda.py tests/gpu/test_verify_cuda.py \
        tests/gpu/test_tree_cuda.py tests/gpu/test_decode_cuda.py::test_a_gpu_run_logs_its_device_and_memory_peaks \
        -p no:cacheprovider --timeout 100 -rfE --durations=10
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
bench)
    step gpu_systems 420 python benchmarks/gpu_systems.py
    step verify 90 python benchmarks/verify.py --device cuda
    step ddtree 60 python benchmarks/ddtree.py --skip-e2e --device cuda
    ;;
qwen3)
    step gpu_systems_qwen3 300 python benchmarks/gpu_systems.py --arch qwen3
    step random_pair 120 python tools/random_dflash_pair.py /tmp/q3 --device cuda
    step ddtree_budgets 170 "${cli[@]}" -m model=qwen3-8b_dflash model.target_path=/tmp/q3/target \
        model.draft_path=/tmp/q3/draft drafter=dflash algorithm=ddtree algorithm.budget=16,64,256,1024 runtime=inline
    ;;
*)
    echo "unknown group $group: first, rest, tests, cli, bench or qwen3" && exit 2
    ;;
esac
