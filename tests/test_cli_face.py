"""The command's face: `--help` says what speculab does, a misspelt key is answered with the key it
resembles, and neither waits for torch, transformers, Ray or MLflow to import."""

from __future__ import annotations

import subprocess
import sys

from speculab.config import override_errors

HEAVY = ("torch", "transformers", "ray", "mlflow", "speculab.point.experiment", "speculab.tracking.spool")


def speculab_lean(args: list[str]) -> subprocess.CompletedProcess:
    """`speculab args`, then which of HEAVY the process had imported when it exited."""
    script = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('imported:', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n"
        "from speculab.launch.cli import main\n"
        f"sys.argv[1:] = {args!r}\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_help_says_what_the_tool_does_without_importing_what_runs_a_point() -> None:
    done = speculab_lean(["--help"])
    assert done.returncode == 0, done.stderr
    assert "measure speculative decoding" in done.stdout and "powered by Hydra" not in done.stdout
    assert "algorithm: block, ddtree" in done.stdout and "sampling.temperature=0" in done.stdout
    assert "imported: []" in done.stderr


def test_a_misspelt_key_is_refused_with_the_key_it_resembles_before_anything_heavy() -> None:
    done = speculab_lean(["algoritm.K=2", "runtime=inline"])
    assert done.returncode == 2
    assert "algoritm.K: unknown key; did you mean algorithm.K?" in done.stderr and "+algoritm" not in done.stderr
    assert "imported: []" in done.stderr


def test_override_errors_name_the_closest_key_at_the_level_that_is_wrong() -> None:
    groups = ["algorithm", "experiment", "model"]
    assert override_errors(["sampling.temprature=0,1"], groups) == [
        "sampling.temprature: unknown key; did you mean sampling.temperature?"
    ]
    assert override_errors(["experment=ddtree_table1"], groups) == ["experment: unknown key; did you mean experiment?"]
    unrelated = override_errors(["algorithm.zzz=1"], groups)
    assert unrelated[0].startswith("algorithm.zzz: unknown key; algorithm takes name, K, L")


def test_what_hydra_checks_itself_is_left_to_it() -> None:
    valid = ["algorithm=gbv", "algorithm.K=1,2", "experiment=ddtree_table1", "model.name=x", "--multirun"]
    hydras = ["+foo=1", "~sampling.seed", "hydra.run.dir=x", "model@model=tiny-pycode", "sampling.seed.x=1"]
    assert override_errors(valid + hydras, ["algorithm", "experiment", "model"]) == []
