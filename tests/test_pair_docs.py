"""docs/models.md's "bring your own pair" command, run as written (its /tmp/pairs in a directory of
this test's): a pair copied out of the preset's place is named after its own directories everywhere a
run shows its name, with the directories and digests of what it loaded in its params."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from speculab.config import PROJECT_ROOT
from support.cli import runs

NAME = "my-target_my-draft"


def doc_commands() -> str:
    text = (PROJECT_ROOT / "docs" / "models.md").read_text()
    return re.search(r"## The command.*?```bash\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_pair_of_your_own_is_filed_under_its_own_name(tmp_path: Path) -> None:
    script = doc_commands().replace("/tmp/pairs", str(tmp_path / "pairs"))
    script = script.replace(".venv/bin/", f"{PROJECT_ROOT}/.venv/bin/").replace("assets/", f"{PROJECT_ROOT}/assets/")
    store = tmp_path / "mlflow.db"
    script = script.replace("sampling.max_new_tokens=8", f"sampling.max_new_tokens=8 tracking.uri=sqlite:///{store}")
    result = subprocess.run(["bash", "-ec", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"not preset tiny-pycode's: filed as {NAME}" in result.stdout
    (run,) = runs(store)
    assert run.info.run_name.endswith(f"· {NAME}") and run.data.tags["model"] == NAME
    assert run.data.params["model.name"] == NAME and run.data.params["model.target_dir"] == str(
        tmp_path / "pairs" / "my-target"
    )
    digests = run.data.params["model.target_digest"], run.data.params["model.draft_digest"]
    assert len(digests[0]) == 12 and digests[0] != digests[1]
    assert "tiny-pycode" not in run.data.tags["mlflow.note.content"]
