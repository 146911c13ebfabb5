"""What a run calls the model pair it loads, and how its checkpoints are told apart.

A preset (`conf/model/<name>.yaml`) names its own checkpoints; a run that loads other weights under a
preset's name (`model.target_path=/my/target` on the default `model=tiny-pycode`) is named after what
it loaded instead, so its runs, tags, sweep names and reports never file it under the preset: the
checkpoints' directory names (a hub snapshot's repository name), `<target>_<draft>`. A `model.name`
that is no preset's is the user's own name for the pair and is kept. Each checkpoint's digest (of its
config.json and its weights' index, or its safetensors headers: no tensor data) tells two pairs with
the same directory names apart in the params: retrained weights of one architecture share every header,
so the first MiB of each weights file's data goes in too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from omegaconf import OmegaConf

from speculab.config.checkpoints import PROJECT_ROOT, Checkpoint, resolve_path
from speculab.config.model import ModelConfig

PRESETS = PROJECT_ROOT / "conf" / "model"
LOCATORS = ("target_path", "draft_path", "target_id", "draft_id")  # what says which checkpoints a pair loads


def preset_locators(name: str) -> dict[str, str | None] | None:
    """The checkpoints preset `name` loads, as its yaml names them (None: no preset of that name)."""
    path = PRESETS / f"{name}.yaml"
    if not path.is_file():
        return None
    found = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(found, dict)
    return {key: found.get(key) for key in LOCATORS}


def same_place(given: str | None, preset: str | None, key: str) -> bool:
    if given is None or preset is None or not key.endswith("_path"):
        return given == preset
    return resolve_path(given).resolve() == resolve_path(preset).resolve()


def checkpoint_name(checkpoint: Checkpoint, model: ModelConfig) -> str:
    """A checkpoint's name: its hub repository's for a cached snapshot (`model.<role>_id`), else its
    directory's."""
    if checkpoint.key.endswith("_id"):
        hub_id = getattr(model, checkpoint.key.removeprefix("model."))
        return str(hub_id).rsplit("/", 1)[-1]
    return checkpoint.path.resolve().name


def pair_name(model: ModelConfig, target: Checkpoint, draft: Checkpoint) -> str:
    """`model.name` where it is a preset's and the preset's own checkpoints are loaded, or no preset's
    (the user's name for the pair); else `<target>_<draft>` after what was loaded."""
    preset = preset_locators(model.name)
    if preset is None or all(same_place(getattr(model, key), preset[key], key) for key in LOCATORS):
        return model.name
    return f"{checkpoint_name(target, model)}_{checkpoint_name(draft, model)}"


SAMPLE = 2**20  # bytes of each weights file's data a digest reads after its header


def digest(path: Path) -> str:
    """12 hex digits of sha1 over what says what a checkpoint holds, read in milliseconds: config.json,
    its weights index (`*.index.json`), and each safetensors file's header and first MiB of data."""
    sha = hashlib.sha1()
    for name in ["config.json", *sorted(p.name for p in path.glob("*.index.json"))]:
        sha.update((path / name).read_bytes() if (path / name).is_file() else b"")
    for weights in sorted(path.glob("*.safetensors")):
        with weights.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")  # the header's length, then the header, then data
            sha.update(f.read(size + SAMPLE))
    return sha.hexdigest()[:12]
