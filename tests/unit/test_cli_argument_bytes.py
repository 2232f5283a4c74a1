"""Reliability round 5 (issue 57): a byte that is not UTF-8 in ``--text`` / ``--prompt``.

Python keeps such a byte of argv as a lone surrogate (``b"\\xff"`` -> ``"\\udcff"``); the tokenizer
then failed with ``TypeError: TextEncodeInput must be ...`` and a traceback. Now the argument is refused
in one line naming it, the byte and its offset, before any model loads (as --file already was).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnflow.cli.common import CLIError
from attnflow.cli.inputs import read_inputs


def _argv(raw: bytes) -> str:
    """`raw` as Python's argv holds it (the file-system encoding with surrogateescape)."""
    return os.fsdecode(raw)


def test_a_non_utf8_byte_in_text_is_named_with_its_offset():
    with pytest.raises(CLIError) as caught:
        read_inputs(["ok", _argv(b"good \xff movie")], None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("--text 'good \\xff movie' (the 2nd): not utf-8 text")
    assert "byte offset 5 is 0xff" in message


def test_a_non_utf8_byte_in_a_prompt_is_named_by_its_option():
    with pytest.raises(CLIError, match=r"^--prompt '\\xe9t\\xe9': not utf-8 text: byte offset 0 is 0xe9"):
        read_inputs([_argv(b"\xe9t\xe9")], None, option="--prompt")


def test_text_with_valid_non_ascii_characters_still_passes():
    assert read_inputs(["été, 映画 ✓"], None) == ["été, 映画 ✓"]


def test_a_non_utf8_byte_in_a_file_is_named_by_line_and_offset(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"good\nmo\xffvie\n")
    with pytest.raises(CLIError, match=r"line 2, byte offset 7 \(byte 3 of the line\) is 0xff"):
        read_inputs(None, str(path))


def test_the_command_refuses_a_non_utf8_argument_in_one_line(tmp_path):
    """The real bytes on a real command line: exit 2, one line, no traceback, no model loaded."""
    args = ["explain", "--model", str(tmp_path / "none"), "--text", b"good \xff movie"]
    done = subprocess.run(
        [sys.executable, "-m", "attnflow.cli", *args],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONUTF8": "1"},
    )
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1 and "--text 'good \\xff movie'" in lines[0] and "byte offset 5" in lines[0]
