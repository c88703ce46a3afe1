"""q, k, v, scores, mlp_post and ln_final_scale equal plain torch on the HF model, every family.

The reference wraps each family's own eager attention function (GPT-2's reordered one too)
in plain Python, no nnsight: it records the q, k and v each layer's attention receives, or
edits them. The scores are computed by hand from those q and k (the module's scale, the
config's soft-cap, a causal and sliding-window mask), and checked against HF's own
attention weights. Bounds as in test_sites: the capture runs three left-padded texts in one
batch, the reference one text alone; a wrong layer or head misses by orders of magnitude.
"""

from __future__ import annotations

import contextlib
import sys
import weakref

import pytest
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.interventions import Mean, Patch, Steer, Zero, site_means
from tests.conftest import PROMPTS
from tests.interventions.test_sites import MARGIN, site_bound
from tests.reference_sites import decoder_layers, hooked, site_reference, untouched_copy
from tests.tolerance import gradient_bound, logit_bound, misses, prob_bound, rounding_bound, within

LAYER = 1


def _attention_modules(hf, family: str) -> list:
    name = {"gpt2": "attn", "gpt_neox": "attention"}.get(family, "self_attn")
    return [getattr(layer, name) for layer in decoder_layers(hf, family)]


_PLAIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its copy


def plain_hf(model):
    """`untouched_copy` of the model's HF module, made once per model."""
    if model not in _PLAIN:
        _PLAIN[model] = untouched_copy(model.hf)
    return _PLAIN[model]


@contextlib.contextmanager
def recorded_attention(model, into: dict, edit=None):
    """Yield `plain_hf`; ``into[layer] = (q, k, v)`` as its attention functions receive them.

    ``edit(layer, q, k, v)`` returns the q, k, v the function then computes with.
    """
    hf = plain_hf(model)
    modules = _attention_modules(hf, model.family)
    layer_of = {id(m): i for i, m in enumerate(modules)}

    def wrap(original, bound=None):
        def attention(*args, **kwargs):
            module = bound if bound is not None else args[0]
            args = args if bound is not None else args[1:]
            q, k, v, *rest = args
            layer = layer_of[id(module)]
            if edit is not None:
                q, k, v = edit(layer, q.clone(), k.clone(), v.clone())
            into[layer] = (q.detach().clone(), k.detach().clone(), v.detach().clone())
            head = () if bound is not None else (module,)
            return original(*head, q, k, v, *rest, **kwargs)

        return attention

    library = sys.modules[type(modules[0]).__module__]
    original = library.eager_attention_forward
    library.eager_attention_forward = wrap(original)
    reordered = getattr(model.hf.config, "reorder_and_upcast_attn", False)
    for m in modules if reordered else ():  # GPT-2's own eager attention method
        m._upcast_and_reordered_attn = wrap(type(m)._upcast_and_reordered_attn.__get__(m), m)
    try:
        yield hf
    finally:
        library.eager_attention_forward = original
        for m in modules if reordered else ():
            del m._upcast_and_reordered_attn


def call_reference(model, ids: list[int]) -> dict:
    """``{layer: (q, k, v)}`` of one text alone, ``[n, U, hd]`` float32."""
    into: dict = {}
    with recorded_attention(model, into) as hf, torch.no_grad():
        hf(torch.tensor([ids]))
    return {layer: tuple(x[0].transpose(0, 1).float() for x in qkv) for layer, qkv in into.items()}


def scores_reference(model, q: torch.Tensor, k: torch.Tensor, layer: int) -> torch.Tensor:
    """Hand-computed pre-softmax scores ``[H, n, n]`` from one text's q, k ``[n, U, hd]``."""
    config = model.hf.config
    module = _attention_modules(model.hf, model.family)[layer]
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * module.scaling
    cap = getattr(config, "attn_logit_softcapping", None)
    if cap:
        scores = cap * torch.tanh(scores / cap)
    n = q.shape[0]
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = key <= query
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if window and (types is None or types[layer] == "sliding_attention"):
        allowed &= query - key < window
    return scores.masked_fill(~allowed, float("-inf"))


def _final_norm_input(model, ids: list[int]) -> torch.Tensor:
    """The final norm's input ``[n, d]`` of one text, from a plain forward pre-hook."""
    path = {"gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm"}
    norm = model.hf.get_submodule(path.get(model.family, "model.norm"))
    found: list = []
    handle = norm.register_forward_pre_hook(lambda mod, args: found.append(args[0].detach()))
    with torch.no_grad():
        model.hf(torch.tensor([ids]))
    handle.remove()
    return found[0][0].float()


def _normaliser(model, x: torch.Tensor) -> torch.Tensor:
    """``[n, 1]`` by hand: sqrt(mean(x^2) + eps), centred for a LayerNorm; eps from the config."""
    config = model.hf.config
    eps = {
        "gpt2": getattr(config, "layer_norm_epsilon", None),
        "gpt_neox": getattr(config, "layer_norm_eps", None),
        "olmo": 1e-5,  # OlmoLayerNorm's forward hard-codes it
    }.get(model.family) or config.rms_norm_eps
    x = x.double()
    if model.family in ("gpt2", "gpt_neox", "olmo"):  # LayerNorms centre first
        x = x - x.mean(-1, keepdim=True)
    return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt().float()


def _check_scores(model, got: torch.Tensor, ref: torch.Tensor, layer: int, ids) -> None:
    """Masked cells -inf in both, the rest within the bound; a wrong head misses it."""
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    finite = torch.isfinite(ref)
    bound = rounding_bound(
        magnitude=float(ref[finite].abs().max()), width=model.d_model, depth=layer + 2
    )
    assert within(got[finite], ref[finite].float(), bound)
    wrong = ref.roll(1, dims=0)  # another head's scores
    assert misses(got[finite], wrong[finite].float(), bound) > MARGIN
    with torch.no_grad():  # the hand computation is the model's: HF's own weights
        weights = model.hf(torch.tensor([ids]), output_attentions=True).attentions[layer][0]
    assert within(ref.softmax(-1).float(), weights, prob_bound(model))


def test_q_k_v_scores_and_mlp_post_equal_plain_torch_with_a_margin(tiny):
    got = tiny.capture(PROMPTS, sites=["q", "k", "v", "scores", "mlp_post"])
    for i, text in enumerate(PROMPTS):
        ids = tiny.tokenize(text)
        calls = call_reference(tiny, ids)
        for layer in range(tiny.n_layers):
            for j, site in enumerate(("q", "k", "v")):
                ref = calls[layer][j]
                value = got[i][site][layer]
                assert value.shape == ref.shape  # [n, H or H_kv, hd]
                bound = site_bound(tiny, ref, layer)
                assert within(value, ref, bound), (site, layer)
                other = calls[(layer + 1) % tiny.n_layers][j]  # the same site, a layer off
                assert misses(value, other, bound) > MARGIN, (site, layer)
                if site == "q":  # another head of the same layer
                    assert misses(value, ref.roll(1, dims=1), bound) > MARGIN
            q, k, _ = calls[layer]
            _check_scores(
                tiny, got[i]["scores"][layer], scores_reference(tiny, q, k, layer), layer, ids
            )
            ref = site_reference(tiny, ids, "mlp_post", layer)
            bound = site_bound(tiny, ref, layer)
            assert within(got[i]["mlp_post"][layer], ref, bound)
            wrong = site_reference(tiny, ids, "mlp_post", (layer + 1) % tiny.n_layers)
            assert misses(got[i]["mlp_post"][layer], wrong, bound) > MARGIN


def test_ln_final_scale_is_the_final_norms_normaliser(tiny):
    got = tiny.capture(PROMPTS, sites="ln_final_scale", layers=[0])
    last = tiny.n_layers - 1
    for i, text in enumerate(PROMPTS):
        ids = tiny.tokenize(text)
        ref = _normaliser(tiny, _final_norm_input(tiny, ids))
        value = got[i]["ln_final_scale"][last]
        assert value.shape == ref.shape == (len(ids), 1)
        bound = rounding_bound(magnitude=float(ref.abs().max()), width=tiny.d_model, depth=last + 2)
        assert within(value, ref, bound)
        wrong = _normaliser(tiny, site_reference(tiny, ids, "resid_pre", last))  # a layer off
        assert misses(value, wrong, bound) > MARGIN


def test_q_is_after_rotary(tiny_layout):
    """TransformerLens' hook_q is before rotary; bindscope's q is after it (TL's rot_q)."""
    model = tiny_layout
    if model.family not in ("llama", "gpt_neox"):
        pytest.skip("a family whose q projection's output is q before rotary")
    ids = model.tokenize(PROMPTS[2])
    got = model.capture([PROMPTS[2]], sites="q", layers=[LAYER])[0]["q"][LAYER]
    path = "attention.query_key_value" if model.family == "gpt_neox" else "self_attn.q_proj"
    found: list = []
    module = decoder_layers(model.hf, model.family)[LAYER].get_submodule(path)
    handle = module.register_forward_hook(lambda mod, args, out: found.append(out[0].detach()))
    with torch.no_grad():
        model.hf(torch.tensor([ids]))
    handle.remove()
    hd = model.head_dim
    if model.family == "gpt_neox":  # per head [q | k | v]
        raw = found[0].view(len(ids), model.n_heads, 3 * hd)[..., :hd]
    else:
        raw = found[0].view(len(ids), model.n_heads, hd)
    bound = site_bound(model, raw, LAYER)
    assert within(got[0], raw[0], bound)  # position 0: the rotation is the identity
    assert misses(got[1:], raw[1:], bound) > MARGIN  # later positions are rotated


def _hand_logits(model, texts, edit) -> list[torch.Tensor]:
    out = []
    for text in texts:
        with recorded_attention(model, {}, edit) as hf, torch.no_grad():
            out.append(hf(torch.tensor([model.tokenize(text)])).logits[0].float())
    return out


def _zero_query(head: int):
    def edit(layer, q, k, v):
        if layer == LAYER:
            q[:, head] = 0
        return q, k, v

    return edit


def test_zero_on_a_query_head_equals_the_hand_hooked_run(tiny):
    got = tiny.logits(PROMPTS, intervene=Zero([(LAYER, 2)], site="q"))
    bound = logit_bound(tiny, PROMPTS)
    for value, ref, wrong in zip(
        got,
        _hand_logits(tiny, PROMPTS, _zero_query(2)),
        _hand_logits(tiny, PROMPTS, _zero_query(3)),
    ):
        assert within(value, ref, bound)
        assert misses(value, wrong, bound) > MARGIN  # the wrong head


def _zero_neurons(model, neurons, texts) -> list[torch.Tensor]:
    def pre(x):
        x = x.clone()
        x[..., neurons] = 0
        return x

    out = []
    for text in texts:
        with hooked(model.hf, model.family, "mlp_post", LAYER, edit=pre), torch.no_grad():
            out.append(model.hf(torch.tensor([model.tokenize(text)])).logits[0].float())
    return out


def test_zero_on_neurons_equals_the_hand_hooked_run(tiny):
    got = tiny.logits(PROMPTS, intervene=Zero([(LAYER, 5), (LAYER, 17)], site="mlp_post"))
    bound = logit_bound(tiny, PROMPTS)
    refs = _zero_neurons(tiny, [5, 17], PROMPTS)
    wrongs = _zero_neurons(tiny, [6, 18], PROMPTS)
    for value, ref, wrong in zip(got, refs, wrongs):
        assert within(value, ref, bound)
        assert misses(value, wrong, bound) > MARGIN


def test_patch_steer_and_mean_at_k_v_and_neurons(tiny_layout):
    """Patch a kv head from a source, steer v, mean-ablate neurons: each equals its hand run."""
    model = tiny_layout
    ids = model.tokenize(PROMPTS[2])
    source = list(ids)
    source[3], source[4] = ids[4], ids[3]
    donor = call_reference(model, source)[LAYER][1]  # [n, H_kv, hd]
    vector = torch.randn(
        model.n_kv_heads * model.head_dim, generator=torch.Generator().manual_seed(0)
    )
    means = site_means(model, PROMPTS[:2], "mlp_post", [LAYER])

    def edit(layer, q, k, v):
        if layer == LAYER:
            k[:, 0] = donor[:, 0].to(k.dtype)
            v += vector.view(model.n_kv_heads, 1, model.head_dim).to(v.dtype)
        return q, k, v

    def mean_neurons(x):
        x = x.clone()
        x[..., :8] = means.means[LAYER][:8]
        return x

    spec = [
        Patch([(LAYER, 0)], [source], site="k"),
        Steer("v", LAYER, vector),
        Mean([(LAYER, n) for n in range(8)], site="mlp_post", means=means),
    ]
    got = model.logits([ids], intervene=spec)[0]
    hooks = hooked(plain_hf(model), model.family, "mlp_post", LAYER, edit=mean_neurons)
    with hooks, recorded_attention(model, {}, edit) as hf, torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    bound = logit_bound(model, [PROMPTS[2]])
    assert within(got, ref, bound)
    assert misses(got, model.logits([ids], intervene=spec[:2])[0], bound) > MARGIN


def test_capture_all_is_every_site_and_the_final_scale(tiny_layout):
    got = tiny_layout.capture(PROMPTS[:1], sites="all")[0]
    assert list(got) == [*tiny_layout.sites, "ln_final_scale"]
    assert all(len(got[s]) == tiny_layout.n_layers for s in tiny_layout.sites)


def test_kv_head_maps_query_heads_to_the_kv_heads_of_k(tiny):
    """``model.kv_head`` (the weights' mapping) is the one the captured k and scores follow."""
    groups = list(tiny.kv_head)
    assert groups == sorted(groups) and set(groups) == set(range(tiny.n_kv_heads))
    ids = tiny.tokenize(PROMPTS[0])
    got = tiny.capture(PROMPTS[:1], sites=["q", "k", "scores"], layers=[LAYER])[0]
    # head h's scores are its q against kv head kv_head[h]: the captured q and k, grouped
    # by the mapping, give the captured scores
    mapped = scores_reference(tiny, got["q"][LAYER], got["k"][LAYER][:, groups], LAYER)
    _check_scores(tiny, got["scores"][LAYER], mapped, LAYER, ids)


def test_what_cannot_be_edited_or_computed_is_refused(tiny_layout):
    model = tiny_layout
    with pytest.raises(InterventionError, match="scores are computed from q and k"):
        model.logits(PROMPTS, intervene=Zero("scores", layers=[0]))
    with pytest.raises(InterventionError, match="scores are computed from q and k"):
        model.logits(PROMPTS, intervene=Steer("scores", 0, torch.ones(4)))
    with pytest.raises(InterventionError, match="final norm's normaliser"):
        model.logits(PROMPTS, intervene=Zero("ln_final_scale", layers=[0]))
    with pytest.raises(InterventionError, match=f"layer 0 kv head={model.n_kv_heads} is not"):
        model.logits(PROMPTS, intervene=Zero([(0, model.n_kv_heads)], site="k"))
    twice = [
        Zero([(0, 1)], site="q"),
        Mean([(0, 1)], site="q", means={0: torch.zeros(model.n_heads, model.head_dim)}),
    ]
    with pytest.raises(InterventionError, match=r"q \(0, 1\) is in both"):
        model.logits(PROMPTS, intervene=twice)
    with pytest.raises(InterventionError, match="pick heads at head_out, pattern, q, k, v"):
        Zero([(0, 1)], site="resid_post")
    from bindscope.runners.attribution_patching import attribution_patching

    with pytest.raises(InputError, match="attribution at q is not estimated"):
        attribution_patching(
            model, PROMPTS, lambda logits: logits.sum(), intervene=Zero([(0, 1)], site="q")
        )


def test_a_model_without_a_scale_or_an_attention_call_refuses_scores(tiny_layout, monkeypatch):
    model = tiny_layout
    monkeypatch.setattr(model, "attention_scaling", (None,) * model.n_layers)
    with pytest.raises(InterventionError, match=f"{model.family}.*no `scaling`"):
        model.capture(PROMPTS, sites="scores")

    def no_call(self):
        raise RuntimeError("no attention_interface call found")

    monkeypatch.setattr(type(model), "knockout_site", property(no_call))
    with pytest.raises(InterventionError, match=f"{model.family}.*does not make"):
        model.capture(PROMPTS, sites="q")


def _neuron_gradient_estimates(model, text: str, a: int, b: int) -> torch.Tensor:
    """``sum_t (0 - x) * dM/dx`` per neuron of layer LAYER, by a plain hook and backward."""
    found: list = []

    def keep(x):
        x = x.detach().requires_grad_(True)
        found.append(x)
        return x

    hf = plain_hf(model)
    with hooked(hf, model.family, "mlp_post", LAYER, edit=keep):
        logits = hf(torch.tensor([model.tokenize(text)])).logits[0, -1]
    (logits[a] - logits[b]).backward()
    x = found[0]
    return (-x.detach() * x.grad)[0].sum(0).double()


def test_attribution_at_neurons_equals_the_hand_gradient(tiny_layout):
    from bindscope.runners.attribution_patching import LogitDifference, attribution_patching

    model = tiny_layout
    before = [p.requires_grad for p in model.hf.parameters()]
    model.hf.requires_grad_(True)
    neurons = [3, 9]
    spec = Zero([(LAYER, n) for n in neurons], site="mlp_post")
    try:
        got = attribution_patching(model, PROMPTS, LogitDifference(5, 7), intervene=spec)
    finally:
        for p, grad in zip(model.hf.parameters(), before):
            p.requires_grad_(grad)
    for text, found in zip(PROMPTS, got):
        estimate = found[("mlp_post", LAYER)][neurons]
        ref = _neuron_gradient_estimates(model, text, 5, 7)
        bound = gradient_bound(model, ref[neurons])
        assert within(estimate, ref[neurons], bound)
        assert misses(estimate, ref[[4, 10]], bound) > MARGIN  # the neurons beside them


def test_a_replaced_mlp_has_no_mlp_post(sp_tokenizer):
    from tests.runners.test_attribution_patching import linearised

    model = linearised("llama", sp_tokenizer)  # its last MLP is a module of its own
    assert "mlp_post" not in model.sites
    with pytest.raises(InterventionError, match="no site 'mlp_post'"):
        model.capture(PROMPTS, sites="mlp_post")
    with pytest.raises(InterventionError, match="carries no epsilon"):
        model.capture(PROMPTS, sites="ln_final_scale")  # its final norm is an identity


def test_generation_under_edits_of_q_and_v_equals_hands_with_the_kv_cache(tiny):
    """Every new token's query zeroed and value steered, the cache holding the edited values."""
    vector = torch.randn(
        tiny.n_kv_heads * tiny.head_dim, generator=torch.Generator().manual_seed(1)
    )
    vector = 4 * vector  # large enough to move the greedy tokens
    spec = [Zero([(LAYER, 1)], site="q"), Steer("v", LAYER, vector)]

    def edit(layer, q, k, v):
        if layer == LAYER:  # v holds every position so far here: each is steered once
            q[:, 1] = 0
            v += vector.view(tiny.n_kv_heads, 1, tiny.head_dim).to(v.dtype)
        return q, k, v

    got = tiny.generate_ids(PROMPTS, max_new_tokens=6, intervene=spec)
    plain = tiny.generate_ids(PROMPTS, max_new_tokens=6)
    eos = {tiny.tokenizer.eos_token_id, tiny.hf.generation_config.eos_token_id}
    for text, ids in zip(PROMPTS, got):
        prompt = torch.tensor([tiny.tokenize(text)])
        with recorded_attention(tiny, {}, edit) as hf, torch.no_grad():
            out = hf.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                do_sample=False, pad_token_id=tiny.tokenizer.pad_token_id,
            )  # fmt: skip
        new = out[0, prompt.shape[1] :].tolist()
        cut = next((i for i, token in enumerate(new) if token in eos), len(new))
        assert ids == new[:cut]
    assert got != plain  # the edits change what is generated


def test_hooks_at_q_and_neurons_see_heads_and_neurons_and_equal_the_specs(tiny_layout):
    """A ``Hook`` at q gets ``[1, n, H, hd]``, at mlp_post ``[1, n, d_mlp]``."""
    from bindscope.interventions import Hook

    model = tiny_layout
    shapes: list = []

    def zero_head(x):
        shapes.append(tuple(x.shape[2:]))
        x[:, :, 2] = 0

    def zero_neurons(x):
        shapes.append(tuple(x.shape[2:]))
        x[..., [5, 17]] = 0

    hooks = [Hook("q", LAYER, zero_head), Hook("mlp_post", LAYER, zero_neurons)]
    specs = [Zero([(LAYER, 2)], site="q"), Zero([(LAYER, 5), (LAYER, 17)], site="mlp_post")]
    for got, ref in zip(
        model.logits(PROMPTS, intervene=hooks), model.logits(PROMPTS, intervene=specs)
    ):
        assert torch.equal(got, ref)
    assert set(shapes) == {(model.n_heads, model.head_dim), (model.d_mlp,)}


def test_q_k_v_and_scores_under_sdpa_equal_eager(tiny_layout, byte_tokenizer, sp_tokenizer):
    """Where attention returns no weights (sdpa), the call's inputs and scores are the same."""
    from tests.conftest import build_tiny

    eager = tiny_layout
    tokenizer = sp_tokenizer if eager.family == "llama" else byte_tokenizer
    sdpa = build_tiny(eager.family, tokenizer, attn="sdpa", self_check=False)
    assert sdpa.attn_implementation == "sdpa"
    sites = ["q", "k", "v", "scores"]
    for got, ref in zip(sdpa.capture(PROMPTS, sites=sites), eager.capture(PROMPTS, sites=sites)):
        for site in sites:
            for layer in range(eager.n_layers):
                a, b = got[site][layer], ref[site][layer]
                assert torch.equal(torch.isinf(a), torch.isinf(b))
                finite = torch.isfinite(b)
                bound = site_bound(eager, b[finite], layer)  # another attention kernel below
                assert within(a[finite], b[finite], bound), (site, layer)
