"""attnflow.answer.study, what the ``answer`` stage and the benchmark run: every tool on the same
items, scored by the same metrics, summarised as a long table and flat MLflow-safe metrics; and the
stage itself on a tiny random Llama with a word-level chat tokenizer. The model's generation is the
only stand-in (it "answers" each item's expected answer, so that items are kept and scored); the
attributions, deletions and recoveries are computed for real."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from attnflow.answer import answer_tables, build_items, compare_tools, save_answer_study
from attnflow.answer.study import group_name

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEMPLATE = ("{% for m in messages %}<s> user {{ m['content'] }} </s>{% endfor %}"
            "{% if add_generation_prompt %} <s> assistant{% endif %}")  # fmt: skip


def _split(text):
    return re.findall(r"\w+|[^\w\s]+", text)


def _words(texts):
    return sorted({w for t in texts for w in _split(t)})


def tiny_chat_lm(items, directory=None):
    """(a random 2-layer Llama, a word-level tokenizer with a chat template) knowing every word of
    ``items``; the model's ``generate`` writes the item's expected answer (the one stand-in)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [
        "<unk>",
        "<s>",
        "</s>",
        *_words([i.prompt + " " + i.answer for i in items] + ["Context: Query: user assistant"]),
    ]
    tk = Tokenizer(models.WordLevel({w: k for k, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", eos_token="</s>", pad_token="</s>"
    )
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()

    def generate(input_ids, max_new_tokens, **kwargs):  # the expected answer of the item asked
        text = " ".join(tok.convert_ids_to_tokens(input_ids[0].tolist()))
        answer = next(i.answer for i in items if " ".join(_split(i.prompt)) in text)
        new = tok(answer.strip() + " </s>", add_special_tokens=False)["input_ids"]
        return torch.cat([input_ids, torch.tensor([new])], dim=1)

    model.generate = generate
    if directory is not None:
        model.save_pretrained(directory)
        tok.save_pretrained(directory)
    return model, tok


@pytest.fixture(scope="module")
def scored():
    items = build_items(["arithmetic"], 2, seed=0)
    model, tok = tiny_chat_lm(items)
    rows, kept = compare_tools(model, tok, items, ["input_gradients", "rollout"], full_curve=96, steps=8)
    return items, rows, kept


def test_every_tool_scores_the_same_kept_items(scored):
    _, rows, kept = scored
    assert kept == {"arithmetic/None": {"built": 2, "kept": 2}}
    assert [(r["item"], r["tool"]) for r in rows] == [
        (0, "input_gradients"),
        (0, "rollout"),
        (1, "input_gradients"),
        (1, "rollout"),
    ]
    for r in rows:
        assert r["finite"] and r["seconds"] > 0 and 0 <= r["recovery@10%"] <= 1
        assert 0 <= r["rise"] <= 1 and 0 <= r["mas"] <= 1  # areas of curves normalised to [0, 1]


def test_an_unknown_tool_is_refused_with_the_tools_named():
    with pytest.raises(ValueError, match=r"unknown tool.*shap.*the tools are input_gradients"):
        compare_tools(None, None, [], ["shap"])


def test_the_summary_is_long_and_its_paired_differences_are_item_by_item():
    rows = [{"item": i, "task": "arithmetic", "length": None, "tool": t, "rise": v, "mas": 0.5, "seconds": s}
            for i, (a, b) in enumerate([(0.2, 0.4), (0.3, 0.4), (0.4, 0.7)])
            for t, v, s in (("flashtrace", b, 1.0), ("attnlrp", a, 2.0))]  # fmt: skip
    kept = {"arithmetic/None": {"built": 5, "kept": 3, "wrong": 2}}
    table, summary, metrics = answer_tables(rows, kept, reference="flashtrace", n_boot=200, seed=0)
    assert len(table) == 6
    paired = summary[(summary["tool"] == "attnlrp") & summary["paired"] & (summary["score"] == "rise")].iloc[
        0
    ]
    assert paired["mean"] == pytest.approx(np.mean([0.2 - 0.4, 0.3 - 0.4, 0.4 - 0.7]))
    assert paired["low"] <= paired["mean"] <= paired["high"] and (paired["built"], paired["kept"]) == (5, 3)
    assert not summary[(summary["tool"] == "flashtrace") & summary["paired"]].shape[
        0
    ]  # the reference is not paired
    assert metrics["arithmetic"]["attnlrp"]["rise_minus_flashtrace"] == pytest.approx(paired["mean"])
    assert (
        metrics["arithmetic"]["attnlrp"]["seconds"] == pytest.approx(2.0)
        and metrics["arithmetic"]["kept"] == 3
    )
    assert (group_name("retrieval", 256), group_name("retrieval", 256.0), group_name("multihop", None)) == (
        "retrieval_256",
        "retrieval_256",
        "multihop",
    )


def test_the_files_are_written_together_or_not_at_all(scored, tmp_path, monkeypatch):
    _, rows, kept = scored
    folder = tmp_path / "answer"
    metrics = save_answer_study(
        rows, kept, folder, reference="rollout", n_boot=50, seed=0, meta={"model": "tiny"}
    )
    summary = pd.read_parquet(folder / "summary.parquet")
    assert (
        set(summary["tool"]) == {"input_gradients", "rollout"}
        and len(pd.read_parquet(folder / "rows.parquet")) == 4
    )
    payload = json.loads((folder / "summary.json").read_text())
    assert payload["metrics"] == metrics and payload["meta"] == {"model": "tiny"}
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    import attnflow.io

    def broken(path, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(attnflow.io.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        save_answer_study(rows[:2], kept, folder, reference="rollout", n_boot=50, seed=0, meta={})
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing half-written


def test_the_stage_writes_its_tables_and_logs_its_metrics(tmp_path, monkeypatch):
    """The answer stage on the tiny chat LM in place of the converted one (arithmetic only, no FlashTrace)."""
    from attnflow.paths import StudyPaths
    from pipelines import _config
    from pipelines import answer as answer_stage

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _config.compose(["answer.tasks=[arithmetic]", "answer.n_items=2", "answer.methods=[input_gradients,attnlrp]",
                           "answer.reference=input_gradients", "answer.n_boot=50", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"])  # fmt: skip
    paths = StudyPaths.from_config(cfg.paths, root=tmp_path)
    items = build_items(["arithmetic"], 2, seed=cfg.seed)
    model, _ = tiny_chat_lm(items, paths.language_model)
    monkeypatch.setattr(
        answer_stage,
        "load_model",
        lambda name, device: (model, transformers.AutoTokenizer.from_pretrained(name)),
    )
    answer_stage.run(cfg)
    summary = pd.read_parquet(paths.answer / "summary.parquet")
    assert set(summary["tool"]) == {"input_gradients", "attnlrp"} and set(summary["kept"]) == {2}
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = mlflow.search_runs(search_all_experiments=True, filter_string="tags.stage = 'answer'")
    assert len(run) == 1 and run["metrics.arithmetic.attnlrp.rise_minus_input_gradients"].notna().all()
    assert run["metrics.arithmetic.attnlrp.recovery_10_"].between(0, 1).all()  # recovery@10 %, MLflow-safe

    from attnflow.report import build_report

    report = build_report(tasks=[], paths=paths, config=_config.to_dict(cfg)).markdown
    assert "## Answer attribution: generated spans side by side with FlashTrace" in report
    assert "arithmetic: 2 of 2 items answered right and scored" in report
    assert "arithmetic: best attnflow method " in report and "ΔRISE vs input_gradients" in report


def test_the_reports_verdict_picks_the_tool_with_the_fewest_misses_then_the_lowest_rise():
    from attnflow.report.sections.answer import _verdict

    def cell(tool, score, paired, mean, low, high):
        return {"task": "t", "length": None, "tool": tool, "score": score, "paired": paired, "mean": mean,
                "low": low, "high": high, "items": 3, "out_of_memory": 0, "built": 5, "kept": 3}  # fmt: skip

    group = pd.DataFrame([
        cell("a", "rise", False, 0.10, 0.0, 0.2), cell("a", "rise", True, -0.2, -0.3, -0.1),
        cell("a", "mas", True, 0.3, 0.1, 0.5),  # a: the lowest RISE, but MAS worse beyond its interval
        cell("b", "rise", False, 0.25, 0.1, 0.4), cell("b", "rise", True, -0.05, -0.2, 0.1),
        cell("b", "mas", True, 0.05, -0.1, 0.2), cell("b", "recovery@10%", False, 0.3, 0.1, 0.6),
        cell("ft", "rise", False, 0.3, 0.2, 0.4), cell("ft", "recovery@10%", False, 0.5, 0.4, 0.6),
    ])  # fmt: skip
    text = _verdict("t", group, "ft")
    assert text.startswith("t: best attnflow method b; RISE within the interval")
    assert "MAS within the interval" in text and "recovery@10 % 0.30 vs 0.50: within the interval" in text
