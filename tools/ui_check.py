"""Look at the MLflow UI as a researcher would, in headless Chromium, and check what it shows.

    python tools/ui_check.py [--out docs/img] [--port 5077]

Runs a tiny sweep of the shipped pair into a temporary SQLite store, serves it with `mlflow ui`
on a loopback port, opens the experiment's runs table (through the link speculab prints), a
point's run page, its per-prompt table and its acceptance per request, the sweep's parent run (its figure
per request and its table) and the `report/` files
`speculab-report --run PARENT` logged to it in headless Chromium
(Debian's `chromium` and `chromium-driver`; `apt-get install chromium chromium-driver`), saves
a screenshot of each into --out and asserts from the rendered page that the runs table lists
the points with the headline metric columns, that the parent run shows its summary and
holds the sweep's table, and that its `report/` folder holds the paper-layout tables and
plots. Exits non-zero naming the first fact that does not hold.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

import requests
from mlflow.tracking import MlflowClient
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from speculab.results.names import mlflow_name
from speculab.results.profile import PROFILE_ARTIFACT
from speculab.results.requests import REQUESTS_ARTIFACT
from speculab.show.requests import FILE as REQUESTS_FIGURE
from speculab.tracking.spool import HEADLINE_TAG, PARENT_TAG, VERDICT_TAG
from speculab.tracking.ui import VIEW_KEY, VIEW_NAME, run_page, table_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.servers import free_port, serving  # the test suite's helpers

SWEEP = [  # the README's sweep, shorter: which verifier and which draft length?
    "-m",
    "algorithm=gbv,spectr,specinfer",
    "algorithm.L=4,8",
    "runtime=inline",
    "dataset.num_prompts=12",  # the fewest with an interval and a verdict
    "sampling.max_new_tokens=32",
]
WINDOW = (1440, 900)  # a laptop's browser window


EARLIER = ["runtime=inline", "dataset.num_prompts=2", "sampling.max_new_tokens=8"]  # a run outside the sweep


def run_sweep(workdir: Path) -> tuple[str, str]:
    """The tracking URI of a fresh store holding one earlier single run, then one tiny sweep; and the
    runs-table link the sweep printed."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    speculab = [sys.executable, "-m", "speculab.launch.cli", f"tracking.uri={uri}"]
    subprocess.run([*speculab, *EARLIER], cwd=workdir, check=True, capture_output=True, timeout=600)
    command = [*speculab, *SWEEP, f"hydra.sweep.dir={workdir / 'sweep'}"]
    done = subprocess.run(command, cwd=workdir, check=True, capture_output=True, text=True, timeout=900)
    links = [word for word in done.stdout.split() if f"viewStateShareKey={VIEW_KEY}-" in word]
    if not links:
        raise SystemExit(f"ui_check: the sweep printed no runs-table link:\n{done.stdout[-2000:]}")
    return uri, links[-1]


def run_report(uri: str, parent_run_id: str, workdir: Path) -> None:
    """`speculab-report --run PARENT`: tables and plots logged under the parent's `report/`."""
    command = [sys.executable, "-m", "speculab.report", "--run", parent_run_id, "--uri", uri]
    subprocess.run(command, cwd=workdir, check=True, capture_output=True, timeout=600)


def serve(uri: str, port: int, workdir: Path) -> AbstractContextManager:
    """`mlflow ui` over the store on a loopback port, stopped with its workers when the block ends."""
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1"]
    health = f"http://127.0.0.1:{port}/health"
    return serving([*command, "--port", str(port)], lambda: requests.get(health, timeout=10).ok, health, workdir)


def browser() -> WebDriver:
    options = Options()
    flags = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking")
    for flag in (*flags, "--disable-component-update", "--no-first-run", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def page_text(driver: WebDriver, url: str, expect: str, timeout_s: float = 60) -> str:
    """Open ``url`` and wait until the rendered page contains ``expect``; returns the page's text."""
    driver.get(url)
    deadline = time.monotonic() + timeout_s
    while expect not in (text := driver.find_element(By.TAG_NAME, "body").text):
        if time.monotonic() > deadline:
            driver.save_screenshot("ui_check_failure.png")
            raise SystemExit(f"ui_check: {url} never showed {expect!r} (see ui_check_failure.png)")
        time.sleep(0.5)
    time.sleep(1)  # let the grid finish laying out before the screenshot
    return text


def scrolled_to_end(driver: WebDriver) -> str:
    """Scroll every scrollable element to its end, step by step (MLflow renders charts as they come
    into view); the page's text then."""
    for _ in range(30):
        driver.execute_script(
            "document.querySelectorAll('*').forEach(e => {"
            " if (e.scrollHeight > e.clientHeight + 10) e.scrollTop += e.clientHeight; })"
        )
        time.sleep(0.3)
    time.sleep(2)
    return driver.find_element(By.TAG_NAME, "body").text


def unseen(driver: WebDriver, words: list[str], within: str = "body") -> list[str]:
    """The `words` a person does not see without scrolling: no occurrence of the word in the text under
    an element matching `within` has its centre inside the window and on top there (not clipped,
    faded behind "Show more", nor under the Assistant panel or another overlay)."""
    script = (
        "const [word, within] = arguments;"
        "return [...document.querySelectorAll(within)].some(root => {"
        " const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);"
        " for (let node = walker.nextNode(); node; node = walker.nextNode()) {"
        "  const at = node.textContent.indexOf(word); if (at < 0) continue;"
        "  const range = document.createRange(); range.setStart(node, at); range.setEnd(node, at + word.length);"
        "  const r = range.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;"
        "  if (r.height === 0 || x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) continue;"
        "  const top = document.elementFromPoint(x, y);"
        "  if (top !== null && (top === node.parentElement || node.parentElement.contains(top))) return true;"
        " } return false; });"
    )
    return [word for word in words if not driver.execute_script(script, word, within)]


def click_text(driver: WebDriver, text: str, prefix: bool = False) -> None:
    """Click the first visible element whose own text is `text` (or starts with it: `prefix`), a user's click."""
    condition = f"starts-with(normalize-space(text()), '{text}')" if prefix else f"normalize-space(text())='{text}'"
    for element in driver.find_elements(By.XPATH, f"//*[{condition}]"):
        if element.is_displayed():
            element.click()
            return
    driver.save_screenshot("ui_check_failure.png")
    raise SystemExit(f"ui_check: no visible {text!r} to click on {driver.current_url} (see ui_check_failure.png)")


def in_order(text: str, names: list[str]) -> bool:
    """Whether `names` appear in `text` in this order."""
    positions = [text.find(name) for name in names]
    return all(p >= 0 for p in positions) and positions == sorted(positions)


def visible(driver: WebDriver, text: str) -> bool:
    return any(e.is_displayed() for e in driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{text}']"))


def from_the_root(driver: WebDriver, root: str, parent_name: str, shapes: list[str], out: Path) -> None:
    """A new browser at the UI root: the clicks to the sweep's ranked points with their intervals
    (the parent run's page, whose description ranks them), each one a user's."""
    driver.delete_all_cookies()
    driver.get(root)
    driver.execute_script("window.localStorage.clear();")  # MLflow keeps the UI's mode here: a new browser
    page_text(driver, root, "speculab")
    clicks = []
    if visible(driver, "Model training"):  # MLflow 3.17 opens experiments in GenAI mode in a new browser
        click_text(driver, "Model training")
        clicks.append("Model training")
    click_text(driver, "speculab")
    clicks.append("the experiment")
    sweep_row = parent_name[:40]
    page_text(driver, driver.current_url, sweep_row)
    driver.save_screenshot(str(out / "root_experiment.png"))
    click_text(driver, sweep_row, prefix=True)
    clicks.append("the sweep's row")
    text = page_text(driver, driver.current_url, "Ranked by")
    driver.save_screenshot(str(out / "root_parent.png"))
    reached = all(shape in text for shape in shapes) and "[" in text
    check(reached and len(clicks) <= 3, f"the UI root reaches the ranked points in {len(clicks)} clicks: {clicks}")


def close_assistant(driver: WebDriver) -> None:
    """Close MLflow's Assistant panel, as a user's click (MLflow remembers it): the run page then lays out
    its description beside About this run instead of below it."""
    for button in driver.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
        if button.is_displayed():
            button.click()
            time.sleep(1)
            return


def check(fact: bool, what: str) -> None:
    if not fact:
        raise SystemExit(f"ui_check: FAILED: {what}")
    print(f"ui_check: ok: {what}")


def shown_artifact(driver: WebDriver, page: str, name: str, shot: Path) -> str:
    """The artifacts tab of a run's ``page`` with ``name`` opened in it, as a screenshot at ``shot``."""
    text = page_text(driver, page.replace("?", "/artifacts?"), name)
    driver.find_element(By.XPATH, f"//*[normalize-space(text())='{name}']").click()
    time.sleep(3)  # an image loads after its name is clicked
    driver.save_screenshot(str(shot))
    return text


# the named columns' headers (an element whose own text is the name), the table scrolled to bring the last to its
# right edge, as a person scrolls it; then whether each is on screen: the start of its text in the window and on
# top there (a long name's end may be cut with an ellipsis, as MLflow cuts it)
HEADERS = (
    "return arguments[0].map(name => [...document.querySelectorAll('*')].find(e => [...e.childNodes].some("
    " n => n.nodeType === 3 && n.textContent.trim() === name)) || null);"
)
ON_SCREEN = (
    "return arguments[0].every(h => { const r = h.getBoundingClientRect(), x = r.left + 4, y = r.top + r.height / 2;"
    " const top = document.elementFromPoint(x, y);"
    " return r.height > 0 && x < innerWidth && y < innerHeight && top !== null && (top === h || h.contains(top)); });"
)


def per_request(driver: WebDriver, point_page: str, parent_page: str, out: Path) -> None:
    """Issue 75's facts: a point's page and its sweep's parent show the acceptance per request (the figure and
    both means), the point holds its speculation profile and per-request records, and the sweep's table has
    both acceptance lengths as columns."""
    text = shown_artifact(driver, point_page, REQUESTS_FIGURE, out / "point_per_request.png")
    check(
        PROFILE_ARTIFACT in text and REQUESTS_ARTIFACT in text,
        f"a point's artifacts hold its figure per request, {PROFILE_ARTIFACT} and {REQUESTS_ARTIFACT}",
    )
    page_text(driver, point_page, "Description")
    click_text(driver, "Show more")  # the acceptance line follows the sweep's verdicts and the headline
    text = page_text(driver, driver.current_url, "per request")
    check("per step" in text, "a point's description gives the acceptance length both ways (after Show more)")
    shown_artifact(driver, parent_page, REQUESTS_FIGURE, out / "parent_per_request.png")
    driver.find_element(By.XPATH, "//*[normalize-space(text())='sweep_points.json']").click()
    page_text(driver, driver.current_url, "acceptance_length_per_request")
    columns = ["acceptance_length", "acceptance_length_per_request"]
    headers = driver.execute_script(HEADERS, columns)
    if all(headers):
        driver.execute_script("arguments[0].scrollIntoView({block: 'nearest', inline: 'end'});", headers[-1])
        time.sleep(1)
    on_screen = all(headers) and driver.execute_script(ON_SCREEN, headers)
    driver.save_screenshot(str(out / "parent_table_per_request.png"))
    check(on_screen, f"the sweep's table shows the acceptance length per step and per request as columns {columns}")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed check still stops its server and browser
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--port", type=int, default=0, help="loopback port of the MLflow UI (0: a free one)")
    args = parser.parse_args()
    args.port = args.port or free_port()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="speculab_ui_") as tmp:
        workdir = Path(tmp)
        uri, printed_link = run_sweep(workdir)
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("speculab")
        runs = list(client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]))
        earlier, runs = runs[0], runs[1:]  # the single run before the sweep
        parent = next(r for r in runs if r.data.tags["speculab.kind"] == "sweep")
        points = [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
        point = points[0]
        run_report(uri, parent.info.run_id, workdir)
        point_page = run_page(uri, experiment.experiment_id, point.info.run_id, args.port)
        table_page = f"{point_page.split('/#/')[0]}/#/{printed_link.split('/#/')[1]}"  # served on this check's port
        parent_page = point_page.replace(point.info.run_id, parent.info.run_id)
        ranked = sorted(points, key=lambda r: -r.data.metrics[mlflow_name("speedup_vs_ar")])
        with serve(uri, args.port, workdir), browser() as driver:
            shapes = [r.info.run_name.split(" · ")[0] for r in ranked]
            text = page_text(driver, table_page, shapes[0])
            driver.save_screenshot(str(args.out / "runs_table.png"))
            first = table_metrics()[:3]  # speedup_vs_ar and its interval's ends
            words = {p.data.tags.get(VERDICT_TAG, "") for p in points} - {""}
            verdict = sorted(words, key=len)[0] if words else VERDICT_TAG
            hidden = unseen(driver, [shapes[0], VERDICT_TAG, *first], "[role='row']")
            check(
                not hidden and verdict in text,
                f"at {WINDOW[0]}x{WINDOW[1]}, Assistant open, the link shows the top row's name, its verdict column "
                f"({VERDICT_TAG}: {verdict!r}) and the columns {', '.join(first)}, each name whole, without "
                f"scrolling (hidden: {hidden})",
            )
            outside = earlier.info.run_name.split(" · ")[0]
            check(outside not in text, "the link shows the sweep's points, not the run before it")
            check(in_order(text, shapes), f"the link ranks the {len(shapes)} points by speedup_vs_ar, fastest first")
            driver.find_element(By.CSS_SELECTOR, "[data-testid='saved-views-trigger']").click()
            views = page_text(driver, driver.current_url, VIEW_NAME)
            driver.save_screenshot(str(args.out / "saved_views.png"))
            check(VIEW_NAME in views, "the experiment page's Views menu lists speculab's view")
            driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
            check(all(name in text for name in table_metrics()), "the runs table shows the view's metric columns")
            check(all(shape in text for shape in shapes), f"the runs table lists the {len(shapes)} points by name")
            page_text(driver, point_page, HEADLINE_TAG)
            driver.save_screenshot(str(args.out / "point_run.png"))
            standing = point.data.tags.get(VERDICT_TAG, "")
            hidden = unseen(driver, [HEADLINE_TAG, "speedup_vs_ar", VERDICT_TAG, standing])
            check(
                not hidden and bool(standing),
                f"at {WINDOW[0]}x{WINDOW[1]}, MLflow's default panels (the Assistant open), a point's page opens on "
                f"its headline figures and its sweep's verdict on it ({VERDICT_TAG}: {standing!r}; hidden: {hidden})",
            )
            close_assistant(driver)
            page_text(driver, point_page, "Description")
            driver.save_screenshot(str(args.out / "point_run_description.png"))
            hidden = unseen(driver, ["In the sweep", HEADLINE_TAG, VERDICT_TAG])  # the tags beside it
            click_text(driver, "Show more")
            text = page_text(driver, driver.current_url, "verification")
            check(
                "block efficiency" in text, "a point's page describes it with its numbers (its shape after Show more)"
            )
            check(
                not hidden,
                f"at {WINDOW[0]}x{WINDOW[1]}, the Assistant closed, a point's page opens on its sweep's verdicts, its "
                f"headline figure and its verdict tag (hidden: {hidden})",
            )
            page_text(driver, point_page.replace("?", "/model-metrics?"), "baseline_ar")
            driver.save_screenshot(str(args.out / "point_metrics.png"))
            text = scrolled_to_end(driver)
            driver.save_screenshot(str(args.out / "point_metrics_headline.png"))
            spreads = [word for word in ("_se\n", "tokens_per_s_ci_low", "alpha_1_ci_low") if word in text]
            check(
                "speedup_vs_ar_ci_low" in text and not spreads,
                f"a point's Model metrics tab charts figures, not their intervals' ends (found: {spreads})",
            )
            page_text(driver, point_page.replace("?", "/artifacts?"), "records_table.json")
            driver.find_element(By.XPATH, "//*[normalize-space(text())='records_table.json']").click()
            text = page_text(driver, driver.current_url, "HumanEval/")
            driver.save_screenshot(str(args.out / "point_records.png"))
            check("accepted" in text and "stop" in text, "the per-prompt records show as a table")
            per_request(driver, point_page, parent_page, args.out)
            text = page_text(driver, parent_page, "Ranked by speedup_vs_ar")
            driver.save_screenshot(str(args.out / "parent_run.png"))
            verdict = [word for word in ("Fastest:", "No single fastest point", "No verdict") if word in text]
            check(
                verdict != unseen(driver, verdict) and not unseen(driver, ["Ranked by speedup_vs_ar"]),
                f"at {WINDOW[0]}x{WINDOW[1]}, the parent run's verdict and ranking show without scrolling or Show more",
            )
            answer = ("Fastest:" in text and "best/speedup_vs_ar" in text) or "No single fastest point" in text
            check(
                answer and "sweep/points_in_the_running" in text,
                "the parent run names its fastest point, or the points still in the running with the leader",
            )
            text = page_text(driver, parent_page.replace("?", "/artifacts?"), "sweep_table.md")
            check("sweep_points.png" in text and "sweep_table.csv" in text, "the parent run holds the sweep's table")
            driver.find_element(By.XPATH, "//*[normalize-space(text())='sweep_points.png']").click()
            time.sleep(3)
            driver.save_screenshot(str(args.out / "parent_artifacts.png"))
            driver.find_element(By.XPATH, "//*[normalize-space(text())='report']").click()
            text = page_text(driver, driver.current_url, "tables.md")
            check("speedup_vs_L.png" in text, "the parent's report/ folder holds the report's plots")
            driver.find_element(By.XPATH, "//*[normalize-space(text())='speedup_vs_L.png']").click()
            time.sleep(3)
            driver.save_screenshot(str(args.out / "report_artifacts.png"))
            from_the_root(driver, point_page.split("/#/")[0] + "/", parent.info.run_name, shapes, args.out)
    print(f"ui_check: screenshots in {args.out}")


if __name__ == "__main__":
    main()
