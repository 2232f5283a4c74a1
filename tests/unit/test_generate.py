"""attnflow.generate on tiny random GPT-2 and Llama models built offline from configs.

The checks: the one teacher-forced forward holds exactly the rows generate computed step by step
with its KV cache; generated token t is explained by row P + t - 1 (the row whose logits generate
sampled it from); the per-token "chefer" targets match a single-target forward; removal
faithfulness deletes and re-packs tokens as stated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnflow.explain import normalize_receptive_field, remove_sinks  # noqa: E402
from attnflow.generate import (  # noqa: E402
    explain_generation,
    explain_generation_grid,
    faithfulness,
    faithfulness_grid,
    generation_table,
    removal_faithfulness,
)
from attnflow.generate.explanation import load_generations, save_generations  # noqa: E402
from attnflow.hf import eager_attention, forward_attentions  # noqa: E402
from attnflow.methods import EXPLAINERS  # noqa: E402
from tests._tiny import LetterTokenizer as Tok  # noqa: E402

VOCAB = 24
# KV-cache steps vs one full forward, float32: only summation order differs
ATOL = 1e-5


def _tiny(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=3, n_head=2, n_positions=64,
                                         bos_token_id=None, eos_token_id=None)  # fmt: skip
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=32, max_position_embeddings=64,
                                      bos_token_id=None, eos_token_id=None)  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


PROMPT = "abcdefg"  # P = 7


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    return _tiny(request.param)


def _generate_with_attentions(model, prompt_ids, n):
    ids = torch.tensor([prompt_ids])
    with eager_attention(model), torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             output_attentions=True, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    return out


def test_teacher_forced_rows_equal_the_per_step_attentions_of_generate(model):
    prompt = [ord(c) - 97 for c in PROMPT]
    n = 5
    out = _generate_with_attentions(model, prompt, n)
    gen = out.sequences[0, len(prompt) :].tolist()
    assert len(gen) == n and len(out.attentions) == n
    # one forward over prompt + g_0 .. g_{n-2}
    tf = forward_attentions(model, {"input_ids": torch.tensor([prompt + gen[:-1]])}).attentions[
        0
    ]  # (L, H, T, T)
    p = len(prompt)
    step0 = torch.stack([a[0] for a in out.attentions[0]])  # (L, H, P, P): the prompt pass
    torch.testing.assert_close(tf[:, :, :p, :p], step0, atol=ATOL, rtol=0)
    for s in range(1, n):  # step s feeds g_{s-1} at position P + s - 1 with the cache
        step = torch.stack([a[0, :, 0] for a in out.attentions[s]])  # (L, H, P + s)
        torch.testing.assert_close(tf[:, :, p + s - 1, : p + s], step, atol=ATOL, rtol=0)


def test_token_t_is_explained_by_row_p_plus_t_minus_1(model):
    prompt = [ord(c) - 97 for c in PROMPT]
    n = 4
    out = _generate_with_attentions(model, prompt, n)
    e = explain_generation(model, Tok(), PROMPT, max_new_tokens=n, methods=["raw"], sinks="none")
    assert e.generated_ids == out.sequences[0, len(prompt) :].tolist()
    assert e.rows == [len(prompt) + t - 1 for t in range(n)]
    # the logits generate chose g_t from (greedy: scores = logits) are those of row P + t - 1
    scores = torch.stack(out.scores)[:, 0].double()  # (n, V)
    expected = torch.log_softmax(scores, -1)[torch.arange(n), torch.tensor(e.generated_ids)].numpy()
    np.testing.assert_allclose(e.logprobs, expected, atol=ATOL)
    # raw M[t, :, l] = head-mean attention of row P + t - 1 over the prompt, as shares
    tf = forward_attentions(model, {"input_ids": torch.tensor([prompt + e.generated_ids[:-1]])})
    w = tf.attentions[0].double().mean(dim=1).numpy()  # (L, T, T)
    for t, row in enumerate(e.rows):
        part = w[:, row, : len(prompt)]  # (L, P)
        np.testing.assert_allclose(e.maps["raw"][t].T, part / part.sum(-1, keepdims=True), atol=1e-6)
        np.testing.assert_allclose(e.coverage["raw"][t], part.sum(-1), atol=1e-6)


def test_maps_have_the_seed_layout_and_rows_are_shares(model):
    e = explain_generation(
        model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "rollout", "flow", "chefer"]
    )
    layers = model.config.num_hidden_layers
    for m in e.methods:
        assert e.maps[m].shape == (3, len(PROMPT), layers)  # [n_generated, m_prompt, layers]
        np.testing.assert_allclose(e.maps[m].sum(axis=1), 1.0, atol=1e-9)
        assert e.first_token_share[m].shape == (3,)
        np.testing.assert_allclose(e.first_token_share[m], e.maps[m][:, 0, -1], atol=1e-12)
    assert e.prompt_tokens == list(PROMPT) and len(e.generated_tokens) == 3
    assert e.scores("rollout", token=-1, layer="mean").shape == (len(PROMPT),)


def test_over_all_shows_every_earlier_token_and_nothing_later(model):
    e = explain_generation(
        model, Tok(), PROMPT, max_new_tokens=4, methods=["rollout"], over="all", sinks="none"
    )
    p, n = len(PROMPT), 4
    assert e.maps["rollout"].shape[1] == p + n - 1 and len(e.columns) == p + n - 1
    for t, row in enumerate(e.rows):
        assert np.all(e.maps["rollout"][t, row + 1 :] == 0)  # causal: nothing after the row
        np.testing.assert_allclose(e.coverage["rollout"][t], 1.0, atol=1e-9)  # the whole row is shown


def test_rollout_and_flow_go_through_the_registry_with_the_causal_options(model):
    e = explain_generation(model, Tok(), PROMPT, max_new_tokens=3, methods=["rollout", "flow"], sinks="diagonal",
                           sink_positions=[0], receptive_field="uniform", normalize=False)  # fmt: skip
    seq = torch.tensor([[ord(c) - 97 for c in PROMPT] + e.generated_ids[:-1]])
    attn = forward_attentions(model, {"input_ids": seq}).attentions[0].double().numpy()
    for m in ("rollout", "flow"):
        want = EXPLAINERS[m](
            attn, rows=e.rows, sinks="diagonal", sink_positions=[0], receptive_field="uniform"
        )
        np.testing.assert_allclose(e.maps[m], np.transpose(want, (1, 2, 0))[:, : len(PROMPT)], atol=1e-9)
    assert e.sinks[:, :, 0].all() and not e.sinks[:, :, 1:].any()
    assert e.options["sink_keys"] == [0] and e.options["sink_positions"] == "given"


@pytest.mark.parametrize("sinks", ["none", "drop"])
def test_chefer_targets_each_generated_token_at_its_row(model, sinks):
    # 3 tokens with grad_batch_size=2: two batches of copies (2 + 1)
    e = explain_generation(model, Tok(), PROMPT, max_new_tokens=3, methods=["chefer"], normalize=False,
                           grad_batch_size=2, sinks=sinks, sink_positions=[0])  # fmt: skip
    seq = torch.tensor([[ord(c) - 97 for c in PROMPT] + e.generated_ids[:-1]])
    for t, (row, g) in enumerate(zip(e.rows, e.generated_ids, strict=True)):
        fo = forward_attentions(model, {"input_ids": seq}, target=lambda z, row=row, g=g: z[:, row, g])
        attn = fo.attentions[0].double().numpy()
        if sinks != "none":  # the rule on the sink-handled attention, with the model's own gradient
            attn = remove_sinks(attn, mode=sinks, sinks=[0])
        r = EXPLAINERS["chefer"](attn, attn_grad=fo.attention_grads[0].double().numpy(), rows=[row])[:, 0]
        r[:, row] -= 1.0  # R - I
        np.testing.assert_allclose(e.maps["chefer"][t].T, np.clip(r, 0, None)[:, : len(PROMPT)], atol=1e-6)


def test_chefer_takes_the_column_receptive_field_on_r_minus_i(model):
    """Column: R - I for every row (clipped), each key's column over its mean over the rows that see
    it, then the token's row; "uniform" has no baseline for a method with needs: the plain map."""
    grid = explain_generation_grid(model, Tok(), PROMPT, max_new_tokens=2, methods=["chefer"], normalize=False,
                                   sinks=("drop",), sink_positions=[0],
                                   receptive_fields=("none", "uniform", "column"))  # fmt: skip
    e = grid[("drop", "column")]
    seq = torch.tensor([[ord(c) - 97 for c in PROMPT] + e.generated_ids[:-1]])
    tokens = seq.shape[1]
    for t, (row, g) in enumerate(zip(e.rows, e.generated_ids, strict=True)):
        fo = forward_attentions(model, {"input_ids": seq}, target=lambda z, row=row, g=g: z[:, row, g])
        attn = fo.attentions[0].double().numpy()
        attn = remove_sinks(attn, mode="drop", sinks=[0])  # the rule on the sink-handled attention
        r = EXPLAINERS["chefer"](
            attn, attn_grad=fo.attention_grads[0].double().numpy(), rows=list(range(tokens))
        )
        r = normalize_receptive_field(np.clip(r - np.eye(tokens), 0, None), mode="column", causal=True)
        np.testing.assert_allclose(e.maps["chefer"][t].T, r[:, row, : len(PROMPT)], atol=1e-6)
    np.testing.assert_array_equal(
        grid[("drop", "uniform")].maps["chefer"], grid[("drop", "none")].maps["chefer"]
    )
    assert not np.allclose(e.maps["chefer"], grid[("drop", "none")].maps["chefer"])


def test_the_grid_shares_one_generation_and_matches_single_calls(model):
    grid = explain_generation_grid(model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "rollout"],
                                   sinks=("none", "drop"), receptive_fields=("none", "column"))  # fmt: skip
    assert set(grid) == {("none", "none"), ("none", "column"), ("drop", "none"), ("drop", "column")}
    ids = grid[("none", "none")].generated_ids
    one = explain_generation(model, Tok(), PROMPT, methods=["raw", "rollout"], sinks="drop",
                             receptive_field="column", completion_ids=ids)  # fmt: skip
    for m in ("raw", "rollout"):
        np.testing.assert_allclose(grid[("drop", "column")].maps[m], one.maps[m], atol=1e-12)
    rows = generation_table(grid)
    assert len(rows) == 4 * 2 * 3 and {"first_token_share", "top_token", "sinks", "receptive_field"} <= set(
        rows[0]
    )


def test_sampling_settings_reach_generate_and_the_seed_repeats_them(model):
    kwargs = {"do_sample": True, "top_k": 5, "temperature": 1.5}
    a = explain_generation(model, Tok(), PROMPT, max_new_tokens=6, generate_kwargs=kwargs, seed=3)
    b = explain_generation(model, Tok(), PROMPT, max_new_tokens=6, generate_kwargs=kwargs, seed=3)
    assert a.generated_ids == b.generated_ids and a.options["generate"]["top_k"] == 5


def test_save_and_load_round_trip(model, tmp_path):
    e = explain_generation(model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "flow"])
    for suffix in (".json", ".safetensors"):
        path = save_generations([e, e], tmp_path / f"g{suffix}")
        back = load_generations(path)
        assert len(back) == 2 and back[1].generated_tokens == e.generated_tokens
        assert back[0].options == e.options and back[0].rows == e.rows
        np.testing.assert_allclose(back[0].maps["flow"], e.maps["flow"], atol=1e-6)
        np.testing.assert_array_equal(back[0].sinks, e.sinks)


def test_removal_deletes_and_repacks_the_top_ranked_tokens(model):
    prompt, gen = [1, 2, 3, 4, 5], [6, 7, 8]
    scores = {"by_hand": np.array([[0, 0, 9, 0, 0], [0, 8, 9, 0, 0], [5, 0, 0, 0, 9]], dtype=float)}
    f = removal_faithfulness(model, prompt, gen, scores, ks=(1, 2), n_random=3, seed=1)
    rec = {(r["token_index"], r["k"], r["method"]): r for r in f.records}
    assert rec[(0, 1, "by_hand")]["removed"] == [2] and rec[(1, 2, "by_hand")]["removed"] == [1, 2]
    assert rec[(2, 2, "by_hand")]["removed"] == [0, 4]

    def logp(ids, t):  # log p(gen[t] | ids + gen[:t]) by one plain forward
        x = torch.tensor([ids + gen[:t]])
        with torch.no_grad():
            z = model(input_ids=x).logits[0, -1].double()
        return float(torch.log_softmax(z, -1)[gen[t]])

    r = rec[(1, 2, "by_hand")]
    assert r["logprob"] == pytest.approx(logp(prompt, 1), abs=ATOL)
    assert r["logprob_removed"] == pytest.approx(logp([1, 4, 5], 1), abs=ATOL)  # positions 1, 2 deleted
    assert r["drop"] == pytest.approx(r["logprob"] - r["logprob_removed"], abs=1e-12)
    assert rec[(0, 1, "random")]["draws"] == 3
    again = removal_faithfulness(model, prompt, gen, scores, ks=(1, 2), n_random=3, seed=1)
    assert again.records == f.records  # seeded
    assert set(f.summary()) == {"by_hand", "random"}


def test_faithfulness_of_an_explanation_ranks_its_prompt_columns(model):
    e = explain_generation(model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "rollout"], over="all")
    f = faithfulness(model, e, ks=(1, 3), n_random=2)
    for r in f.records:
        if r["method"] != "random":
            assert all(j < len(PROMPT) for j in r["removed"])  # only prompt tokens are removed
    assert f.options["over"] == "all" and sorted(f.summary()["raw"]) == [1, 3]


def test_the_grid_check_labels_options_and_agrees_with_single_checks(model):
    grid = explain_generation_grid(model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "rollout"],
                                   sinks=("none", "drop"), receptive_fields=("none", "uniform"))  # fmt: skip
    f = faithfulness_grid(model, grid, ks=(1, 2), n_random=2, seed=4)
    labels = {(r["method"], r["sinks"], r["receptive_field"]) for r in f.records}
    assert ("random", None, None) in labels and ("rollout", "drop", "uniform") in labels and len(labels) == 9
    one = faithfulness(model, grid[("drop", "uniform")], ks=(1, 2), n_random=2, seed=4)
    assert f.summary()[("rollout", "drop", "uniform")] == one.summary()["rollout"]
    assert f.summary()["random"] == one.summary()["random"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"methods": ["chefer_lrp"]}, "unknown method"),
        ({"over": "future"}, "over must be one of"),
        ({"sinks": "all"}, "sinks must be one of"),
        ({"receptive_field": "row"}, "receptive_field must be one of"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an int"),
        ({"max_new_tokens": 100}, "exceeds the model's limit of 64"),
        ({"generate_kwargs": {"output_attentions": True}}, "must not set 'output_attentions'"),
    ],
)
def test_bad_options_name_the_rule(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        explain_generation(model, Tok(), PROMPT, **{"max_new_tokens": 2, **kwargs})


def test_k_must_leave_a_prompt_token(model):
    with pytest.raises(ValueError, match=r"every k must be an int in \[1, 2\]"):
        removal_faithfulness(model, [1, 2, 3], [4], {"a": np.ones((1, 3))}, ks=(3,))


@pytest.mark.parametrize("sinks, positions", [("none", "auto"), ("diagonal", [0]), ("drop", "auto")])
def test_the_stream_gives_the_captured_explanation(model, sinks, positions):
    """Long prompts: raw, rollout and flow computed inside the forward, no (L, H, T, T) attentions held."""
    kwargs = dict(max_new_tokens=4, methods=["raw", "rollout", "flow"], sinks=sinks, sink_positions=positions,
                  sink_threshold=0.3, sink_min_rows=2, over="all")  # fmt: skip
    captured = explain_generation(model, Tok(), PROMPT, stream=False, **kwargs)
    streamed = explain_generation(
        model, Tok(), PROMPT, stream=True, completion_ids=captured.generated_ids, **kwargs
    )
    for m in ("raw", "rollout", "flow"):
        np.testing.assert_allclose(streamed.maps[m], captured.maps[m], atol=1e-12, rtol=0, err_msg=m)
        np.testing.assert_allclose(streamed.coverage[m], captured.coverage[m], atol=1e-12, rtol=0)
    np.testing.assert_allclose(streamed.logprobs, captured.logprobs, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(streamed.sinks, captured.sinks)
    np.testing.assert_array_equal(streamed.head_sinks, captured.head_sinks)


def test_the_stream_refuses_what_it_cannot_compute_and_is_not_used_for_it(model):
    with pytest.raises(ValueError, match="stream=True cannot compute this explanation: the stream computes"):
        explain_generation(model, Tok(), PROMPT, max_new_tokens=2, methods=["chefer"], stream=True)
    with pytest.raises(ValueError, match="receptive-field normalisation is"):
        explain_generation(model, Tok(), PROMPT, max_new_tokens=2, receptive_field="column", stream=True)
    with pytest.raises(ValueError, match="no uniform baseline of flow"):
        explain_generation(
            model, Tok(), PROMPT, max_new_tokens=2, methods=["flow"], receptive_field="uniform", stream=True
        )
    e = explain_generation(
        model, Tok(), PROMPT, max_new_tokens=2, receptive_field="uniform"
    )  # streamed: rollout
    assert e.maps["rollout"].shape == (2, len(PROMPT), 3)


@pytest.mark.parametrize("sinks", ["none", "diagonal", "auto"])
def test_the_stream_applies_the_uniform_receptive_field_as_the_capture_does(model, sinks):
    """Long prompts with the decoder corrections: the uniform baseline's rows in closed form
    (`uniform_rollout_rows`), no T x T matrix, equal to the captured path's."""
    kwargs = dict(max_new_tokens=4, methods=["raw", "rollout"], sinks=sinks, receptive_field="uniform",
                  sink_threshold=0.3, sink_min_rows=2, over="all")  # fmt: skip
    captured = explain_generation(model, Tok(), PROMPT, stream=False, **kwargs)
    streamed = explain_generation(
        model, Tok(), PROMPT, stream=True, completion_ids=captured.generated_ids, **kwargs
    )
    plain = explain_generation(model, Tok(), PROMPT, **{**kwargs, "receptive_field": "none"},
                               completion_ids=captured.generated_ids)  # fmt: skip
    for m in ("raw", "rollout"):
        np.testing.assert_allclose(streamed.maps[m], captured.maps[m], atol=1e-12, rtol=0, err_msg=m)
    assert not np.allclose(streamed.maps["rollout"], plain.maps["rollout"])  # the correction did something


def test_a_spec_object_asks_what_the_keywords_ask(model):
    """explain_generation(..., spec) equals the same options as keywords; keywords override the spec;
    an unknown option is refused in one line naming it."""
    from attnflow.generate import GenerationSpec

    spec = GenerationSpec(max_new_tokens=3, methods=("raw", "rollout"), sinks="none")
    by_spec = explain_generation(model, Tok(), PROMPT, spec)
    by_words = explain_generation(
        model, Tok(), PROMPT, max_new_tokens=3, methods=["raw", "rollout"], sinks="none"
    )
    assert by_spec.generated_ids == by_words.generated_ids
    for m in ("raw", "rollout"):
        np.testing.assert_array_equal(by_spec.maps[m], by_words.maps[m])
    assert explain_generation(model, Tok(), PROMPT, spec, max_new_tokens=2).n_generated == 2
    with pytest.raises(ValueError, match="unknown generation option 'max_tokens'"):
        explain_generation(model, Tok(), PROMPT, spec, max_tokens=2)
