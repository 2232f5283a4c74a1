"""attnflow.answer.chat / .compare, what benchmarks/answer_side_by_side.py runs on: where the answer
is found in a generation, how each method is paired with FlashTrace on the same items; and (long
tier, FlashTrace installed from requirements-bench.txt) one run of the benchmark with both tools on
a tiny random Llama with SmolLM2's tokenizer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
FILLER = ROOT.parent / "shared" / "data" / "sst2" / "glue_SST-2" / "train.tsv"


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


from attnflow.answer import answer_span, bootstrap, summarise  # noqa: E402


class _Pieces:
    """A tokenizer whose ids are indices into a list of text pieces."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


def test_the_answer_is_found_as_a_whole_word_and_its_tokens_are_the_span():
    tok = _Pieces(["The", " friend", " was", " born", " in", " Pr", "ague", ".", " Prague", "r"])
    assert answer_span(tok, [0, 1, 2, 3, 4, 5, 6, 7], " Prague") == (5, 6)  # across two tokens
    assert answer_span(tok, [0, 8, 9], " Prague") is None  # "Praguer": not the word
    assert answer_span(tok, [0, 1, 2], " Prague") is None
    assert answer_span(tok, [8, 7], "Prague") == (0, 0)


def test_each_method_is_paired_with_flashtrace_on_its_own_items():
    rows = []
    for item, (mine, theirs) in enumerate([(0.2, 0.5), (0.4, 0.4), (0.3, 0.6)]):
        rows += [
            {"item": item, "task": "t", "length": None, "tool": "attnlrp", "rise": mine, "mas": mine,
             "recovery@10%": 1.0, "seconds": 1.0, "peak_bytes": 0.0},
            {"item": item, "task": "t", "length": None, "tool": "flashtrace", "rise": theirs, "mas": theirs,
             "recovery@10%": 0.5, "seconds": 2.0, "peak_bytes": 0.0},
        ]  # fmt: skip
    rows.append({"item": 9, "task": "t", "length": None, "tool": "attnlrp", "out_of_memory": True})
    (lrp, ft) = summarise(rows)
    assert lrp["tool"] == "attnlrp" and lrp["items"] == 4 and lrp["out_of_memory"] == 1
    assert lrp["rise"][0] == pytest.approx(0.3) and ft["rise"][0] == pytest.approx(0.5)
    assert lrp["rise_minus_flashtrace"][0] == pytest.approx(-0.2)  # the mean of the paired differences
    low, high = lrp["rise_minus_flashtrace"][1:]
    assert -0.3 <= low <= -0.2 <= high <= 0.0  # within the three differences (-0.3, 0, -0.3)
    assert lrp["seconds_minus_flashtrace"][0] == pytest.approx(-1.0)
    assert "rise_minus_flashtrace" not in ft


def test_an_interval_of_no_values_is_nan_and_nans_are_dropped():
    assert all(np.isnan(bootstrap([])))
    assert bootstrap([1.0, float("nan"), None, 1.0]) == (1.0, 1.0, 1.0)


@pytest.mark.lm
def test_a_prompt_whose_first_token_merges_with_the_template_is_left_out_as_template():
    """SmolLM2's template: two of the seed-0 retrieval prompts start so that "Context:" and their
    first word tokenize together; FlashTrace would then attribute to shifted tokens."""
    from transformers import AutoTokenizer

    from attnflow.answer import answer_target, build_items, chat_prompt
    from attnflow.models.names import resolve_lm

    tok = AutoTokenizer.from_pretrained(resolve_lm("smollm2"))
    filler = [r.split("\t")[0] for r in FILLER.read_text().splitlines()[1:]]
    items = build_items(["retrieval"], 24, tokenizer=tok, filler=filler, lengths=[256], seed=0)
    split = [
        k
        for k, item in enumerate(items)
        if answer_target(None, tok, item, pad_id=0, teacher_forced=True) == "template"
    ]
    assert split == [22, 23]
    with pytest.raises(ValueError, match="not contiguous"):
        chat_prompt(tok, items[22].prompt)
    ids, user = chat_prompt(tok, items[0].prompt)
    assert tok.decode([ids[i] for i in user]) == " " + items[0].prompt


@pytest.mark.slow
def test_both_tools_run_on_the_same_items_of_a_tiny_model(tmp_path):
    pytest.importorskip("flashtrace", reason="pip install --no-deps -r requirements-bench.txt (.ci/run does)")
    from attnflow.models.names import resolve_lm

    out = tmp_path / "a.json"
    got = _load("answer_side_by_side").main(["--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--lengths", "96",
                      "--items", "2", "--methods", "attnlrp,rollout,flashtrace", "--tokenizer", resolve_lm("smollm2"),
                      "--flashtrace-recompute", "--out", str(out)])  # fmt: skip
    assert out.is_file()
    tools = {r["tool"] for r in got["rows"]}
    assert tools == {"attnlrp", "rollout", "flashtrace"}
    assert all(r["finite"] and r["user_tokens"] >= 90 for r in got["rows"])
    assert {r["item"] for r in got["rows"] if r["tool"] == "flashtrace"} == {0, 1}
