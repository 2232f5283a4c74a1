"""The committed study, browsed without re-running it: an MLflow store rebuilt from reports/
(`python -m pipelines.rebuild_mlflow`) opens in a real `mlflow server` in headless Chromium, with the
study's parent run named as a live one, the stage runs, the headline columns, and a correlate run
whose chart has one point per layer of the agreement model (6).

The committed files are copied to a temporary root first, so the store's artifacts (root/mlruns)
stay out of the checkout. Skipped where Playwright or Chromium is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import pytest

from attnflow import tracking
from attnflow.tracking import rebuild
from tests.integration.test_html_browser import CHROMIUM
from tests.integration.test_mlflow_browser import WAIT_MS, _points_per_trace, _shot
from tests.integration.test_mlflow_server import running_mlflow_server

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (the browser is /usr/bin/chromium)"
)
pytestmark = [
    pytest.mark.slow,  # a rebuild, a server start and a browser: about a minute
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)"),
]
ROOT = Path(__file__).resolve().parents[2]
AGREEMENT_LAYERS = 6  # the committed study's agreement model (params.yaml task.agreement.model.n_layer)


def _committed_copy(root: Path) -> Path:
    """What a clone holds of the study: params.yaml, dvc.yaml, dvc.lock, the stage scripts, reports/."""
    for name in ("params.yaml", "dvc.yaml", "dvc.lock"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "reports", root / "reports")
    return root


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """(server URL, experiment id, the rebuild's record) of the committed study's rebuilt store."""
    from pipelines import _config

    root = _committed_copy(tmp_path_factory.mktemp("rebuilt"))
    config = rebuild.read_config(root / "params.yaml")
    made = rebuild.rebuild_store(
        root, f"sqlite:///{root / 'server.db'}", choices=_config.group_choices(config)
    )
    with running_mlflow_server(root) as (url, _):  # it serves root/server.db
        yield url, made


@pytest.fixture(scope="module")
def page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1400, "height": 900})
        tab.set_default_timeout(WAIT_MS)
        yield tab
        browser.close()


def test_the_rebuilt_study_opens_on_its_runs_table_with_the_parent_and_the_stage_runs(rebuilt, page):
    url, made = rebuilt
    page.goto(tracking.ui_url(url, made.experiment_id))
    page.get_by_text("seed=0 paper authors ", exact=False).first.wait_for()
    assert "/runs" in page.url and "Traces 0" not in page.content()
    runs = mlflow.MlflowClient(url).search_runs([made.experiment_id], max_results=100)
    assert {r.info.run_name for r in runs} >= {"correlate@agreement", "correlate@sst2", "report"}
    _shot(page, "rebuilt-runs-table")


def test_the_rebuilt_headline_view_shows_the_accuracies(rebuilt, page):
    url, made = rebuilt
    page.goto(tracking.ui_url(url, made.experiment_id, view=tracking.HEADLINE_VIEW))
    page.get_by_text("seed=0 paper authors ", exact=False).first.wait_for()
    for header in ("agreement/accuracy", "protocol"):  # (columns past the window's width are not drawn)
        page.get_by_text(header, exact=True).first.wait_for()
    parent = mlflow.MlflowClient(url).get_run(made.parent_id)
    assert {"agreement/accuracy", "sst2/accuracy"} <= set(parent.data.metrics)


def test_a_rebuilt_correlate_run_charts_one_point_per_layer(rebuilt, page):
    url, made = rebuilt
    run_id = made.runs["correlate@agreement"]
    page.goto(tracking.ui_url(url, made.experiment_id, run_id).replace("?", "/model-metrics?"))
    page.get_by_placeholder("Search metric charts").fill("corr/blank_out/")
    page.locator("g.trace.scatter path.point").first.wait_for()
    page.wait_for_timeout(1000)
    counts = [n for n in _points_per_trace(page) if n]
    assert counts and set(counts) == {AGREEMENT_LAYERS}, counts
