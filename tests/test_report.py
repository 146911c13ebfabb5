"""`speculab-report`: runs read back through MLflow's client, laid out as the papers' tables.

Fast tests log hand-made point runs into a temporary SQLite store (MLflow's own client, the
metric names speculab logs, written by `results.names.flatten`); the slow one runs a real tiny
sweep and checks every table cell against the runs' metrics and, independently, their per-prompt
histories.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import matplotlib.pyplot as plt
import mlflow
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from speculab.core.measure import UnitTotals
from speculab.report.cli import main
from speculab.report.figures import plot_lines
from speculab.report.points import Method, Point, dimensions, sort_key
from speculab.results.figures import per_prompt_ratio
from speculab.results.names import Figures, flatten
from speculab.results.point import UNITS_ARTIFACT, PointResult, PointShape, PointUnits
from speculab.stats import Estimate
from speculab.tracking.resume import logged_metrics
from speculab.tracking.spool import KIND_TAG, PARENT_TAG, POINT_TAG
from support.cli import small_run, speculab

Prompt = tuple[float, float]  # (kept tokens, sequence-rounds) of one prompt


def log_point(
    client: MlflowClient, experiment: str, parent: str | None, params: dict[str, object], prompts: list[Prompt]
) -> str:
    """A finished point run as speculab logs one: params, final metrics, per-prompt histories and units
    (one prompt each, decoded in 1 / (100 K) seconds a token)."""
    tags = {KIND_TAG: "point", POINT_TAG: str(sorted(params.items()))} | ({PARENT_TAG: parent} if parent else {})
    run = client.create_run(experiment, run_name=str(params), tags=tags).info.run_id
    tokens, rounds = [g for g, _ in prompts], [r for _, r in prompts]
    k = float(params.get("algorithm.K", 1))  # type: ignore[arg-type]
    seconds = tuple(g / (100.0 * k) for g in tokens)
    units = PointUnits(
        tuple((f"p{i}",) for i in range(len(prompts))), UnitTotals(tuple(tokens), seconds, seconds), None, None,
        tuple(tokens), tuple(rounds),
    )  # fmt: skip
    client.log_text(run, units.to_json(), UNITS_ARTIFACT)
    figures = {
        "block_efficiency": per_prompt_ratio(tokens, rounds),
        "accepted_mean": per_prompt_ratio([g - r for g, r in prompts], rounds),
        "tokens_per_s": 100.0 * k,
        "ms_per_token": 10.0 / k,
        "speedup_vs_ar": 1.5 * k,
        "tree_nodes_mean": 1 + 4 * k,
        "kv_peak_mb_target": 2.0 + k,
        "kv_peak_mb_draft": 1.0,
        **{f"share_{phase}": 0.25 for phase in ("draft", "target", "verify", "other")},
    }
    final = flatten(Figures(figures))
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, 0) for key, value in final.items()]
    for step, (g, r) in enumerate(prompts, start=1):
        per_prompt = {"generated_tokens": g, "block_efficiency": g / r, "accepted_mean": g / r - 1}
        metrics += [Metric(f"prompt/{key}", value, now, step) for key, value in per_prompt.items()]
    client.log_batch(run, metrics=metrics, params=[Param(key, str(value)) for key, value in params.items()])
    client.set_terminated(run)
    return run


def shape(K: int, L: int) -> dict[str, object]:
    return {
        "algorithm.name": "gbv",
        "algorithm.K": K,
        "algorithm.L": L,
        "algorithm.budget": 64,
        "algorithm.tree": "best_first",
        "algorithm.node_rule": "kseq",
        "drafter.name": "iid",
        "sampling.temperature": 1.0,
        "model.name": "tiny-pycode",
        "dataset.name": "humaneval",
        "dataset.num_prompts": 3,
        "sampling.top_k": 0,
        "sampling.max_new_tokens": 8,
        "sampling.batch_size": 1,
        "sampling.seed": 0,
    }


PROMPTS: dict[tuple[int, int], list[Prompt]] = {
    (1, 4): [(8, 4), (8, 3), (8, 5)],
    (2, 4): [(8, 3), (8, 2), (8, 4)],
    (1, 8): [(8, 2), (8, 3), (8, 3)],
    (2, 8): [(8, 2), (8, 2), (8, 3)],
}


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[str, str]:
    """(store URI, parent run id) of a GBV K x L sweep of four hand-made points."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("gbv_table1")
    parent = client.create_run(experiment, run_name="sweep +experiment=gbv_table1", tags={KIND_TAG: "sweep"})
    client.log_param(parent.info.run_id, "sweep.overrides", "+experiment=gbv_table1 dataset.num_prompts=3")
    for (K, L), prompts in PROMPTS.items():
        log_point(client, experiment, parent.info.run_id, shape(K, L), prompts)
    client.set_terminated(parent.info.run_id)
    return uri, parent.info.run_id


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


def test_a_sweep_becomes_the_gbv_tables_with_intervals(sweep: tuple[str, str], tmp_path: Path) -> None:
    uri, parent = sweep
    main(["--run", parent, "--uri", uri, "--out", str(tmp_path / "out")])
    table1 = read_csv(tmp_path / "out" / "table1.csv")
    assert [row["L"] for row in table1] == ["4", "8"]
    for row in table1:
        for K in (1, 2):
            prompts = PROMPTS[(K, int(row["L"]))]
            tokens, rounds = [g for g, _ in prompts], [r for _, r in prompts]
            by_hand = sum(tokens) / sum(rounds)  # the ratio of sums, and the ratio estimator's standard error by hand
            n, mean_x = len(tokens), sum(rounds) / len(rounds)
            se = math.sqrt(sum((y - by_hand * x) ** 2 for y, x in zip(tokens, rounds)) / ((n - 1) * n)) / mean_x
            assert float(row[f"K={K}"]) == pytest.approx(by_hand, rel=1e-4)
            assert float(row[f"K={K} se"]) == pytest.approx(se, rel=1e-3) and f"K={K} low" not in row
    table2 = read_csv(tmp_path / "out" / "table2.csv")
    assert [float(table2[0][f"K={K}"]) for K in (1, 2)] == [10.0, 5.0]
    assert "K=1 se" not in table2[0]  # walltime is one whole-run measurement
    tables = (tmp_path / "out" / "tables.md").read_text()
    assert "| Model pair | Dataset | L | K=1 | K=2 |" in tables  # as the paper's Table 1
    # three prompts a point: too few for the verdict rule to separate a best, so nothing is bold
    assert "| tiny-pycode | humaneval | 4 | 2.000 ± 0.289 | 2.667 ± " in tables and "**" not in tables
    assert "| tiny-pycode | humaneval | 4 | 10.000 | 5.000 |" in tables  # walltime
    assert "| 4 | 1 | 2.000 ± 0.289 | 10.000 |" in tables and "| 4 | 2 | 2.667 ± " in tables  # Table 6: per L
    assert "Model pair tiny-pycode, Dataset humaneval, Method GBV, T 1.0, Prompts 3, New tokens 8" in tables
    logged = {a.path for a in MlflowClient(uri).list_artifacts(parent, "report")}
    expected = {"tables.md", "table1.csv", "table2.csv", "table6.csv", "block_efficiency_vs_K.png", "speedup_vs_L.png"}
    assert {f"report/{name}" for name in expected | {"time_split.png", "kv_vs_tree_size.png"}} <= logged


def test_the_best_of_a_row_is_bold_where_the_rule_separates_it(tmp_path: Path) -> None:
    """Twelve prompts a point, K = 2 keeping more tokens a round on every prompt and twice as fast: its
    block efficiency and walltime are set in bold (paired by prompt); a row where the two points are
    equal has none."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("gbv_table1")
    rounds = [4.0, 3.0, 5.0, 4.0, 6.0, 3.0, 4.0, 5.0, 3.0, 6.0, 4.0, 5.0]
    for K, L in ((1, 4), (2, 4), (1, 8), (2, 8)):
        kept = [r * (2.0 + 0.1 * (i % 3)) * (1.3 if (K, L) == (2, 4) else 1.0) for i, r in enumerate(rounds)]
        log_point(client, experiment, None, shape(K, L) | {"dataset.num_prompts": 12}, list(zip(kept, rounds)))
    main(["--experiment", "gbv_table1", "--uri", uri, "--out", str(tmp_path / "out")])
    tables = (tmp_path / "out" / "tables.md").read_text()
    assert "| tiny-pycode | humaneval | 4 | 2.096 [2.041, 2.153] | **2.725 [2.653, 2.799]** |" in tables
    assert "| tiny-pycode | humaneval | 8 | 2.096 [2.041, 2.153] | 2.096 [2.041, 2.153] |" in tables  # equal: none
    assert "| tiny-pycode | humaneval | 8 | 10.000 | **5.000** |" in tables  # twice as fast on every prompt


def test_runs_with_compare_metrics_get_the_paired_comparison(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("paired")
    run = log_point(client, experiment, None, shape(1, 4), PROMPTS[(1, 4)])
    log_point(client, experiment, None, shape(2, 4), PROMPTS[(2, 4)])  # no compare/ metrics: its cells are empty
    compare = {"acceptance_length": Estimate(2.4, se=0.1), "accepted_mean": Estimate(1.4, se=0.05)}
    compare |= {"relative": Estimate(0.9, se=0.02)}
    logged = flatten(Figures({f"compare/{v}/{key}": e for v in ("token", "block") for key, e in compare.items()}))
    for name, value in logged.items():
        client.log_metric(run, name, value)
    main(["--experiment", "paired", "--uri", uri, "--out", str(tmp_path / "out")])
    (row_k1, row_k2) = read_csv(tmp_path / "out" / "paired_comparison.csv")
    for verifier in ("block", "token"):
        assert float(row_k1[f"{verifier} · acceptance length"]) == 2.4
        assert float(row_k1[f"{verifier} · acceptance length se"]) == 0.1
        assert float(row_k1[f"{verifier} · relative"]) == 0.9
        assert row_k2[f"{verifier} · acceptance length"] == ""
    assert "Paired comparison" in (tmp_path / "out" / "tables.md").read_text()
    report_runs = client.search_runs([experiment], f"tags.`{KIND_TAG}` = 'report'")
    assert len(report_runs) == 1 and "Paired comparison" in report_runs[0].data.tags["mlflow.note.content"]


def test_the_ddtree_preset_reports_acceptance_by_depth_beside_what_the_paper_gives(tmp_path: Path) -> None:
    """`--preset ddtree_table1`: alpha_j with its interval, the overlap and the accepted-length
    histogram per point, their plots, and what DDTree shows of them (Fig. 4, no numbers)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("ddtree_table1")
    for budget, alpha in ((16, 0.5), (64, 0.7)):
        params = shape(1, 2) | {"algorithm.name": "ddtree", "algorithm.budget": budget}
        run = log_point(client, experiment, None, params, PROMPTS[(1, 4)])
        accept = {"alpha_1": Estimate(alpha, se=0.05), "alpha_2": 0.4, "overlap_1": 0.45}
        accept |= {"overlap_2": 0.3, "hist_0": 0.5, "hist_1": 0.3, "hist_2": 0.2, "left_chain": 0.1}
        for name, value in flatten(Figures(accept)).items():
            client.log_metric(run, name, value)
    main(["--preset", "ddtree_table1", "--uri", uri, "--out", str(tmp_path / "out"), "--no-log"])
    out = tmp_path / "out"
    alpha = read_csv(out / "acceptance_alpha.csv")
    assert [row["B"] for row in alpha] == ["16", "64"]
    figures = [[float(row[column]) for column in ("α_1", "α_1 se", "α_2")] for row in alpha]
    assert figures == [pytest.approx([0.5, 0.05, 0.4]), pytest.approx([0.7, 0.05, 0.4])]
    assert [row["n=2"] for row in read_csv(out / "accepted_length.csv")] == ["0.2", "0.2"]
    assert read_csv(out / "acceptance_overlap.csv")[0]["ov_1"] == "0.45"
    tables = (out / "tables.md").read_text()
    assert "its Fig. 4 is this histogram" in tables and "DDTree gives no per-position acceptance" in tables
    assert (out / "acceptance_by_depth.png").is_file() and (out / "accepted_length.png").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "nope"], "unknown preset 'nope'; presets (conf/experiment/): bv_table4, ddtree_chain"),
        (
            ["--experiment", "nope"],
            "no MLflow experiment named 'nope' in this store; experiments there: Default, gbv_table1",
        ),
        (["--preset", "bv_table4"], "preset 'bv_table4' writes to experiment 'bv_table4': no MLflow experiment"),
        (["--run", "0123abc"], "no MLflow run '0123abc'"),
    ],
)
def test_bad_input_names_what_was_given_and_what_is_allowed(
    sweep: tuple[str, str], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--uri", sweep[0]])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_point_run_is_not_a_sweep_and_runs_need_their_metrics(
    sweep: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    uri, parent = sweep
    client = MlflowClient(uri)
    child = client.search_runs([client.get_run(parent).info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent}'")[0]
    with pytest.raises(SystemExit):
        main(["--run", child.info.run_id, "--uri", uri])
    assert "has no FINISHED point runs under it; give a sweep's parent run" in capsys.readouterr().err
    bare = client.create_run(client.get_run(parent).info.experiment_id, tags={KIND_TAG: "point", PARENT_TAG: parent})
    client.log_metric(bare.info.run_id, "block_efficiency", 2.0)
    client.set_terminated(bare.info.run_id)
    with pytest.raises(SystemExit):
        main(["--run", parent, "--uri", uri])
    assert (
        f"{bare.info.run_id} ({bare.info.run_name}): no accepted_mean, tokens_per_s, ms_per_token"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("postgress://db/mlflow", "unknown store scheme 'postgress'"),
        ("sqlite://", "an in-memory store holds no runs"),
        ("sqlite:///{tmp}/typo.db", "no store at {tmp}/typo.db"),
        ("http://", "names no server; give http://HOST:PORT"),
        ("http://127.0.0.1:9", "the store did not answer"),  # the discard port: nothing listens
    ],
)
def test_a_store_the_report_cannot_read_is_refused_before_anything_is_made(
    uri: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--run", "0123abc", "--uri", uri.format(tmp=tmp_path), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and message.format(tmp=tmp_path) in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []  # no empty store made at the misspelt path, no output directory


def test_an_output_directory_under_a_file_is_refused(
    sweep: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["--run", sweep[1], "--uri", sweep[0], "--out", str(tmp_path / "taken" / "report")])
    assert exit_.value.code == 2 and f"{tmp_path / 'taken'} is a file" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_sweep_reports_its_runs_metrics(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    sweep = ["-m", "algorithm=gbv", "algorithm.K=1,2", "runtime=inline", "baseline_hf=false", "dataset.num_prompts=3"]
    result = speculab([*sweep, *small_run(random_llama_pair, store)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    uri = f"sqlite:///{store}"
    client = MlflowClient(uri)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["speculab"], output_format="list")
    (parent,) = [r for r in runs if r.data.tags.get(KIND_TAG) == "sweep"]
    main(["--run", parent.info.run_id, "--uri", uri, "--out", str(tmp_path / "out")])
    (row,) = read_csv(tmp_path / "out" / "block_efficiency.csv")
    (walltime,) = read_csv(tmp_path / "out" / "walltime.csv")
    for run in (r for r in runs if r.data.tags.get(KIND_TAG) == "point"):
        K = run.data.params["algorithm.K"]
        assert float(row[f"K={K}"]) == run.data.metrics["block_efficiency"]
        assert float(walltime[f"K={K}"]) == run.data.metrics["ms_per_token"]
        logged = logged_metrics(client, run.info.run_id, run.data.metrics)  # spreads live in figures.json
        assert float(row[f"K={K} se"]) == logged["block_efficiency_se"]
        history = {  # each prompt's figures, logged live: a second way to the same interval
            key: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
            for key in ("prompt/generated_tokens", "prompt/block_efficiency")
        }
        rounds = [g / b for g, b in zip(history["prompt/generated_tokens"], history["prompt/block_efficiency"])]
        again = per_prompt_ratio(history["prompt/generated_tokens"], rounds)
        assert (again.value, again.se) == pytest.approx((float(row[f"K={K}"]), float(row[f"K={K} se"])), rel=1e-3)


def test_error_bars_stop_at_the_metrics_least_value() -> None:
    """Few prompts make a wide spread; block efficiency's bar is cut at 1, not drawn below it."""
    shapes = [PointShape.from_params({"algorithm.name": "gbv", "algorithm.K": str(k)}) for k in (1, 2)]
    points = [Point(str(k), f"K={k}", 0, PointResult(shape, Figures())) for k, shape in zip((1, 2), shapes)]
    figure, axes = plt.subplots()
    at_least_1 = lambda p: (1.0, math.inf)  # noqa: E731
    plot_lines(axes, {"gbv": points}, "K", lambda p: Estimate(1.5 + int(p.run_id), -8.5, 12.5), at_least_1)
    bars = axes.containers[0].lines[2][0]  # the errorbar's vertical segments
    low, high = bars.get_segments()[0][:, 1]  # K=1: value 2.5, interval [-8.5, 12.5]
    plt.close(figure)
    assert (low, high) == (1.0, 12.5)


def test_block_efficiency_s_bars_stay_within_1_and_l_plus_1() -> None:
    """One standard error over few prompts can reach past L + 1 tokens a round, which no round keeps."""
    from speculab.report.figures import tokens_per_round

    shapes = [
        PointShape.from_params({"algorithm.name": "gbv", "algorithm.K": str(k), "algorithm.L": "4"}) for k in (1, 2)
    ]
    points = [Point(str(k), f"K={k}", 0, PointResult(shape, Figures())) for k, shape in zip((1, 2), shapes)]
    figure, axes = plt.subplots()
    plot_lines(axes, {"gbv": points}, "K", lambda p: Estimate(4.8, se=0.5), tokens_per_round)
    low, high = axes.containers[0].lines[2][0].get_segments()[0][:, 1]
    plt.close(figure)
    assert (low, high) == pytest.approx((4.3, 5.0))


def test_a_table_wider_than_the_console_shows_its_values_or_where_it_is() -> None:
    """At 80 columns a table prints whole where it fits, its values alone where only they fit (each
    value whole, the file with the spreads named), and otherwise one line naming the file: never a
    column of cut-off cells."""
    from rich.console import Console
    from rich.table import Table as RichTable

    from speculab.report.layout import Grid
    from speculab.report.render import console_table

    def grid(depths: int, label: str = "SpecTr (K-SEQ)") -> Grid:
        header = ["Method", "L", *(f"α_{j}" for j in range(1, depths + 1))]
        row = [label, depths, *(Estimate(0.8 - j / 100, se=0.031) for j in range(depths))]
        return Grid("acceptance_alpha", "Acceptance by depth", "K 2", header, [row, row], set())

    console = Console(width=80, record=True)
    whole, compact, note = (console_table(grid(n), console, "reports/x/tables.md") for n in (3, 8, 30))
    assert isinstance(whole, RichTable) and isinstance(compact, RichTable) and not isinstance(note, RichTable)
    console.print(whole, compact, note)
    text = console.export_text()
    assert "0.800 ± 0.031" in text and "0.730" in text and "…" not in text  # nothing cut short
    assert all(len(line) <= 80 for line in text.splitlines())
    words = " ".join(text.split())  # captions wrap
    assert "Values only at this width: reports/x/tables.md has each with its spread" in words
    assert "Acceptance by depth: wider than this console (80 columns); it is in reports/x/tables.md." in words


def test_methods_sort_in_the_papers_order_from_their_shapes_not_their_names() -> None:
    def method(algorithm: str, node_rule: str | None = None) -> Method:
        shape = PointShape(algorithm, node_rule, 2, 4, None, None, 1.0, "iid", "humaneval", 4, "tiny", 0, 8, 1, 0)
        (value,) = (
            v for d, v in dimensions(Point("r", "n", 0, PointResult(shape, Figures()))).items() if d == "Method"
        )
        assert isinstance(value, Method) and str(value) == shape.method
        return value

    shuffled = [method("spectr", "global_resolution"), method("gbv"), method("spectr", "nss"), method("token")]
    ordered = [str(m) for m in sorted(shuffled, key=sort_key)]
    assert ordered == [str(method("token")), str(method("gbv")), str(method("spectr", "nss")), str(shuffled[0])]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("text", "is not an SQLite database (file is not a database)"),
        ("fifo", "is not a regular file (a FIFO or a device); refused without opening it"),
        ("directory", "is a directory, not a SQLite database file"),
        ("foreign", "is another application's SQLite database (tables notes; none of MLflow's)"),
    ],
)
def test_a_store_that_is_not_a_database_is_refused_in_one_line(
    kind: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """speculab-report and a run alike (`config.tracking.store_error`): one line, no SQLAlchemy traceback."""
    import os
    import sqlite3

    from speculab.config import TrackingConfig
    from speculab.config.tracking import tracking_errors

    store = tmp_path / "mlflow.db"
    if kind == "text":
        store.write_text("hello, not a database")
    elif kind == "fifo":
        os.mkfifo(store)
    elif kind == "foreign":
        with sqlite3.connect(store) as db:
            db.execute("CREATE TABLE notes (x INTEGER)")
    else:
        store.mkdir()
    uri = f"sqlite:///{store}"
    with pytest.raises(SystemExit) as exit_:
        main(["--experiment", "speculab", "--uri", uri, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and f"{store} {message}" in err, err
    assert [line for line in tracking_errors(TrackingConfig(uri=uri)) if f"{store} {message}" in line]
    assert not (tmp_path / "out").exists()


def test_the_budget_figure_draws_an_auto_budget_as_a_line_beside_the_fixed_ones() -> None:
    """`algorithm.budget=auto` has no place on the budget axis: a dotted line, and the fixed budgets still a
    line of points (an auto point among them would have dropped the whole line)."""
    from speculab.report.figures import tau_vs_budget

    params = {"algorithm.name": "ddtree", "algorithm.tree": "best_first", "algorithm.L": "7"}
    budgets = ("16", "64", "auto")
    shapes = [PointShape.from_params({**params, "algorithm.budget": b}) for b in budgets]
    speed = {"block_efficiency": Estimate(4.0, se=0.1), "speedup_vs_ar": Estimate(1.0, 0.9, 1.1)}
    points = [Point(b, f"B={b}", 0, PointResult(s, Figures(speed))) for b, s in zip(budgets, shapes)]
    assert [dimensions(p)["B"] for p in points] == [16, 64, "auto"]
    figure = tau_vs_budget(points)
    assert figure is not None
    tau_axes = figure.axes[0]
    dotted = [line for line in tau_axes.get_lines() if line.get_linestyle() == ":"]
    plt.close(figure)
    assert len(tau_axes.containers) == 1 and len(dotted) == 1
    assert [text.get_text() for text in tau_axes.texts if text.get_text().startswith("B=auto")]
