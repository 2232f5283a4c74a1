"""The MLflow UI as a researcher sees it, in headless Chromium (Playwright): a real `mlflow server` on
a local port, a tiny 3-seed study (agreement only, every task stage) logged into it, then

- the link :func:`attnflow.tracking.ui_url` builds opens the runs table, not GenAI,
  and it lists one parent run per seed, and a ``protocol=final_notebook`` run told apart from the
  seed runs by its name (and its ``protocol`` tag);
- a correlate run's chart of ``corr/blank_out/flow`` has one point per layer;
- the compare view of the three parents overlays three curves, one point per layer each;
- the registered model ``attnflow-agreement`` loads through ``models:/…/latest`` and predicts.

With ``ATTNFLOW_SCREENSHOTS=<folder>`` it also saves the screenshots committed under
``docs/img/mlflow/``. Skipped where Playwright or Chromium is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import mlflow
import numpy as np
import pytest

from attnflow import tracking
from tests.integration.test_html_browser import CHROMIUM
from tests.integration.test_mlflow_server import running_mlflow_server

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (the browser is /usr/bin/chromium)"
)
pytestmark = [
    pytest.mark.slow,  # a server start and three tiny studies: about 1-2 minutes
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)"),
]
SEEDS = (0, 1, 2)
N_LAYER = 2
WAIT_MS = 60_000  # the UI's first load of a page (a cold server answers slowly)


# A fourth study: seed 0 again under the other protocol, which must not look like a seed run.
PROTOCOL_RUN = (0, "final_notebook")


def _tiny_study(root: Path, seed: int, protocol: str | None = None):
    from attnflow.data import download
    from pipelines import _config, compose
    from pipelines import study as study_entry
    from tests.e2e.test_study_e2e import _write_mirror

    mirror = root / "mirror"
    if not mirror.exists():
        _write_mirror(mirror)
    download.known_digests = dict  # fixture files: digests recorded, not checked (restored below)
    job = root / (f"seed{seed}" + (f"-{protocol}" if protocol else ""))
    job.mkdir()
    os.chdir(job)
    overrides = [
        f"seed={seed}", "tasks=[agreement]", f"data.mirrors=[{mirror}]", "task.agreement.data.urls=[]",
        f"task.agreement.model.n_layer={N_LAYER}", "task.agreement.model.n_head=2", "task.agreement.model.n_embd=16",
        "task.agreement.train.max_epochs=1", "task.agreement.train.batch_size=16", "trainer.progress_bar=false",
        "task.agreement.capture.n_samples=6", "correlate.n_boot=5",
    ] + ([f"protocol={protocol}"] if protocol else [])  # fmt: skip
    compose.run(overrides, path=job / "params.yaml")
    study_entry.run(_config.load(job / "params.yaml"))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The server's URL and experiment id after three seeds of the tiny study were logged to it."""
    from attnflow.data import download

    root = tmp_path_factory.mktemp("mlflow-browser")
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", *tracking.HTTP_DEFAULTS)}
    cwd, digests = os.getcwd(), download.known_digests
    with running_mlflow_server(root) as (url, _):
        os.environ["MLFLOW_TRACKING_URI"] = url
        try:
            for seed in SEEDS:
                _tiny_study(root, seed)
            _tiny_study(root, *PROTOCOL_RUN)
            mlflow.set_tracking_uri(url)
            experiment = mlflow.MlflowClient().get_experiment_by_name("abnar2020")
            yield url, experiment.experiment_id
        finally:
            os.chdir(cwd)
            download.known_digests = digests
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="module")
def page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1400, "height": 900})
        tab.set_default_timeout(WAIT_MS)
        yield tab
        browser.close()


def _shot(page, name: str) -> None:
    folder = os.environ.get("ATTNFLOW_SCREENSHOTS")
    if folder:
        for close in page.get_by_label("Close", exact=False).all():  # the Assistant side panel
            if close.is_visible():
                close.click()
        page.wait_for_timeout(1000)
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def _points_per_trace(page) -> list[int]:
    """Markers per curve of every plotly chart on the page."""
    return page.eval_on_selector_all(
        "g.trace.scatter", "ts => ts.map(t => t.querySelectorAll('path.point').length)"
    )


def test_the_printed_link_opens_the_runs_table_with_one_parent_per_seed(study, page):
    url, experiment_id = study
    page.goto(tracking.ui_url(url, experiment_id))
    # the table cuts names at ~22 characters: seed and protocol come first in them
    for seed in SEEDS:
        page.get_by_text(f"seed={seed} paper authors ", exact=False).first.wait_for()
    seed, protocol = PROTOCOL_RUN
    page.get_by_text(f"seed={seed} {protocol} authors ", exact=False).first.wait_for()
    assert "/runs" in page.url and "/overview" not in page.url and "Traces 0" not in page.content()
    _shot(page, "runs-table")


def test_the_headline_link_shows_the_choices_and_the_headline_metrics_as_columns(study, page):
    # the default runs table shows no metric column; the headline view (a view stored on the
    # experiment) shows seed, protocol, recipe, accuracy and the last-layer correlations
    url, experiment_id = study
    page.goto(tracking.ui_url(url, experiment_id, view=tracking.HEADLINE_VIEW))
    page.get_by_text("seed=0 final_notebook", exact=False).first.wait_for()
    for header in ("agreement/accuracy", "protocol", "recipe"):
        page.get_by_text(header, exact=True).first.wait_for()
    page.get_by_text("final_notebook", exact=True).first.wait_for()  # the protocol tag's cell
    assert "share key" not in page.content()  # the stored view loaded


def test_a_protocol_run_is_told_from_a_seed_run_by_its_tags(study):
    url, experiment_id = study
    client = mlflow.MlflowClient(url)
    parents = client.search_runs([experiment_id], f"tags.`{tracking.PARENT_TAG}` = 'true'")
    by_protocol = {}
    for run in parents:
        by_protocol.setdefault(run.data.tags["protocol"], []).append(run.data.tags["seed"])
    assert sorted(by_protocol["paper"]) == [str(s) for s in SEEDS]
    assert by_protocol["final_notebook"] == [str(PROTOCOL_RUN[0])]
    names = [run.data.tags["mlflow.runName"] for run in parents]
    assert len(set(names)) == len(names) == len(SEEDS) + 1


def test_a_correlate_run_charts_one_point_per_layer(study, page):
    url, experiment_id = study
    client = mlflow.MlflowClient(url)
    run = client.search_runs([experiment_id], "tags.stage = 'correlate'", max_results=1)[0]
    page.goto(tracking.ui_url(url, experiment_id, run.info.run_id).replace("?", "/model-metrics?"))
    page.get_by_placeholder("Search metric charts").fill("corr/blank_out/")
    page.locator("g.trace.scatter path.point").first.wait_for()
    page.wait_for_timeout(1000)
    counts = [n for n in _points_per_trace(page) if n]  # (plotly adds empty helper traces)
    assert len(counts) >= 5 and set(counts) == {N_LAYER}, counts  # one chart per method
    history = client.get_metric_history(run.info.run_id, "corr/blank_out/flow")
    assert [m.step for m in history] == list(range(1, N_LAYER + 1))
    _shot(page, "per-layer-chart")


def test_the_compare_view_overlays_the_seeds_per_layer(study, page):
    url, experiment_id = study
    page.goto(tracking.ui_url(url, experiment_id) + "&compareRunsMode=CHART")
    page.get_by_placeholder("Search metric charts").fill("agreement/corr/blank_out/flow")
    page.locator("g.trace.scatter path.point").first.wait_for()
    page.wait_for_timeout(1500)
    counts = [n for n in _points_per_trace(page) if n]
    assert counts.count(N_LAYER) == len(SEEDS) + 1, counts  # one curve per parent run: 3 seeds, 1 protocol
    _shot(page, "compare-seeds")


def test_the_registered_model_loads_and_predicts(study):
    url, _ = study
    mlflow.set_tracking_uri(url)
    model = mlflow.pyfunc.load_model("models:/attnflow-agreement/latest")
    ids = np.array([[2, 5, 6, 0], [2, 6, 5, 7]], dtype=np.int64)
    logits = model.predict(ids)
    assert logits.shape == (2, 2) and np.isfinite(logits).all()
    versions = mlflow.MlflowClient(url).search_model_versions("name = 'attnflow-agreement'")
    assert len(versions) == len(SEEDS) + 1  # one version per training run
    tagged = sorted((v.tags["protocol"], v.tags["seed"]) for v in versions)
    assert tagged == sorted([("paper", str(s)) for s in SEEDS] + [(PROTOCOL_RUN[1], str(PROTOCOL_RUN[0]))])
    assert all(
        v.tags.get("config_hash") and v.description.startswith("agreement classifier, seed ")
        for v in versions
    )
