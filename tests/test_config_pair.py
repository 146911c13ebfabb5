"""A pair is named after what it loads (`speculab.config.pair`): a preset's name only with the preset's
own checkpoints, the user's `model.name` where it is no preset's, else its checkpoints' directories; and
a digest of each checkpoint that tells retrained weights apart."""

from __future__ import annotations

import shutil
from pathlib import Path

from speculab.config import PROJECT_ROOT, resolve
from speculab.config.pair import digest
from support.configs import load
from support.models import TINY_PAIR

RUN = ["runtime=inline"]


def copies(tmp_path: Path) -> list[str]:
    target = shutil.copytree(TINY_PAIR / "target", tmp_path / "my-target")
    draft = shutil.copytree(TINY_PAIR / "draft", tmp_path / "my-draft")
    return [f"model.target_path={target}", f"model.draft_path={draft}"]


def test_the_preset_keeps_its_name_with_its_own_checkpoints_however_they_are_spelt() -> None:
    plan = resolve(load(RUN))
    assert plan.cfg.model.name == "tiny-pycode" and plan.preset_name == ""
    spelt = [f"model.target_path={PROJECT_ROOT / 'assets/tiny-pycode/target'}"]  # absolute, the same directory
    assert resolve(load([*RUN, *spelt])).cfg.model.name == "tiny-pycode"


def test_other_checkpoints_under_a_presets_name_are_named_after_their_directories(tmp_path: Path) -> None:
    plan = resolve(load([*RUN, *copies(tmp_path)]))
    assert plan.cfg.model.name == "my-target_my-draft" and plan.preset_name == "tiny-pycode"
    assert plan.target_dir == tmp_path / "my-target"


def test_a_name_of_the_users_own_is_kept(tmp_path: Path) -> None:
    plan = resolve(load([*RUN, *copies(tmp_path), "model.name=my-pair"]))
    assert plan.cfg.model.name == "my-pair" and plan.preset_name == ""


def test_the_digest_tells_retrained_weights_apart(tmp_path: Path) -> None:
    same = shutil.copytree(TINY_PAIR / "target", tmp_path / "same")
    assert digest(same) == digest(TINY_PAIR / "target") != digest(TINY_PAIR / "draft")
    weights = next(same.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header] ^= 0xFF  # one byte of the first tensor's data
    weights.write_bytes(bytes(data))
    assert digest(same) != digest(TINY_PAIR / "target")
