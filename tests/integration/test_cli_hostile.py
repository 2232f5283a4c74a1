"""Hostile and broken inputs through the command line's `main` (tests/_cli.py; the terminal escapes
also through the real entry point, `python -m attnflow.cli`): each ends with one clear line on
stderr and exit code 2 (no traceback), or, for control characters, a table that shows them escaped
instead of sending them to the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests._cli import run_cli
from tests._tiny import BERT_WORDS, make_tiny_bert

CLI = [sys.executable, "-m", "attnflow.cli"]
TIMEOUT_S = 300
# Words the tiny BERT knows besides BERT_WORDS (BertTokenizer splits off punctuation, strips accents),
# so that the hostile texts below are mostly known words (most-unknown input is refused).
WORDS = [*BERT_WORDS, "cafe", "film", "pwned", "[", "]", ";", "0", "2j", "31m", "8m", "0m"]
ERROR = "attnflow explain: error:"


def _process(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """The real entry point in a new interpreter (~5 s of imports)."""
    proc = subprocess.run([*CLI, *args], capture_output=True, input=stdin, timeout=TIMEOUT_S)
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    )


def _explain(model: Path, *args: str, stdin: bytes | None = None, run=run_cli) -> subprocess.CompletedProcess:
    return run("explain", "--model", str(model), "--device", "cpu", "--method", "rollout", *args, stdin=stdin)


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The refusal: exit code 2, one stderr line starting with the verb's prefix, holding `needles`."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    # what was loaded (one info line, `attnflow: loaded ...`) may precede the one error line
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("attnflow: loaded ")
    ]
    assert len(lines) == 1 and lines[0].startswith(ERROR), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("bert"), words=WORDS)


# -- terminal escapes ------------------------------------------------------------------------------

HOSTILE_TERMINAL = "good \x1b]0;pwned\x07 movie \x1b[2J\x1b[31m bad\r\x9b"


@pytest.mark.parametrize(
    "run", [run_cli, pytest.param(_process, marks=pytest.mark.slow)], ids=["main", "process"]
)  # the real entry point in the long tier
def test_control_characters_of_a_text_are_printed_escaped(bert, run):
    proc = _explain(bert, "--text", HOSTILE_TERMINAL, run=run)
    assert proc.returncode == 0, proc.stderr
    for raw in ("\x1b", "\x07", "\r", "\x9b"):
        assert raw not in proc.stdout and raw not in proc.stderr
    # the title line shows the text with its control characters spelled out
    assert "good \\x1b]0;pwned\\x07 movie \\x1b[2J\\x1b[31m bad\\x0d\\x9b" in proc.stdout


def test_control_characters_of_a_file_line_are_printed_escaped(bert, tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"good movie\nbad \x1b[8m film\x1b[0m\n")
    proc = _explain(bert, "--file", str(inputs))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "[2] bad \\x1b[8m film\\x1b[0m" in proc.stdout


# -- empty inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\t \n", "\u200b\x1b"])
def test_an_empty_or_blank_text_is_refused(bert, text):
    _one_line_error(_explain(bert, "--text", text), "--text", "nothing to explain")


def test_the_blank_one_of_several_texts_is_named(bert):
    _one_line_error(_explain(bert, "--text", "good movie", "--text", " "), "--text ' ' (the 2nd)")


def test_a_file_line_of_only_invisible_characters_is_refused_by_number(bert, tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"good movie\n\nbad movie\n\x1b\x07\n")
    _one_line_error(_explain(bert, "--file", str(inputs)), str(inputs), "line 4", "nothing to explain")


def test_a_file_of_blank_lines_is_refused_by_name(bert, tmp_path):
    inputs = tmp_path / "blank.txt"
    inputs.write_text("\n   \n\t\n", encoding="utf-8")
    _one_line_error(_explain(bert, "--file", str(inputs)), str(inputs), "3 lines, all blank")


def test_blank_lines_of_a_file_separate_inputs(bert, tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_text("good movie\n\n   \nbad film\n", encoding="utf-8")
    proc = _explain(bert, "--file", str(inputs))
    assert proc.returncode == 0, proc.stderr
    assert "[1] good movie" in proc.stdout and "[2] bad film" in proc.stdout and "[3]" not in proc.stdout


# -- encodings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"good movie\nbad caf\xe9 film\n", "line 2, byte offset 18 (byte 8 of the line) is 0xe9"),
        (b"\x80\xff\xfe\x00\x13garbage", "line 1, byte offset 0 (byte 1 of the line) is 0x80"),
    ],
)
def test_a_file_that_is_not_utf8_is_named_with_line_and_offset(bert, tmp_path, data, where):
    inputs = tmp_path / "latin1.txt"
    inputs.write_bytes(data)
    _one_line_error(_explain(bert, "--file", str(inputs)), str(inputs), "not utf-8 text", where, "--encoding")


def test_stdin_that_is_not_utf8_is_named(bert):
    _one_line_error(_explain(bert, "--file", "-", stdin=b"good\n\xff movie\n"), "--file -:", "line 2")


def test_encoding_reads_a_latin1_file(bert, tmp_path):
    inputs = tmp_path / "latin1.txt"
    inputs.write_bytes(b"good movie\nbad caf\xe9 film\n")
    proc = _explain(bert, "--file", str(inputs), "--encoding", "latin-1")
    assert proc.returncode == 0, proc.stderr
    assert "[2] bad café film" in proc.stdout and "cafe" in proc.stdout


def test_an_unknown_encoding_is_refused(bert):
    _one_line_error(_explain(bert, "--text", "good", "--encoding", "klingon"), "--encoding klingon")


# -- --out -----------------------------------------------------------------------------------------


def test_out_that_is_a_file_is_refused(bert, tmp_path):
    target = tmp_path / "taken"
    target.write_text("not a folder", encoding="utf-8")
    _one_line_error(
        _explain(bert, "--text", "good", "--out", str(target)), f"--out {target}", "expected a folder"
    )
    assert target.read_text(encoding="utf-8") == "not a folder"


def test_out_under_a_file_is_refused(bert, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    target = blocker / "sub" / "out"
    _one_line_error(
        _explain(bert, "--text", "good", "--out", str(target), "--format", "json"),
        f"--out {target}",
        f"{blocker} is a file",
        "expected a folder",
    )


def _can_write_in(folder: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder no file can be made in, as this user: a chmod 555 folder stops a normal user; root
    ignores modes, so for root a folder of the read-only /proc file system."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if not _can_write_in(folder):
        return folder
    folder.chmod(0o755)
    proc = Path(f"/proc/{os.getpid()}")
    if proc.is_dir() and not _can_write_in(proc):
        return proc
    pytest.skip("no read-only folder available: chmod does not stop this user and /proc is writable")


def test_out_in_a_read_only_folder_is_refused(bert, tmp_path):
    folder = _read_only_folder(tmp_path)
    for target in (folder, folder / "new"):
        _one_line_error(
            _explain(bert, "--text", "good", "--out", str(target), "--format", "json"),
            f"--out {target}",
            "read-only",
            "expected a folder where files can be written",
        )


# -- models ----------------------------------------------------------------------------------------


class _Payload:
    """Pickles to a call of os.system: what a malicious pytorch_model.bin carries."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_checkpoint_with_code_is_refused_as_unsafe(tmp_path):
    import torch

    model = make_tiny_bert(tmp_path / "evil", words=WORDS)
    (model / "model.safetensors").unlink()
    marker = tmp_path / "code-ran"
    torch.save({"bert.embeddings.word_embeddings.weight": _Payload(marker)}, model / "pytorch_model.bin")
    line = _one_line_error(
        _explain(model, "--text", "good movie"),
        f"{model / 'pytorch_model.bin'}: refused as unsafe",
        "safetensors",
    )
    assert "weights_only" not in line
    assert not marker.exists()


def test_a_model_folder_without_tokenizer_files_is_refused(tmp_path):
    model = make_tiny_bert(tmp_path / "no-tokenizer", words=WORDS, with_tokenizer=False)
    _one_line_error(
        _explain(model, "--text", "good movie, not a bad film"),
        "unknown token '[UNK]'",
        f"{model} has no tokenizer files",
        "tokenizer.json",
    )


def test_a_text_of_a_few_unknown_words_is_still_explained(bert):
    proc = _explain(bert, "--text", "a good movie with zebras")  # 1 of 5 words unknown
    assert proc.returncode == 0, proc.stderr
    assert "[UNK]" in proc.stdout
