"""Config values that become paths stay inside their folder (issue: reliability, case 4:
``hydra.callbacks.aggregate.into=../../escaped`` and ``study=../../x`` wrote outside ``reports/``
and ``multirun/``). One helper, :func:`attnflow.paths.inside`, refuses them naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnflow.paths import StudyPaths, UnsafeName, inside
from attnflow.sweep import stack_jobs

ROOT = Path(__file__).resolve().parents[2]
PATHS = {"raw": "data/raw", "prepared": "data/prepared", "models": "models", "capture": "outputs/capture",
         "explain": "outputs/explain", "attribute": "outputs/attribute", "reports": "reports"}  # fmt: skip
ESCAPES = ["../../escaped", "..", "a/../../b", "/tmp/abs", "", ".", "a\\..\\..\\b", "C:/x"]


@pytest.mark.parametrize("name", ESCAPES)
def test_a_name_leading_outside_its_folder_is_refused_naming_the_key(name):
    with pytest.raises(UnsafeName, match=r"^study=.* must name a folder inside multirun/"):
        inside("multirun", name, key="study")


@pytest.mark.parametrize("name", ["sweep", "recipes", "abnar2020", "a/b", "seed-1.x"])
def test_a_plain_name_is_joined_below_its_folder(name):
    assert inside("reports", name, key="into") == Path("reports") / name


def test_study_paths_refuse_a_task_or_aggregate_name_that_escapes(tmp_path):
    paths = StudyPaths.from_config(PATHS, root=tmp_path)
    assert paths.sweep_table("recipes") == tmp_path / "reports" / "recipes" / "correlations.csv"
    with pytest.raises(UnsafeName, match=r"^hydra\.callbacks\.aggregate\.into='\.\./\.\./escaped'"):
        paths.sweep_jobs_file("../../escaped")
    with pytest.raises(UnsafeName, match=r"^tasks='\.\./x'"):
        paths.model("../x")


def test_stack_jobs_refuses_an_escaping_aggregate_name_before_writing(tmp_path):
    root = tmp_path / "a" / "b"
    (root / "sweep").mkdir(parents=True)
    out = StudyPaths.from_config(PATHS, root=root)
    with pytest.raises(UnsafeName, match=r"hydra\.callbacks\.aggregate\.into"):
        stack_jobs(root / "sweep", PATHS, ["agreement"], out, name="../../escaped")
    assert not (tmp_path / "escaped").exists() and not (root / "reports").exists()


@pytest.mark.parametrize(
    ("study", "into", "key"),
    [("../../x", "sweep", "study"), ("s", "../../escaped", "hydra.callbacks.aggregate.into")],
)
def test_the_sweep_callback_refuses_before_hydra_makes_a_folder(study, into, key):
    from pipelines.study import AggregateSeeds

    config = OmegaConf.create({"study": study, "paths": PATHS})
    for hook in ("on_run_start", "on_multirun_start"):
        with pytest.raises(SystemExit, match=rf"^error: {key}=") as info:
            getattr(AggregateSeeds(into=into), hook)(config)
        assert "\n" not in str(info.value.code)


@pytest.mark.slow  # two Hydra start-ups, about 10 s each
@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["study=../../x"], "study"),
        (["-m", "seed=0", "hydra.callbacks.aggregate.into=../../escaped"], "hydra.callbacks.aggregate.into"),
    ],
)
def test_the_study_entry_point_exits_with_one_line_and_writes_nothing(tmp_path, args, key):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.study", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {key}=")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b"]


def test_a_run_or_sweep_folder_that_holds_files_is_refused(tmp_path):
    # Two runs started in the same folder (e.g. a fixed hydra.run.dir, or two sweeps in one
    # instant) would overwrite each other's outputs: the second is refused before it writes.
    from omegaconf import OmegaConf

    from pipelines.study import AggregateSeeds

    used = tmp_path / "used"
    (used / "reports").mkdir(parents=True)
    fresh = tmp_path / "fresh"
    cfg = OmegaConf.create({"study": "s", "paths": {"reports": "reports"},
                            "hydra": {"run": {"dir": str(used)}, "sweep": {"dir": str(used)}}})  # fmt: skip
    with pytest.raises(SystemExit, match=r"hydra\.run\.dir=.*already holds another run's files"):
        AggregateSeeds().on_run_start(cfg)
    with pytest.raises(SystemExit, match=r"hydra\.sweep\.dir=.*already holds another run's files"):
        AggregateSeeds().on_multirun_start(cfg)
    cfg.hydra.run.dir = cfg.hydra.sweep.dir = str(fresh)
    AggregateSeeds().on_run_start(cfg)  # a new folder is fine
    AggregateSeeds().on_multirun_start(cfg)
    assert not fresh.exists()
