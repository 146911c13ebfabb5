"""Several processes opening one new SQLite store at once (`speculab.tracking.store`): its tables are
created once, under a lock beside the file, so every process's run reaches MLflow and the store opens
afterwards; a store busy with another writer is retried, other errors are not."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from speculab.tracking.store import retrying_busy

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from speculab.tracking.spool import SpooledRun
    uri, spool, start_at, name = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    time.sleep(max(0.0, start_at - time.time()))  # every writer's first call at the same moment
    run = SpooledRun(spool, uri, "concurrent", name, {})
    run.log_metrics({"m": 1.0})
    run.end("FINISHED")
    print("online" if run.error is None else f"spooled: {run.error}")
    """
)


@pytest.mark.slow
def test_writers_starting_together_on_a_new_store_all_reach_it(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start_at = time.time() + 12  # after every writer has imported MLflow (2 cores)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, str(tmp_path / f"spool{i}"), str(start_at), f"run{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [w.communicate(timeout=120) for w in writers]
    assert [out.strip() for out, _ in outputs] == ["online"] * 3, [err[-500:] for _, err in outputs]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("concurrent")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["run0", "run1", "run2"]
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_a_busy_store_is_retried_and_other_errors_are_not() -> None:
    calls = []

    def busy_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "written"

    assert retrying_busy(busy_twice, budget_s=5) == "written" and len(calls) == 3
    with pytest.raises(ValueError, match="broken"):
        retrying_busy(lambda: (_ for _ in ()).throw(ValueError("broken")), budget_s=5)
