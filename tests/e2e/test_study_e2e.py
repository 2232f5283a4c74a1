"""Every stage of the study on tiny data and tiny models, in a temporary folder, on the CPU."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnflow.attribution.comparators import DECOMPOSITION
from attnflow.io import load_ragged
from attnflow.methods import study_methods
from attnflow.metrics.tables import COLUMNS
from attnflow.paths import StudyPaths
from pipelines import _config, compose
from pipelines import study as study_entry
from tests._tiny import make_tiny_bert

PATHS = _config.compose().paths  # the study's layout (conf/paths)
WORDS = ["the", "dog", "dogs", "cat", "cats", "near", "of", "big", "NN", "NNS"]

STUDY_METHODS = [r.name for r in study_methods()]


def _write_mirror(root: Path) -> Path:
    """Tiny files in the ../shared/data layout: singular subjects -> VBZ, plural -> VBP."""
    rng = random.Random(0)
    folder = root / "linzen2016" / "rnn_agr_simple"
    folder.mkdir(parents=True)
    for name, k, n in (("numpred.val", None, 60), *((f"numpred.test.{k}", k, 12) for k in range(1, 6))):
        lines = []
        for i in range(n):
            plural = i % 2 == 1
            subject = "dogs" if plural else "dog"
            attractor = f" near the {'cat' if plural else 'cats'}" if k else ""
            lines.append(
                f"{'VBP' if plural else 'VBZ'}\tthe {rng.choice(['big', 'NN'])} {subject}{attractor} {i}\n"
            )
        (folder / name).write_text("".join(lines))
    wiki = root / "linzen2016" / "edinburgh_nlu_wiki"  # the natural-distribution sample, same grammar
    wiki.mkdir(parents=True)
    for name, n in (("train", 60), ("dev", 12), ("test", 24)):
        rows = []
        for i in range(n):
            plural = (i + len(name)) % 2 == 1
            words = [
                "the",
                rng.choice(["big", "NN"]),
                "dogs" if plural else "dog",
                name,
                str(i),
                "bark" if plural else "barks",
                ".",
            ]
            rows.append(f"{' '.join(words)}\t2\t5\t{'VBP' if plural else 'VBZ'}\t{words[5]}\tx\n")
        (wiki / f"wiki-{name}.txt").write_text(
            "sentence\tsubj_idx\tverb_idx\tverb_pos\tverb\tinflected_verb\n" + "".join(rows)
        )
    glue = root / "sst2" / "glue_SST-2"
    glue.mkdir(parents=True)
    good, bad = ["good", "great", "fine"], ["bad", "awful", "dull"]

    def rows(n: int) -> str:
        return "".join(
            f"a {rng.choice(good if i % 2 else bad)} film {rng.choice(WORDS)} \t{i % 2}\n" for i in range(n)
        )

    (glue / "train.tsv").write_text("sentence\tlabel\n" + rows(48))
    (glue / "dev.tsv").write_text("sentence\tlabel\n" + rows(12))
    (glue / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i}\ta fine film\n" for i in range(4)))
    return root


@pytest.fixture()
def tiny_study(tmp_path, monkeypatch):
    mirror = _write_mirror(tmp_path / "mirror")
    bert = make_tiny_bert(
        tmp_path / "tiny-bert",
        words=["a", "film", "good", "great", "fine", "bad", "awful", "dull", *(w.lower() for w in WORDS)],
    )
    from attnflow.data import download

    monkeypatch.setattr(download, "known_digests", dict)  # fixture files: digests recorded, not checked
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    overrides = [
        f"data.mirrors=[{mirror}]",
        "task.agreement.data.urls=[]",
        "task.sst2.data.urls=[]",
        "task.agreement.model.n_layer=2",
        "task.agreement.model.n_head=2",
        "task.agreement.model.n_embd=16",
        f"task.sst2.model.pretrained={bert}",
        "task.agreement.train.max_epochs=2",
        "task.agreement.train.teacher=lstm",  # online distillation from a tiny LSTM teacher
        "task.agreement.model.teacher.embedding_dim=8",
        "task.agreement.model.teacher.hidden_size=8",
        "task.agreement.train.batch_size=16",
        "task.sst2.train.max_epochs=1",
        "task.sst2.train.batch_size=8",
        "task.sst2.train.train_subset=null",
        "task.sst2.train.val_size=8",
        "trainer.progress_bar=false",
        "task.agreement.capture.n_samples=6",
        "task.sst2.capture.n_samples=12",
        "correlate.n_boot=20",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    compose.run(overrides, path=tmp_path / "params.yaml")
    return tmp_path, _config.load(tmp_path / "params.yaml")


def test_every_stage_runs_and_writes_its_outputs(tiny_study):
    root, cfg = tiny_study
    paths = StudyPaths.from_config(cfg.paths, root=root)
    study_entry.run(cfg)
    from pipelines import report

    report.run(cfg)

    for task, n in (("agreement", 6), ("sst2", 12)):
        samples = pd.read_parquet(paths.samples(task))
        assert len(samples) == n
        attn = load_ragged(paths.attentions(task))["attn"]
        layers, heads = (2, 2)
        for a, length in zip(attn, samples["length"], strict=True):
            assert a.shape == (layers, heads, length, length)
            np.testing.assert_allclose(a.astype(np.float64).sum(-1), 1.0, atol=2e-3)
        maps = load_ragged(paths.maps(task))
        for method in STUDY_METHODS:  # every record the explain stage runs (attnflow.methods)
            assert [m.shape for m in maps[method]] == [(layers, t) for t in samples["length"]]
        relevance = load_ragged(paths.relevance(task))
        assert [a.shape for a in relevance["attn_grad"]] == [a.shape for a in attn]
        importance = load_ragged(paths.importance(task))
        assert [len(v) for v in importance["blank_out"]] == samples["length"].tolist()
        assert all(
            v[-1] == 0 for v in importance["blank_out"]
        )  # the end marker (<eos>, [SEP]) is never blanked
        if task == "agreement":  # the authors' input: <cls> prefix <eos>; a seeded choice of n test items
            assert all(t[0] == "<cls>" and t[-1] == "<eos>" for t in samples["tokens"])
            assert samples["sample_id"].nunique() == n
        switched = load_ragged(paths.switched_importance(task))
        assert set(switched) == {"blank_positions=skip_cls", "blank_token=pad", "mask_blank=true"}
        assert all(v[0] == 0 for v in switched["blank_positions=skip_cls"])  # CLS not blanked there
        table = pd.read_parquet(paths.correlations(task))
        assert list(table.columns) == list(COLUMNS)
        main = table[(table["variant"] == "configured") & table["head"].isna()]
        assert set(main["importance"]) == {"blank_out", "input_gradients"}
        assert list(dict.fromkeys(main["method"])) == STUDY_METHODS
        assert sorted(main["layer"].unique()) == [1, 2]
        heads = table[table["head"].notna()]
        per_head = main[main["method"].isin(["raw", "rollout", "flow"])]  # the methods with per-head maps
        assert sorted(heads["head"].unique()) == [0, 1] and len(heads) == 2 * len(per_head)
        variants = table[table["variant"] != "configured"]
        assert {
            "correlate.spearman=average",
            "correlate.include_cls.blank_out=false",
            "attribution.blank_positions=skip_cls",
            "attribution.blank_token=pad",
            "attribution.mask_blank=true",
        } <= set(variants["variant"])
        # Flipping the undefined rule changes nothing where no correlation is undefined: the same
        # means as the configured cells (here the configured zero rule, re-scored without bootstrap).
        flipped = variants[variants["variant"] == "correlate.undefined=nan"].set_index(
            ["importance", "method", "layer"]
        )
        defined = main[main["n_undefined"] == 0].set_index(["importance", "method", "layer"])["mean"]
        assert flipped["mean"].reindex(defined.index).to_dict() == pytest.approx(defined.to_dict())
        metrics = json.loads(paths.correlations_metrics(task).read_text())
        assert metrics["blank_out"]["flow"]["L1"]["mean"] == pytest.approx(
            main.query("importance == 'blank_out' and method == 'flow' and layer == 1")["mean"].item()
        )
        faith = pd.read_parquet(paths.faithfulness(task))
        methods = {*STUDY_METHODS, "blank_out", "input_gradients", "random",
                   "input_x_gradient", "integrated_gradients"} | ({"attnlrp", *DECOMPOSITION} if task == "sst2" else set())  # fmt: skip
        if task == "sst2":  # its rows rule is max: raw, rollout and flow are also scored at the CLS row
            methods |= {"raw_at_cls", "rollout_at_cls", "flow_at_cls"}
        plots = {f.name for f in paths.faithfulness_curves(task).iterdir()}  # dvc plots: a column per method
        assert plots == {"comprehensiveness.csv", "sufficiency.csv", "positive.csv", "negative.csv"}
        cost = pd.read_parquet(paths.method_cost(task)).set_index("method")
        assert (
            set(cost.index) == methods - {"random"} | {"attnlrp", *DECOMPOSITION}
            and cost.loc["input_x_gradient", "vs_gradient"] == 1
        )
        # no AttnLRP rules for the agreement encoder, nor a Hugging Face model's vectors to decompose
        assert ((cost.loc[["attnlrp", *DECOMPOSITION], "skipped"] == "") == (task == "sst2")).all()
        assert set(faith["method"]) == methods and set(faith["metric"]) >= {
            "comprehensiveness",
            "sufficiency",
        }
        assert faith[faith["layer"].notna()]["layer"].max() == 2 and faith["n"].max() == n
        pairs = pd.read_parquet(paths.method_agreement(task))
        assert {"kendall_tau", "top_k_overlap"} == set(pairs["metric"])
        train_metrics = json.loads(paths.train_metrics(task).read_text())
        if task == "agreement":  # distilled; the attractor files scored as an evaluation-only set
            assert 0 <= train_metrics["teacher"]["accuracy"] <= 1
            assert set(train_metrics["extra_eval"]["attractors"]["n_by_attractors"]) == {
                "1",
                "2",
                "3",
                "4",
                "5",
            }
        assert paths.model(task).is_dir()

    metrics = json.loads((paths.reports / "metrics.json").read_text())
    assert set(metrics) == {"agreement", "sst2"}
    report_md = (paths.reports / "report.md").read_text()
    assert "### Table 1" in report_md and "Sensitivity: which switch moves which cell" in report_md
    assert (
        "The paper's claims, one by one" in report_md and "The authors' choices, and this run's" in report_md
    )
    assert (
        "Faithfulness beyond rank correlation" in report_md and "figures/perturbation_sst2.png" in report_md
    )

    import mlflow

    mlflow.set_tracking_uri(cfg.tracking.uri)
    runs = mlflow.search_runs(experiment_names=[cfg.tracking.experiment])
    stages = set(zip(runs["tags.stage"], runs["tags.dataset"], strict=True))
    for stage in (
        "download",
        "prepare",
        "train",
        "capture",
        "explain",
        "attribute",
        "correlate",
        "faithfulness",
    ):
        assert {(stage, "agreement"), (stage, "sst2")} <= stages
    assert (runs["status"] == "FINISHED").all()
    assert "metrics.corr/blank_out/flow" in runs.columns  # one metric per (reference, method), step = layer


@pytest.mark.slow
def test_hydra_sweep_runs_each_seed_and_aggregates_the_finished_jobs(tmp_path):
    """`python -m pipelines.study -m seed=0,1,-1`: one job per seed in its own folder; the job with a
    bad seed fails, the others finish and are aggregated, the failed one is named with its error."""
    import subprocess
    import sys

    mirror = _write_mirror(tmp_path / "mirror")
    root = Path(__file__).resolve().parents[2]
    overrides = [
        "seed=0,1,-1",
        "tasks=[agreement]",
        "explain.methods=[raw,rollout,flow]",
        f"data.mirrors=[{mirror}]",
        "task.agreement.data.urls=[]",
        "task.agreement.model.n_layer=2",
        "task.agreement.model.n_head=2",
        "task.agreement.model.n_embd=16",
        "task.agreement.train.max_epochs=1",
        "trainer.progress_bar=false",
        "task.agreement.capture.n_samples=6",
        "correlate.n_boot=10",
        "explain.per_head=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        "hydra.callbacks.aggregate.partial=true",  # publish the finished jobs although one failed
    ]
    # The basic launcher runs the jobs in this process, so the fixture files can skip the real digests
    # (the default joblib launcher would run them in worker processes).
    wrapper = (
        "import sys; from attnflow.data import download; download.known_digests = dict; "
        "from pipelines.study import main; sys.argv = sys.argv[:1] + sys.argv[2:]; main()"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", wrapper, "pipelines.study", "-m", "hydra/launcher=basic", *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0 and "1 of 3 job(s) failed, aggregated the other 2 in " in done.stderr
    assert ": job 2 (" in done.stderr and "seed=-1: must be >= 0" in done.stderr  # named, with its error
    jobs = sorted(
        p.name for p in (tmp_path / "multirun").iterdir() if p.is_dir() and (p / "params.yaml").exists()
    )
    sweep_paths = StudyPaths.from_config(PATHS, root=tmp_path)
    jobs_file = json.loads(sweep_paths.sweep_jobs.read_text())
    assert jobs_file["seeds"] == [0, 1]
    (failed,) = jobs_file["failed"]
    assert failed["job"] == "2" and "seed=-1: must be >= 0" in failed["error"]
    jobs = ["0", "1"]
    stacked = pd.read_csv(sweep_paths.sweep)
    cell = stacked.query(
        "importance == 'blank_out' and method == 'flow' and layer == 1 and variant == 'configured'"
    )
    per_seed = [
        pd.read_parquet(
            StudyPaths.from_config(PATHS, root=tmp_path / "multirun" / j).correlations("agreement")
        )
        .query("importance == 'blank_out' and method == 'flow' and layer == 1 and variant == 'configured'")[
            "mean"
        ]
        .item()
        for j in jobs
    ]
    assert sorted(cell["mean"].round(12)) == sorted(round(m, 12) for m in per_seed)
    assert sorted(cell["seed"]) == [0, 1]
    # provenance: every finished job names the code that ran it, and the stacked rows its commit
    from attnflow.sweep import code_state

    here = code_state(root)  # the digests are not compared: a checkout being edited changes them
    records = [j["provenance"] for j in jobs_file["jobs"] if j["status"] == "finished"]
    assert [(r["commit"], sorted(r["code"])) for r in records] == [
        (here["commit"], ["conf", "pipelines", "src"])
    ] * 2
    labels = {r["commit"][:12] + ("+dirty" if r["dirty"] else "") for r in records}
    assert set(stacked["commit"]) == labels
    # each finished job trained and stored its training; a second sweep of seed 0 takes it from the
    # stage cache instead of training, and its table is the first sweep's seed-0 table
    finished = [j for j in jobs_file["jobs"] if j["status"] == "finished"]
    assert [j["training"]["agreement"]["reused"] for j in finished] == [False, False]
    assert len([p for p in (tmp_path / ".cache" / "train").iterdir() if not p.name.startswith(".")]) == 2
    again = [o for o in overrides if not o.startswith(("seed=", "hydra.sweep.dir="))]
    done = subprocess.run(
        [sys.executable, "-c", wrapper, "pipelines.study", "-m", "hydra/launcher=basic", "seed=0", *again,
         f"hydra.sweep.dir={tmp_path / 'multirun-again'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = json.loads(sweep_paths.sweep_jobs.read_text())["jobs"]
    assert job["training"]["agreement"] == {**finished[0]["training"]["agreement"], "reused": True}
    table = "multirun-again/0/" + str(StudyPaths.from_config(PATHS).correlations("agreement"))
    first = "multirun/0/" + str(StudyPaths.from_config(PATHS).correlations("agreement"))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / table), pd.read_parquet(tmp_path / first))


@pytest.mark.slow
def test_the_cluster_code_path_runs_through_submitit_local(tmp_path):
    """`hydra/launcher=submitit_local`: the submitit code path a SLURM cluster uses (jobs pickled and
    run by submitit in their own processes), on the real mirror and a tiny model (issue: hardening)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    shared = root.parent / "shared" / "data"
    overrides = [
        "seed=0", "tasks=[agreement]", f"data.mirrors=[{shared}]", "task.agreement.data.urls=[]",
        "task.agreement.model.n_layer=1", "task.agreement.model.n_head=2", "task.agreement.model.n_embd=16",
        "task.agreement.train.max_epochs=1", "task.agreement.train.train_subset=300", "trainer.progress_bar=false",
        "task.agreement.capture.n_samples=4", "task.agreement.faithfulness.n_samples=2", "correlate.n_boot=5",
        "faithfulness.n_boot=5", "explain.methods=[raw,rollout]", "explain.per_head=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
        "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=20",
    ]  # fmt: skip
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.study", "-m", *overrides],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sweep = StudyPaths.from_config(PATHS, root=tmp_path)
    assert json.loads(sweep.sweep_jobs.read_text())["seeds"] == [0]
    assert set(pd.read_csv(sweep.sweep)["method"]) == {"raw", "rollout"}


@pytest.mark.slow
def test_a_signal_to_a_local_sweep_ends_its_job_processes_too(tmp_path):
    """`kill PID` of a sweep on the joblib launcher (two jobs at once): the parent passes SIGTERM on
    to its job processes, which record it and end, instead of running their jobs on unseen."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    overrides = [
        "seed=0,1", "tasks=[agreement]", f"data.mirrors=[{root.parent / 'shared' / 'data'}]",
        "task.agreement.data.urls=[]", "task.agreement.model.n_layer=1", "task.agreement.model.n_head=2",
        "task.agreement.model.n_embd=16", "task.agreement.train.max_epochs=50", "trainer.progress_bar=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
        "hydra.launcher.n_jobs=2", "~hydra.callbacks.reuse",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "pipelines.study", "-m", *overrides], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def group() -> set[int]:
        members = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == sweep.pid:
                    members.add(int(stat.parent.name))
            except (OSError, IndexError, ValueError):
                continue
        return members

    try:
        deadline = time.monotonic() + 300
        while not all((tmp_path / "multirun" / j / "provenance.json").is_file() for j in "01"):
            assert sweep.poll() is None and time.monotonic() < deadline, "the jobs did not start"
            time.sleep(1)
        time.sleep(3)
        os.kill(sweep.pid, signal.SIGTERM)  # the parent alone, as `pkill -f pipelines.study` would
        assert sweep.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 60
        while group() and time.monotonic() < deadline:
            time.sleep(1)
        assert not group(), "job processes outlived the sweep"
        for job in "01":
            assert "SystemExit: 143" in (tmp_path / "multirun" / job / "error.txt").read_text()
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)
