"""A Llama or Qwen3 checkpoint read without transformers' classes (`models.checkpoint_lm`) decodes exactly as
the model transformers loads: the same logits bit for bit through `TreeLM` (prefill, a draft tree, a commit,
the features a DFlash drafter reads), the same `generate` tokens through the twin built around its tensors,
and every other checkpoint is left to transformers. The smallest run imports none of transformers' model
code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speculab.core.engine import DecodeSettings
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.models import LMSpec, TreeTarget
from speculab.models.checkpoint_lm import CheckpointLM, checkpoint_lm, transformers_twin
from speculab.models.hf import TreeLM, load_causal_lm
from support.models import TINY_PAIR, save_random_lm, save_random_opt

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["tiny", "llama", "qwen3"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped tiny target (tied head, float16 on disk), a random Llama and a random Qwen3 (q/k norms)."""
    if request.param == "tiny":
        return TINY_PAIR / "target"
    return save_random_lm(tmp_path_factory.mktemp(request.param) / "lm", 3, 64, seed=5, arch=request.param)


def tree(root: int, rows: int = 2) -> DraftTree:
    """A root with two children, the first with a child: 4 nodes under each row's context."""
    tokens = torch.tensor([[root, 5, 9, 7]]).expand(rows, 4)
    parents, depth = torch.tensor([[-1, 0, 0, 1]]).expand(rows, 4), torch.tensor([[0, 1, 1, 2]]).expand(rows, 4)
    return DraftTree(tokens, parents, depth, torch.ones(rows, 4, dtype=torch.bool))


@torch.inference_mode()
def test_a_checkpoint_read_without_transformers_classes_decodes_as_transformers_model(checkpoint: Path) -> None:
    """Bit for bit against transformers' model over the same tensors (the twin); against the model transformers
    loads itself, to float32 rounding: a CPU matmul over a strided input may round differently by where
    its weight lies in memory, so two loads of one checkpoint agree to rounding, not bits."""
    read = checkpoint_lm(checkpoint)
    assert isinstance(read, CheckpointLM)
    twin, loaded = transformers_twin(read), load_causal_lm(checkpoint)
    assert type(twin).__name__ == type(loaded).__name__
    assert {k: v.dtype for k, v in twin.state_dict().items()} == {k: v.dtype for k, v in loaded.state_dict().items()}
    lms = [TreeLM(model, feature_layers=(0, 1)) for model in (read, twin, loaded)]
    assert all(lm.lean is not None and lm.decoder is not None for lm in lms)  # every layer lean
    contexts, keep = [[3, 4, 5, 6, 7], [8, 9]], torch.tensor([[0, 1, 3], [0, 2, -1]])
    outputs: list[list[torch.Tensor]] = []
    for lm in lms:
        lm.reset(2, 64)
        fed, scored = lm.feed(contexts), lm.extend(tree(11))
        lm.commit(keep)
        assert lm.features is not None
        outputs.append([fed, scored, lm.features, lm.feed([[12], [13]])])
    mine, same_tensors, own_load = outputs
    assert all(torch.equal(a, b) for a, b in zip(mine, same_tensors))
    for a, b in zip(mine, own_load):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    assert torch.equal(mine[1].argmax(-1), own_load[1].argmax(-1))


def test_generate_runs_on_transformers_model_around_the_same_tensors() -> None:
    """`baseline_hf` on a target read from its checkpoint: transformers' `generate`, the same tokens as on
    the model transformers loads, with no copy of the weights."""
    read = TreeTarget(LMSpec("hf", str(TINY_PAIR / "target")))
    loaded = TreeTarget(LMSpec("hf", str(TINY_PAIR / "target"), model=load_causal_lm(TINY_PAIR / "target")))
    settings = DecodeSettings(1, 4, SamplingParams(0.0), 12, 2, 0, None)
    prompts = [[3, 4, 5, 6], [7, 8]]
    mine, theirs = read.hf_generate(prompts, settings), loaded.hf_generate(prompts, settings)
    assert mine.tokens == theirs.tokens and len(mine.tokens[0]) == 12
    assert isinstance(read.lm.loaded, CheckpointLM)
    assert read.lm.model.lm_head.weight.data_ptr() == read.lm.loaded.lm_head.weight.data_ptr()


def test_other_checkpoints_are_left_to_transformers(tmp_path: Path) -> None:
    opt = save_random_opt(tmp_path / "opt", 2, 32)
    assert checkpoint_lm(opt) is None
    assert TreeTarget(LMSpec("hf", str(opt))).lm.loaded.__class__.__name__ == "OPTForCausalLM"
    moe = save_random_lm(tmp_path / "moe", 2, 32, arch="qwen3_moe")
    assert checkpoint_lm(moe) is None


def test_a_checkpoint_with_a_tensor_it_does_not_know_is_left_to_transformers_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older Llama checkpoints keep each layer's rotary `inv_freq`: the headers show the extra tensor, so no
    tensor is read before transformers loads the checkpoint (which drops it)."""
    from safetensors.torch import load_file, save_file

    import speculab.models.checkpoint_lm as module

    llama = save_random_lm(tmp_path / "llama", 2, 32, seed=3, arch="llama")
    tensors = load_file(llama / "model.safetensors")
    save_file(tensors | {"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)}, llama / "model.safetensors")
    monkeypatch.setattr(module, "load_file", lambda *_, **__: pytest.fail("a tensor read before the headers ruled"))
    assert checkpoint_lm(llama) is None
    monkeypatch.undo()
    save_file(tensors, llama / "model.safetensors")
    assert isinstance(checkpoint_lm(llama), CheckpointLM)


def test_the_smallest_run_imports_none_of_transformers_model_code(tmp_path: Path) -> None:
    """What made its start slow (`benchmarks/startup.py`): transformers' modeling_utils, which imports torch's
    dynamo (and SciPy, and the distributed tensors that transformers' config classes import anyway)."""
    smallest = "runtime=inline tracking=none dataset.num_prompts=1 baseline=false baseline_hf=false"
    probe = (  # the run's exit code, passed on once the modules it imported are listed
        "import sys, runpy; sys.argv = ['speculab', *sys.argv[1:]]\n"
        "code = 0\n"
        "try:\n    runpy.run_module('speculab.launch.cli', run_name='__main__')\n"
        "except SystemExit as ended:\n    code = ended.code\n"
        "heavy = [m for m in ('transformers.modeling_utils', 'torch._dynamo', 'scipy.optimize') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *smallest.split(), "sampling.max_new_tokens=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{REPO / 'platform'}:{REPO / 'tests'}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=240,
    )
    assert done.returncode == 0 and "HEAVY []" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
