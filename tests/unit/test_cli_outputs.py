"""Reliability round 4 (issue 34), the command line: outputs first, whatever happens to stdout.

``attnflow explain ... --table --out d | head -1`` once exited 1 with a BrokenPipeError traceback and
wrote no files (the tables were printed before the files were written); a ``$...$`` in one input
crashed the PNG and, with it, every output; ``--out`` paths with ESC bytes reached the terminal raw.
Now: every file is written before anything is printed; a stdout whose reader left ends the printing
quietly with exit code 141 (128 + SIGPIPE, as documented in the README); a full stdout is one line
naming it (exit 1); a figure that cannot be drawn is named (exit 1) and costs no other output;
every path printed is escaped.

The in-process tests run `attnflow.cli.main` on a tiny random BERT; the real pipes (a closed reader,
``/dev/full``, ``PYTHONUNBUFFERED=1``) run the entry point in a subprocess (marked slow).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from attnflow.cli import main
from tests._tiny import BERT_WORDS, make_tiny_bert

WORDS = [*BERT_WORDS, "costs", "film", "it", "and", "$", "5", "x", "^"]
FORMATS = ("png", "html", "json", "safetensors")
CLI = [sys.executable, "-m", "attnflow.cli"]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("bert"), words=WORDS)


READER_GONE, OUTPUT_FAILED = 141, 1  # the exit codes the README states


class _Broken(io.TextIOBase):
    """A stdout whose every write fails as `error` does (a closed pipe, a full disk)."""

    def __init__(self, error: OSError) -> None:
        self.error, self.attempts = error, 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.attempts += 1
        raise self.error


def _explain(bert: Path, out: Path, *extra: str) -> int:
    args = ["explain", "--model", str(bert), "--device", "cpu", "--method", "raw,rollout"]
    return main([*args, "--out", str(out), "--format", ",".join(FORMATS), *extra])


def _complete(out: Path, n: int) -> None:
    """Every format of `n` inputs is on disk and whole (the JSON parses, the PNGs have their end)."""
    from attnflow.hf import load_explanations

    pngs = sorted(out.glob("explain*.png"))
    assert len(pngs) == n and all(p.read_bytes().endswith(b"IEND\xaeB`\x82") for p in pngs)
    assert (out / "explain.html").read_text(encoding="utf-8").rstrip().endswith("</html>")
    assert len(json.loads((out / "explain.json").read_text(encoding="utf-8"))["records"]) == n
    assert len(load_explanations(out / "explain.safetensors")) == n


# -- a reader that goes away, a full stdout ---------------------------------------------------------


def test_a_closed_stdout_ends_the_printing_quietly_and_every_file_is_written(
    bert, tmp_path, monkeypatch, capsys
):
    broken = _Broken(BrokenPipeError(32, "Broken pipe"))
    monkeypatch.setattr(sys, "stdout", broken)
    code = _explain(bert, tmp_path / "d", "--text", "good movie", "--text", "bad film", "--table")
    err = capsys.readouterr().err
    assert code == READER_GONE
    assert "Traceback" not in err and "error" not in err
    assert broken.attempts == 1  # the first failed line ends the printing
    _complete(tmp_path / "d", 2)


def test_a_full_stdout_is_one_line_naming_it_and_every_file_is_written(bert, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Broken(OSError(28, "No space left on device")))
    code = _explain(bert, tmp_path / "d", "--text", "good movie", "--table")
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == OUTPUT_FAILED
    assert len(lines) == 1 and "standard output" in lines[0] and "No space left on device" in lines[0]
    _complete(tmp_path / "d", 1)


def test_a_closed_stderr_costs_no_output(bert, tmp_path, monkeypatch, capsys):
    """``2>&1 | true``: the progress bar, warnings and the "wrote" line meet a closed stderr."""
    monkeypatch.setattr(sys, "stderr", _Broken(BrokenPipeError(32, "Broken pipe")))
    code = _explain(bert, tmp_path / "d", "--text", "good movie", "--text", "bad film", "--table")
    assert code == 0
    assert "[2] bad film" in capsys.readouterr().out
    _complete(tmp_path / "d", 2)


def test_the_files_are_written_before_the_first_table_line(bert, tmp_path, monkeypatch):
    """Outputs first: when the first line reaches stdout, every file is already complete."""
    seen: list[list[str]] = []

    class Watch(io.StringIO):
        def write(self, s: str) -> int:
            seen.append(
                sorted(p.name for p in (tmp_path / "d").glob("*")) if (tmp_path / "d").exists() else []
            )
            return super().write(s)

    monkeypatch.setattr(sys, "stdout", Watch())
    assert _explain(bert, tmp_path / "d", "--text", "good movie", "--table") == 0
    assert seen and seen[0] == ["explain.html", "explain.json", "explain.png", "explain.safetensors"]


# -- user text drawn as plain text; one figure never costs the others ------------------------------


def test_a_dollar_text_is_drawn_and_costs_no_output(bert, tmp_path):
    code = _explain(bert, tmp_path / "d", "--text", "good movie", "--text", "it costs $x^$ film", "--quiet")
    assert code == 0
    _complete(tmp_path / "d", 2)


def test_a_figure_that_cannot_be_drawn_is_named_and_the_others_are_written(
    bert, tmp_path, monkeypatch, capsys
):
    import attnflow.display as display

    real = display.explanation_figure

    def fails_on_bad(e, **kwargs):
        if "bad" in (e.text or ""):
            raise RuntimeError("the plotting library gave up")
        return real(e, **kwargs)

    monkeypatch.setattr(display, "explanation_figure", fails_on_bad)
    code = _explain(bert, tmp_path / "d", "--text", "good movie", "--text", "bad film", "--text", "a movie")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == OUTPUT_FAILED
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("attnflow explain: error:") and "explain_2.png" in err[-1]
    assert "the plotting library gave up" in err[-1] and "every other output is written" in err[-1]
    out = tmp_path / "d"
    assert sorted(p.name for p in out.glob("*.png")) == ["explain_1.png", "explain_3.png"]
    assert (out / "explain.html").exists() and (out / "explain.json").exists()
    assert (out / "explain.safetensors").exists()


def test_a_page_its_writer_refuses_is_named_and_the_data_files_are_written(
    bert, tmp_path, monkeypatch, capsys
):
    import attnflow.viz as viz

    def refuses(*args, **kwargs):
        raise ValueError("no items to show")

    monkeypatch.setattr(viz, "write_html", refuses)
    code = _explain(bert, tmp_path / "d", "--text", "good movie")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == OUTPUT_FAILED and "explain.html (ValueError: no items to show)" in err[-1]
    out = tmp_path / "d"
    assert sorted(p.name for p in out.iterdir()) == ["explain.json", "explain.png", "explain.safetensors"]


# -- every user string printed is escaped ---------------------------------------------------------


def test_an_out_path_with_terminal_escapes_is_printed_escaped(bert, tmp_path, capsys):
    out = tmp_path / "d\x1b]0;pwned\x07\x1b[2J"
    assert _explain(bert, out, "--text", "good movie") == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "d\\x1b]0;pwned\\x07\\x1b[2J" in err
    assert (out / "explain.png").exists()


def test_an_error_naming_a_hostile_path_is_printed_escaped(bert, tmp_path, capsys):
    blocker = tmp_path / "f\x1b[31m"
    blocker.write_text("a file, not a folder")
    assert _explain(bert, blocker, "--text", "good movie") == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "f\\x1b[31m" in err


# -- the real entry point: a closed pipe, /dev/full, PYTHONUNBUFFERED --------------------------------


def _cli(
    bert: Path, out: Path, texts: list[str], stdout_fd: int, env: dict, stderr: int = subprocess.PIPE
) -> subprocess.CompletedProcess:
    args = ["explain", "--model", str(bert), "--device", "cpu", "--method", "rollout", "--table"]
    files = tmp = out.parent / "in.txt"
    tmp.write_text("\n".join(texts) + "\n", encoding="utf-8")
    cmd = [*CLI, *args, "--file", str(files), "--out", str(out), "--format", ",".join(FORMATS)]
    return subprocess.run(
        cmd, stdout=stdout_fd, stderr=stderr, timeout=TIMEOUT_S, env={**os.environ, **env}, text=True
    )


@pytest.mark.slow
@pytest.mark.parametrize(("unbuffered", "both"), [("", False), ("1", False), ("1", True)])
def test_the_entry_point_with_its_reader_gone_writes_every_file_and_exits_141(
    bert, tmp_path, unbuffered, both
):
    """``attnflow explain --file 12lines.txt --table --out d | true`` (the reader never reads), with
    ``2>&1`` too (`both`: the progress bar and the "wrote" line meet the closed pipe)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        texts = [f"good movie {i}" for i in range(12)]
        stderr = write if both else subprocess.PIPE
        proc = _cli(bert, tmp_path / "d", texts, write, {"PYTHONUNBUFFERED": unbuffered}, stderr=stderr)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    if not both:
        assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    _complete(tmp_path / "d", 12)


@pytest.mark.slow
def test_the_entry_point_with_a_full_stdout_says_so_in_one_line(bert, tmp_path):
    with open("/dev/full", "w") as full:
        proc = _cli(bert, tmp_path / "d", ["good movie", "bad film"], full.fileno(), {})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "standard output" in lines[0], proc.stderr
    _complete(tmp_path / "d", 2)


def test_the_readme_states_the_exit_codes():
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    for said in ("141", "128 + SIGPIPE", "/dev/full", "Every file is written before anything is printed"):
        assert said in text


# -- every wait says what it waits for; values checked by meaning ----------------------------------------


def test_reading_inputs_from_a_terminal_says_what_it_waits_for(monkeypatch, capsys):
    """``--file -`` on a terminal waits for typed lines: it says so instead of hanging silently."""
    from attnflow.cli.inputs import read_inputs

    class Terminal:
        buffer = io.BytesIO(b"good movie\n")

        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    assert read_inputs(None, "-") == ["good movie"]
    err = capsys.readouterr().err
    assert "standard input" in err and "Ctrl-D" in err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--temperature", "nan"), ("--temperature", "inf"), ("--temperature", "0"), ("--top-p", "nan"),
     ("--top-p", "1.5"), ("--top-p", "0"), ("--top-k", "0")],
)  # fmt: skip
def test_generate_sampling_options_are_checked_by_meaning_before_any_model_loads(option, value, capsys):
    code = main(["generate", "--model", "no/such/model", "--prompt", "hi", "--sample", option, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"attnflow generate: error: {option} {value}")
    assert "--model" not in err[0]  # refused before the model is looked for


# -- pictures only when asked; readings beside striking figures (issue 58) -------------------------


def test_several_inputs_draw_no_png_unless_asked_and_one_input_does(bert, tmp_path, capsys):
    args = ["explain", "--model", str(bert), "--device", "cpu", "--method", "raw,rollout"]
    assert main([*args, "--text", "good movie", "--text", "a film", "--out", str(tmp_path / "many")]) == 0
    assert sorted(p.name for p in (tmp_path / "many").iterdir()) == ["explain.html", "explain.json"]
    assert main([*args, "--text", "good movie", "--out", str(tmp_path / "one")]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["explain.html", "explain.png"]
    out = capsys.readouterr().out
    assert "prediction: " in out and "(p = 0." in out  # the prediction's probability in the title


def test_the_faithfulness_drops_are_read_against_random():
    from attnflow.cli.generate import drop_reading

    # the case: rollout's top token costs +0.114 of log-prob, a random one +0.432
    line = drop_reading({"rollout": {1: 0.114, 3: 0.5}, "random": {1: 0.432, 3: 0.4}}, ["rollout"])
    assert line.startswith("reading: a larger drop means the deleted tokens mattered more")
    assert "Below random (rollout k=1)" in line and "worse than guessing" in line
    assert "Above random (rollout k=3)" in line and "\n" not in line
    assert drop_reading({"rollout": {1: 0.1}}, ["rollout"]) == ""  # no baseline, nothing to read


def test_explain_texts_returns_a_list_that_is_one_table(bert):
    from transformers import BertForSequenceClassification, BertTokenizer

    from attnflow.hf import Explanations, explain_texts

    model = BertForSequenceClassification.from_pretrained(bert).eval()
    batch = explain_texts(
        model, BertTokenizer.from_pretrained(bert), ["good movie", "a film"], methods=["rollout"]
    )
    assert isinstance(batch, Explanations) and isinstance(batch, list) and len(batch) == 2
    df = batch.to_pandas()
    assert list(df["text"].unique()) == ["good movie", "a film"] and df["probability"].between(0.5, 1).all()
    assert len(df) == sum(e.num_layers * len(e.tokens) for e in batch)  # one row per input, layer, token
