"""conf/ is the source of truth: params.yaml matches it, and bad configs fail at start by key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipelines import _config, compose

ROOT = Path(__file__).resolve().parents[2]


def test_committed_params_yaml_matches_conf():
    assert compose.run([], check=True, path=ROOT / "params.yaml"), (
        "params.yaml drifted from conf/: run `python -m pipelines.compose`"
    )


def test_override_lands_in_params_and_stage_reads_it(tmp_path):
    compose.run(["attribution.blank_token=unk", "seed=3"], path=tmp_path / "params.yaml")
    cfg = _config.load(tmp_path / "params.yaml")
    assert (cfg.attribution.blank_token, cfg.seed) == ("unk", 3)
    assert not compose.run([], check=True, path=tmp_path / "params.yaml")


def test_unknown_key_in_params_names_the_key(tmp_path):
    cfg = OmegaConf.to_container(_config.compose())
    cfg["explain"]["residul"] = 0.3
    (tmp_path / "params.yaml").write_text(OmegaConf.to_yaml(cfg))
    with pytest.raises(_config.ConfigError, match=r"params.yaml.*residul"):
        _config.load(tmp_path / "params.yaml")


def test_wrong_type_names_the_key():
    with pytest.raises(_config.ConfigError, match="residual"):
        _config.compose(["explain.residual=half"])


def test_mandatory_value_left_missing_fails_at_start():
    with pytest.raises(_config.ConfigError, match=r"mandatory value\(s\) not set: tracking.experiment"):
        _config.compose(["tracking.experiment=???"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("attribution.blank_token=blank", "attribution.blank_token='blank'"),
        ("task.sst2.rows=first", "task.sst2.rows='first'"),
        ("correlate.spearman=pearson", "correlate.spearman='pearson'"),
        ("task.sst2.gradient_class=positive", "task.sst2.gradient_class='positive'"),
        ("task.agreement.capture.split=dev", "task.agreement.capture.split='dev'"),
        ("explain.methods=[flow,gradcam]", "explain.methods='gradcam'"),
    ],
)
def test_value_outside_its_choices_is_named(override, key):
    with pytest.raises(_config.ConfigError, match=key.replace(".", r"\.")):
        _config.compose([override])


def test_missing_params_file_says_how_to_make_it(tmp_path):
    with pytest.raises(_config.ConfigError, match=r"pipelines\.compose"):
        _config.load(tmp_path / "absent.yaml")


def test_the_method_list_is_the_explainer_registry():
    from attnflow.method_inputs import EXPLAINER_INPUTS
    from attnflow.methods import EXPLAINERS

    assert list(EXPLAINER_INPUTS) == list(EXPLAINERS)


# --- ranges and emptiness: refused at start, naming the key (issue: hardening, case 3 and 5) ---


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("tasks=[]", "tasks is empty"),
        ("explain.methods=[]", "explain.methods=[]"),
        ("attribution.methods=[]", "attribution.methods=[]"),
        ("task.agreement.capture.n_samples=-5", "task.agreement.capture.n_samples=-5"),
        ("task.sst2.capture.n_samples=0", "task.sst2.capture.n_samples=0"),
        ("seed=-1", "seed=-1"),
        ("task.agreement.train.lr=-1", "task.agreement.train.lr=-1"),
        ("task.agreement.train.lr=0", "task.agreement.train.lr=0"),
        ("task.sst2.train.batch_size=0", "task.sst2.train.batch_size=0"),
        ("explain.residual=1.5", "explain.residual=1.5"),
        ("explain.residual=-0.1", "explain.residual=-0.1"),
        ("correlate.ci=1.0", "correlate.ci=1.0"),
        ("correlate.ci=0", "correlate.ci=0"),
        ("capture.max_length=1", "capture.max_length=1"),
        (  # the split no longer sums to 1: the rule names the whole split and says why
            "task.agreement.data.split.train=0.9",
            "task.agreement.data.split={'train': 0.9, 'val': 0.1, 'test': 0.1}: fractions must be >= 0 and sum to 1",
        ),
        ("task.agreement.model.n_head=3", "task.agreement.model.n_head=3: must divide model.n_embd=128"),
        ("task.agreement.model.attn_pdrop=1.0", "task.agreement.model.attn_pdrop=1.0: must lie in [0, 1)"),
    ],
)
def test_value_out_of_range_or_empty_is_refused_at_start_naming_the_key(override, key):
    with pytest.raises(_config.ConfigError, match=re.escape(key)):
        _config.compose([override])


def test_tasks_must_have_a_config_node():
    with pytest.raises(_config.ConfigError, match=r"tasks: 'mnist' has no config node task\.mnist"):
        _config.compose(["tasks=[mnist]"])


def test_unknown_key_inside_a_task_block_is_named(tmp_path):
    cfg = OmegaConf.to_container(_config.compose())
    cfg["task"]["agreement"]["model"]["n_layers"] = 3
    (tmp_path / "params.yaml").write_text(OmegaConf.to_yaml(cfg))
    with pytest.raises(_config.ConfigError, match=r"params.yaml: task.agreement.model.*n_layers"):
        _config.load(tmp_path / "params.yaml")


def test_ranking_cls_against_blank_out_needs_cls_blanked():
    # With skip_cls, CLS would be ranked with a blank-out score of 0 that nobody computed.
    with pytest.raises(
        _config.ConfigError, match=r"include_cls\.blank_out=true needs attribution\.blank_positions=all"
    ):
        _config.compose(["attribution.blank_positions=skip_cls"])
    cfg = _config.compose(["protocol=final_notebook"])
    assert (cfg.attribution.blank_positions, cfg.correlate.include_cls.blank_out) == ("skip_cls", False)


def test_default_protocol_is_the_notebook_that_printed_tables_1_2_on_the_papers_stated_sample():
    cfg = _config.compose([])
    assert cfg.task.agreement.model.append_eos is True
    capture = cfg.task.agreement.capture
    assert (capture.split, capture.n_samples, capture.select) == ("test", 2000, "random")  # the captions
    notebook = _config.compose(["+switch=notebook_sample"]).task.agreement.capture
    assert (notebook.split, notebook.n_samples, notebook.select) == ("val", 100, "first")  # cells 3-10
    assert (cfg.attribution.blank_positions, cfg.attribution.blank_token, cfg.attribution.mask_blank) == (
        "all",
        "unk",
        False,
    )
    assert (cfg.correlate.spearman, cfg.correlate.include_cls.blank_out) == ("dense_noties", True)


def _ranged_fields(schema, prefix=""):
    """(dotted key, field) of every field that carries a Range, through nested dataclasses."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if "range" in f.metadata:
            yield prefix + f.name, f
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _ranged_fields(kind, f"{prefix}{f.name}.")


def test_every_range_on_the_schema_is_enforced_by_the_one_check():
    # the schema's fields carry their ranges; problems() (what compose, the stages and the CLI call)
    # refuses a value outside each one, naming the key -- for the study's groups and each task block
    import copy

    from attnflow.schema import StudyConfig, TaskConfig, problems
    from attnflow.tasks import TASKS

    tree = OmegaConf.to_container(_config.compose())
    assert problems(tree) == []
    fields = [(k, f) for k, f in _ranged_fields(StudyConfig) if not k.startswith("task")]
    for name in tree["task"]:
        fields += [(f"task.{name}.{k}", f) for k, f in _ranged_fields(TaskConfig)]
        for block, schema in (("data", TASKS[name].data_config), ("model", TASKS[name].model_config)):
            fields += [(f"task.{name}.{block}.{k}", f) for k, f in _ranged_fields(schema)]
    assert len(fields) >= 45  # every rule pipelines/_config.py used to keep in its own table
    for key, f in fields:
        allowed, each = f.metadata["range"], f.metadata["each"]
        broken = copy.deepcopy(tree)
        *parents, last = key.split(".")
        node = broken
        for part in parents:
            node = node[part]
        current = node[last]
        pool = (
            ([[0], [-1]] if each else [[]])
            if isinstance(current, list)
            else [{}]
            if isinstance(current, dict)
            else [-1, 0, 1, 1.5]
        )
        bad = next(
            v for v in pool if (any(not allowed.check(x) for x in v) if each else not allowed.check(v))
        )
        node[last] = bad
        found = problems(broken)
        assert any(p.startswith(f"{key}") and allowed.rule in p for p in found), (key, bad, found)


def test_the_cli_checks_its_residual_with_the_studys_rule():
    from attnflow.schema import value_problem

    assert value_problem("explain.residual", 0.5) is None
    assert value_problem("explain.residual", 1.5) == "must lie in [0, 1]"
    assert value_problem("explain.heads", "median") == "is not one of mean, sum, max"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("seed=-1", "seed=-1: must be >= 0"),  # a range error
        ("seed=abc", "seed: Value 'abc' of type 'str' could not be converted to Integer"),  # a type error
        ("protocol=nope", "Could not find 'protocol/nope'"),  # an unknown group option
    ],
)
def test_compose_prints_a_config_error_as_one_line_naming_key_and_value(override, expected):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pipelines.compose", override, "--check"],
        capture_output=True, text=True, cwd=_config.ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]


def test_a_type_error_in_params_yaml_is_one_line_naming_the_key(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(_config.dump(_config.compose()).replace("seed: 0", "seed: abc", 1))
    with pytest.raises(_config.ConfigError) as info:
        _config.load(path)
    assert "\n" not in str(info.value) and f"{path}: seed: Value 'abc'" in str(info.value)
