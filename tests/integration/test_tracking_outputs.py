"""What a stage run and its study's parent run show in MLflow: only the params the stage declares,
its outputs and wall time, per-layer metrics with step = layer, the headline metrics on the parent,
a registered model that `mlflow.pyfunc` loads and predicts with (issue: MLflow for researchers)."""

from __future__ import annotations

import json
import subprocess

import mlflow
import numpy as np
import pytest
import torch

from attnflow import tracking
from attnflow.data.vocab import Vocab
from attnflow.models.agreement import AgreementConfig, AgreementTransformer
from attnflow.models.encoders import WordEncoder
from attnflow.models.io import save_classifier
from pipelines import _config, _stage

DVC_YAML = _config.ROOT / "dvc.yaml"


@pytest.fixture()
def config(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = _config.to_dict(_config.compose([f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "seed=3"]))
    return cfg


def _client(config):
    return mlflow.MlflowClient(config["tracking"]["uri"])


def test_declared_reads_the_stage_params_and_outputs_from_dvc_yaml(config):
    d = tracking.declared(DVC_YAML, "train", item="agreement", config=config)
    assert set(d.params) == {"seed", "trainer", "task.agreement.model", "task.agreement.train"}
    assert d.params["task.agreement.model"] == config["task"]["agreement"]["model"]
    assert [p.as_posix() for p in d.outs] == [
        "models/agreement", "reports/agreement/train_metrics.json", "reports/agreement/train_timing.json",
        "reports/agreement/curve.csv", "reports/agreement/curve.png",
    ]  # fmt: skip
    assert [p.as_posix() for p in d.metrics] == [
        "reports/agreement/train_metrics.json", "reports/agreement/train_timing.json"
    ]  # fmt: skip
    assert tracking.declared(DVC_YAML, "no-such-stage", item=None, config=config) == tracking.Declared()


def test_stage_logs_declared_params_outputs_wall_time_and_parent_headline(config, tmp_path):
    reports = tmp_path / "reports" / "agreement"
    reports.mkdir(parents=True)
    table = {"blank_out": {"flow": {f"L{k}": {"mean": k / 10, "std": 0.1} for k in (1, 2, 3)}}}
    (reports / "correlations.json").write_text(json.dumps(table))
    (reports / "correlations.parquet").write_bytes(b"x")
    curves = reports / "curves"
    curves.mkdir()
    (curves / "blank_out.csv").write_text("layer,flow\n1,0.1\n")
    declared = tracking.declared(DVC_YAML, "correlate", item="agreement", config=config)
    with tracking.stage_run(
        config, stage="correlate", dataset="agreement", params=declared.params, description="Stage correlate.",
        overrides={"seed": 3},
    ) as run:  # fmt: skip
        run.log_metrics({f"corr/blank_out/flow/L{k}": k / 10 for k in (1, 2, 3)})
        tracking.log_outputs(run, declared, task="agreement")
        run_id, parent_id = run.run_id, run.parent_id
    client = _client(config)
    got, parent = client.get_run(run_id), client.get_run(parent_id)
    assert set(got.data.params) == {f"{k}" for k in tracking.flatten(declared.params)}  # not all 130+
    assert len(parent.data.params) == len(tracking.flatten(config))  # the parent has the whole config
    assert got.data.tags[tracking.NOTE_TAG] == "Stage correlate."
    assert "`seed=3`" in parent.data.tags[tracking.NOTE_TAG]
    assert parent.data.tags["mlflow.runName"].startswith("seed=3 ")
    history = client.get_metric_history(run_id, "corr/blank_out/flow")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]  # one point per layer
    assert [m.step for m in client.get_metric_history(run_id, "correlations.blank_out.flow.std")] == [1, 2, 3]
    headline = client.get_metric_history(parent_id, "agreement/corr/blank_out/flow")
    assert [(m.step, m.value) for m in headline] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert got.data.metrics["wall_time_s"] >= 0
    assert "wall_time_s/correlate/agreement" in parent.data.metrics
    artifacts = {f.path for f in client.list_artifacts(run_id, "outputs/reports/agreement")}
    assert {"outputs/reports/agreement/correlations.json", "outputs/reports/agreement/curves"} <= artifacts
    path = client.download_artifacts(run_id, "outputs.json", str(tmp_path))
    files = json.loads(open(path).read())["files"]
    assert files["reports/agreement/correlations.json"]["artifact"] is True


def test_headline_names_match_the_report_cells():
    assert tracking.headline("faithfulness", "sst2", {"flow": {"comprehensiveness": 0.3}}) == {
        "sst2/faithfulness/flow/comprehensiveness": 0.3
    }
    assert tracking.headline("data_summary", "sst2", {"n": 3}) == {}


def test_file_summary_lists_tensors_and_parquet_shape(tmp_path):
    import pandas as pd
    from safetensors.numpy import save_file

    save_file({"flow": np.zeros((2, 3), np.float32)}, str(tmp_path / "maps.safetensors"))
    pd.DataFrame({"a": [1, 2]}).to_parquet(tmp_path / "t.parquet")
    maps = tracking.file_summary(tmp_path / "maps.safetensors")
    assert maps["n_tensors"] == 1 and maps["tensors"]["flow"] == {"dtype": "F32", "shape": [2, 3]}
    assert tracking.file_summary(tmp_path / "t.parquet") | {"bytes": 0} == {
        "bytes": 0,
        "rows": 2,
        "columns": ["a"],
    }


def test_the_trained_classifier_is_a_registered_mlflow_model_that_predicts(config, tmp_path):
    vocab = Vocab.build([["the", "dog", "dogs", "barks"]])
    torch.manual_seed(0)
    model = AgreementTransformer(
        AgreementConfig(vocab_size=len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=8)
    )
    save_classifier(model.eval(), WordEncoder(vocab), tmp_path / "models" / "agreement" / "model")
    declared = tracking.declared(DVC_YAML, "train", item="agreement", config=config)
    with tracking.stage_run(config, stage="train", dataset="agreement") as run:
        tracking.log_outputs(run, declared, task="agreement", model_name="attnflow-agreement")
    loaded = mlflow.pyfunc.load_model("models:/attnflow-agreement/latest")
    ids = WordEncoder(vocab).encode(["the dog barks", "the dogs"])["input_ids"].numpy()
    logits = loaded.predict(ids)
    expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(ids != 0)).logits
    np.testing.assert_allclose(logits, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    signature = loaded.metadata.get_input_schema().inputs[0]
    assert signature.type == np.dtype("int64") and signature.shape == (-1, -1)
    assert loaded.metadata.flavors.keys() >= {"pytorch", "python_function"}


def test_git_commit_is_clean_while_dvc_rewrites_its_lock_and_reports(tmp_path, monkeypatch):
    from attnflow.tracking import runs

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("dvc.lock", "params.yaml", "code.py"):
        (tmp_path / name).write_text("a\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "m.json").write_text("{}")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.chdir(tmp_path / "reports")  # a stage may run below the top
    for name in ("dvc.lock", "params.yaml", "reports/m.json"):
        (tmp_path / name).write_text("changed by dvc repro\n")
    assert not runs._git_commit().endswith("+dirty")
    (tmp_path / "code.py").write_text("edited\n")
    assert runs._git_commit().endswith("+dirty")


def test_stage_run_of_a_script_logs_its_docstring_and_declared_params(config):
    from pipelines import correlate

    with _stage.stage_run(_config.validate(config), "correlate", "agreement") as run:
        run_id = run.run_id
    got = _client(config).get_run(run_id)
    assert got.data.tags[tracking.NOTE_TAG] == correlate.__doc__.strip()
    assert set(got.data.params) == set(
        tracking.flatten(tracking.declared(DVC_YAML, "correlate", item="agreement", config=config).params)
    )


def test_a_protocol_run_is_told_from_a_seed_run_by_its_name_and_tags(tmp_path, monkeypatch):
    # the issue: a protocol=final_notebook parent was named like a seed run, the protocol nowhere
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    uri = f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"
    names, tags = {}, {}
    for label, overrides in (("seed", ["seed=1"]), ("protocol", ["protocol=final_notebook"])):
        config = _config.to_dict(_config.compose([uri, *overrides]))
        choices = _config.group_choices(config)
        with tracking.stage_run(config, stage="correlate", dataset="agreement", choices=choices) as run:
            run_id, parent_id = run.run_id, run.parent_id
        client = _client(config)
        parent, stage = client.get_run(parent_id), client.get_run(run_id)
        names[label], tags[label] = parent.data.tags["mlflow.runName"], parent.data.tags
        assert stage.data.tags["protocol"] == parent.data.tags["protocol"]  # on the stage run too
    # the runs table shows ~22 characters of a name: seed and protocol come first
    assert names["seed"].startswith("seed=1 paper authors ")
    assert names["protocol"].startswith("seed=0 final_notebook authors ")
    assert (tags["seed"]["protocol"], tags["protocol"]["protocol"]) == ("paper", "final_notebook")
    assert (tags["seed"]["seed"], tags["protocol"]["seed"]) == ("1", "0")


def test_group_choices_reads_protocol_recipe_and_switch_back_from_the_values():
    def choices(*overrides):
        return _config.group_choices(_config.to_dict(_config.compose(list(overrides))))

    assert choices() == {"protocol": "paper", "recipe": "authors"}
    assert choices("recipe=plain") == {"protocol": "paper", "recipe": "plain"}
    # an explicit override of one key a protocol sets (a smaller sample) does not hide the choice
    small = ("task.agreement.capture.n_samples=6", "task.agreement.capture.split=val")
    assert choices("protocol=final_notebook", *small)["protocol"] == "final_notebook"
    assert choices(*small)["protocol"] == "paper"
    # no_eos overrides the paper's <eos>: still the paper protocol, with the switch on
    assert choices("+switch=no_eos") == {"protocol": "paper", "recipe": "authors", "switch": "no_eos"}
    # the final notebook has no <eos> already: the switch changes nothing, so it is not "on"
    assert choices("protocol=final_notebook", "+switch=no_eos") == {
        "protocol": "final_notebook",
        "recipe": "authors",
    }


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_a_registered_model_version_carries_seed_config_hash_accuracy_and_a_description(config, tmp_path):
    vocab = Vocab.build([["the", "dog", "dogs", "barks"]])
    torch.manual_seed(0)
    model = AgreementTransformer(
        AgreementConfig(vocab_size=len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=8)
    )
    save_classifier(model.eval(), WordEncoder(vocab), tmp_path / "models" / "agreement" / "model")
    (tmp_path / "reports" / "agreement").mkdir(parents=True)
    (tmp_path / "reports" / "agreement" / "train_metrics.json").write_text(
        json.dumps({"accuracy": 0.98125, "n": 160, "eval_split": "test"})
    )
    declared = tracking.declared(DVC_YAML, "train", item="agreement", config=config)
    choices = _config.group_choices(config)
    with tracking.stage_run(config, stage="train", dataset="agreement", choices=choices) as run:
        tracking.log_outputs(run, declared, task="agreement", model_name="attnflow-agreement")
    (version,) = _client(config).search_model_versions("name = 'attnflow-agreement'")
    assert version.tags["seed"] == "3" and version.tags["config_hash"] == tracking.config_hash(config)
    assert version.tags["test_accuracy"] == "0.9812" and version.tags["protocol"] == "paper"
    assert version.description.startswith(
        "agreement classifier, seed 3, protocol paper, recipe authors, config "
    )
    assert version.description.endswith("; test_accuracy 0.9812")


def test_the_experiment_stores_the_headline_view_of_the_runs_table(config):
    with tracking.stage_run(config, stage="correlate", dataset="agreement") as run:
        experiment_id = run.client.get_run(run.run_id).info.experiment_id
    tags = _client(config).get_experiment(experiment_id).tags
    envelope = json.loads(tags["mlflow.sharedViewState." + tracking.HEADLINE_VIEW])
    state = json.loads(envelope["state"])  # MLflow's saved-view envelope: the state as a string
    assert state["selectedColumns"] == tracking.headline_columns(config["tasks"])
    assert (
        "metrics.`agreement/accuracy`" in state["selectedColumns"] and state["runsHiddenMode"] == "SHOW_ALL"
    )
