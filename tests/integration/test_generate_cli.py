"""`attnflow generate` end to end on a tiny random GPT-2 saved like a Hugging Face checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from attnflow.cli import main  # noqa: E402
from attnflow.generate.explanation import load_generations  # noqa: E402

WORDS = ["[UNK]", "<eos>", "the", "tower", "is", "in", "city", "of", "paris", "a", "big", "old", "river"]


def _tiny_gpt2(directory: Path) -> Path:
    """A random 2-layer GPT2LMHeadModel and a word-level tokenizer, saved to `directory`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(WORDS), n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=None, eos_token_id=None)  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.decoder = decoders.WordPiece(prefix="##")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _tiny_gpt2(tmp_path_factory.mktemp("gpt2"))


def test_generate_prints_the_table_and_writes_every_format(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    code = main([
        "generate", "--model", str(tiny), "--prompt", "the tower is in the city of", "--max-new-tokens", "4",
        "--method", "raw,rollout,flow,chefer", "--sinks", "auto", "--receptive-field", "uniform", "--token", "1",
        "--faithfulness", "1,2", "--device", "cpu", "--out", str(out), "--format", "png,html,json,safetensors",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "generated token 1" in captured.out and "mean over 2 layers" in captured.out
    assert "tower" in captured.out and "first-token share" in captured.out and "log-prob drop" in captured.out
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "generate.html", "generate.json", "generate.png", "generate.safetensors", "generate_token1.png",
    ]  # fmt: skip
    for png in ("generate.png", "generate_token1.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "generate.html").read_text(encoding="utf-8")
    assert "generated token" in page and "chefer" in page
    (e,) = load_generations(out / "generate.safetensors")
    assert e.maps["flow"].shape == (4, 7, 2) and e.options["receptive_field"] == "uniform"
    data = json.loads((out / "generate.json").read_text(encoding="utf-8"))
    assert (data["format"], data["kind"]) == ("attnflow.explanations", "generation")  # one versioned format
    np.testing.assert_allclose(
        np.asarray(data["records"][0]["maps"]["rollout"]), e.maps["rollout"], atol=1e-6
    )


def test_several_prompts_get_numbered_pictures_and_one_page(tiny, tmp_path, capsys):
    out = tmp_path / "many"
    code = main([
        "generate", "--model", str(tiny), "--prompt", "the city", "--prompt", "a big old river", "--max-new-tokens", "2",
        "--layer", "-1", "--quiet", "--device", "cpu", "--out", str(out), "--format", "png,html",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [
        "generate.html", "generate_1.png", "generate_1_token0.png", "generate_2.png", "generate_2_token0.png",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--method", "rollout,lrp"], "unknown method lrp"),
        (["--token", "9"], "--token 9: the completion has 2 generated tokens"),
        (["--layer", "top"], "--layer 'top'"),
        (["--temperature", "0.7"], "--temperature needs --sample"),
        (["--faithfulness", "x"], "--faithfulness 'x'"),
    ],
)
def test_bad_inputs_end_with_one_clear_line_and_exit_2(tiny, capsys, args, message):
    code = main(["generate", "--model", str(tiny), "--prompt", "the city of", "--max-new-tokens", "2", "--quiet",
                 "--device", "cpu", *args])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_a_prompt_is_required(tiny, capsys):
    assert main(["generate", "--model", str(tiny)]) == 2
    assert "nothing to complete" in capsys.readouterr().err


def test_an_encoder_is_refused(tmp_path, capsys):
    from tests._tiny import make_tiny_bert

    folder = make_tiny_bert(tmp_path / "bert")
    assert main(["generate", "--model", str(folder), "--prompt", "good movie", "--device", "cpu"]) == 2
    assert "not a decoder-only language model" in capsys.readouterr().err


def test_a_long_generation_pages_its_picture_and_no_png_exceeds_the_size_limit(tiny, tmp_path, capsys):
    from PIL import Image

    from attnflow.cli import GENERATED_ROWS_PER_PAGE
    from attnflow.viz import MAX_PNG_PIXELS

    out = tmp_path / "long"
    n = GENERATED_ROWS_PER_PAGE + 5
    code = main([
        "generate", "--model", str(tiny), "--prompt", "the city", "--max-new-tokens", str(n), "--method", "rollout",
        "--layer", "2", "--quiet", "--device", "cpu", "--out", str(out), "--format", "png",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    names = sorted(p.name for p in out.iterdir())
    assert names == ["generate_page1.png", "generate_page2.png", "generate_token0.png"]
    for name in names:
        assert max(Image.open(out / name).size) <= MAX_PNG_PIXELS


def test_attnlrp_explains_each_generated_token_by_its_own_logit(tiny, tmp_path, capsys):
    import torch

    from attnflow.attnlrp.maps import attnlrp_map
    from attnflow.cli import GENERATE_METHODS
    from attnflow.generate.explanation import GENERATION_METHODS
    from attnflow.hf import eager_attention, load_model

    assert GENERATE_METHODS == GENERATION_METHODS
    out = tmp_path / "lrp"
    code = main([
        "generate", "--model", str(tiny), "--prompt", "the tower is in", "--max-new-tokens", "3",
        "--method", "attnlrp,rollout", "--layer", "2", "--quiet", "--device", "cpu", "--out", str(out),
        "--format", "json", "--sinks", "none",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (e,) = load_generations(out / "generate.json")
    model, _ = load_model(str(tiny))
    p = len(e.prompt_ids)
    for t, token in enumerate(e.generated_ids):
        ids = torch.tensor(e.prompt_ids + e.generated_ids[:t])
        with eager_attention(model):
            ref = attnlrp_map(model, ids, target=token)[:, :p]  # (L, P): the prompt columns
        ref = ref / np.abs(ref).sum(axis=1, keepdims=True)  # shares of |relevance| over the prompt
        np.testing.assert_allclose(e.maps["attnlrp"][t].T, ref, atol=1e-5)
