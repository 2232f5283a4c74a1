"""A generation's explanation shows and saves as an `Explanation` does: one-line repr, `save` by
suffix (any case), `show()`, the notebook page, readable tokens, a removed sink drawn as removed.
A tiny random GPT-2 built from its config, one token per letter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnflow.generate import explain_generation, load_generations  # noqa: E402
from attnflow.hf import token_labels  # noqa: E402
from tests._tiny import LetterTokenizer as Tok  # noqa: E402


@pytest.fixture(scope="module")
def generation():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=24, n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=None, eos_token_id=None)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    # token 0 named a sink: its column is removed ("diagonal"), which pictures must show as removed
    return explain_generation(model, Tok(), "abcdefg", max_new_tokens=3, methods=["raw", "rollout"],
                              sink_positions=[0])  # fmt: skip


def test_repr_is_one_line_without_arrays(generation):
    text = repr(generation)
    assert "\n" not in text and "array" not in text and len(text) < 300
    assert text.startswith("GenerationExplanation(prompt='abcdefg'") and "generated=3" in text
    assert "sink 'a' (token 0) removed (diagonal)" in text


def test_a_removed_sink_is_drawn_as_removed(generation):
    assert generation.removed_columns == [0]
    assert generation.column_labels()[0] == "⊘ a" and generation.column_labels()[1] == "b"
    item = generation.html_item()
    assert 0 in item["muted"] and item["columns"][0].startswith("⊘")
    fig = generation.plot()
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2  # one per method's panel, over column 0
    assert all(p.get_x() == -0.5 and p.get_width() == 1 for p in hatched)
    assert any("hatched (⊘): attention sink removed" in ax.get_xlabel() for ax in fig.axes)


@pytest.mark.parametrize("name", ["g.html", "g.PNG", "g.json", "g.SafeTensors"])
def test_save_by_suffix_in_any_case(generation, tmp_path, name):
    path = generation.save(tmp_path / name)
    assert path.is_file() and path.stat().st_size > 0
    data = path.read_bytes()
    if name.lower().endswith(".html"):
        assert b"<html" in data.lower() and "⊘ a".encode() in data
    elif name.lower().endswith(".png"):
        assert data.startswith(b"\x89PNG")
    else:
        (back,) = load_generations(path)
        np.testing.assert_allclose(back.maps["rollout"], generation.maps["rollout"], rtol=1e-6)
        if name.endswith(".json"):
            assert json.loads(data)["records"][0]["options"]["sink_keys"] == [0]


def test_save_refuses_an_unknown_suffix_naming_the_choices(generation, tmp_path):
    with pytest.raises(ValueError, match=r"use \.html, \.png, \.json, \.safetensors"):
        generation.save(tmp_path / "g.txt")


def test_show_writes_the_page_and_says_where(generation, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    fig = generation.show()
    err = capsys.readouterr().err
    assert fig is not None and "attnflow: wrote" in err and "explanation.html" in err


def test_notebook_page_is_a_sandboxed_frame(generation):
    out = generation._repr_html_()
    assert out.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in out


class ByteLevelTok:
    """convert_tokens_to_string as a byte-level BPE tokenizer's ("Ġ" = space, "Ċ" = newline)."""

    all_special_tokens = ()

    def convert_ids_to_tokens(self, ids):
        return [["Hello", "Ġworld", "Ċ", "Ġ"][i] for i in ids]

    def convert_tokens_to_string(self, tokens):
        return "".join(tokens).replace("Ġ", " ").replace("Ċ", "\n")


def test_byte_level_markers_become_readable_labels():
    labels, _ = token_labels(ByteLevelTok(), [0, 1, 2, 3])
    assert labels == ["Hello", "world", "⏎", "␣"]
