"""Architecture knowledge as data: one row per model family."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from bindscope.errors import InterventionError, UnsupportedModelError

_LLAMA_LIKE_RENAME = {"embed_out": "lm_head"}

CALL_SITES: tuple[str, ...] = ("q", "k", "v", "scores")
HEAD_SITES: tuple[str, ...] = ("head_out", "q", "k", "v")
# Captured only, outside the layers: the final norm's normaliser (TL's ln_final.hook_scale).
FINAL_SITES: tuple[str, ...] = ("ln_final_scale",)


@dataclass(frozen=True)
class At:
    """Where one site is: ``module`` under a decoder layer of the renamed layout, and ``port``.

    ``port`` is ``"input"``, ``"output"`` (a tuple read at ``index``) or ``"call"``: the
    attention function's q, k, v at ``index`` 0, 1, 2, the scores from them at 3.
    """

    module: str
    port: str
    index: int = 0

    def __post_init__(self) -> None:
        if self.port not in ("input", "output", "call"):
            raise ValueError(f"At.port must be 'input', 'output' or 'call', not {self.port!r}")


@dataclass(frozen=True)
class Sites:
    """Where a family keeps each site (None: it has none); the defaults are the Llama layout."""

    resid_pre: At = At("", "input")
    q: At = At("self_attn", "call", 0)
    k: At = At("self_attn", "call", 1)
    v: At = At("self_attn", "call", 2)
    scores: At = At("self_attn", "call", 3)
    head_out: At = At("self_attn.o_proj", "input")
    pattern: At = At("self_attn", "output", 1)
    attn_out: At = At("self_attn", "output")
    resid_mid: At | None = At("post_attention_layernorm", "input")
    mlp_in: At | None = At("mlp", "input")
    mlp_post: At = At("mlp.down_proj", "input")
    mlp_out: At = At("mlp", "output")
    resid_post: At = At("", "output")

    def get(self, name: str) -> At | None:
        """The location of site ``name`` (one of ``SITE_NAMES``)."""
        return getattr(self, name)


# The sites every call can capture and intervene on, in a decoder layer's execution order;
# TransformerLens's names (the README's "Sites" says what each is).
SITE_NAMES: tuple[str, ...] = tuple(site.name for site in fields(Sites))


# Norms after attention and after the MLP, before each residual add (a "sandwich").
_OLMO2_SITES = Sites(
    attn_out=At("post_attention_layernorm", "output"),
    resid_mid=At("mlp", "input"),
    mlp_in=None,  # no norm before the MLP: its input is resid_mid
    mlp_out=At("post_feedforward_layernorm", "output"),
)
_GEMMA2_SITES = Sites(
    attn_out=At("post_attention_layernorm", "output"),
    resid_mid=At("pre_feedforward_layernorm", "input"),
    mlp_out=At("post_feedforward_layernorm", "output"),
)


@dataclass(frozen=True)
class Family:
    """How one architecture family is wrapped: ``rename=`` gives nnsight the uniform layout.

    The defaults are the Llama layout; ``final_norm_eps`` is for a final norm that does not
    carry its epsilon (None: read it).
    """

    name: str
    model_types: tuple[str, ...]
    rename: dict[str, str] = field(default_factory=lambda: dict(_LLAMA_LIKE_RENAME))
    notes: str = ""
    final_norm: str = "norm"
    sites: Sites = field(default_factory=Sites)
    final_norm_eps: float | None = None

    @property
    def attention_post_norm(self) -> str | None:
        """The norm applied to the attention output before the residual add, else ``None``."""
        attn_out = self.sites.attn_out.module
        return None if attn_out == self.sites.pattern.module else attn_out


FAMILIES: tuple[Family, ...] = (
    Family(
        "gpt_neox",
        ("gpt_neox",),
        {"gpt_neox": "model", "attention": "self_attn", "dense": "o_proj", "embed_out": "lm_head"},
        notes="Pythia; partial rotary; parallel residual",
        final_norm="final_layer_norm",
        sites=Sites(resid_mid=None, mlp_post=At("mlp.dense_4h_to_h", "input")),
    ),
    Family(
        "gpt2",
        ("gpt2",),
        {"transformer": "model", "h": "layers", "attn": "self_attn", "c_proj": "o_proj"},
        notes="absolute positions (left padding needs position_ids); CRFM checkpoints use "
        "scale_attn_by_inverse_layer_idx, which transformers honours",
        final_norm="ln_f",
        sites=Sites(resid_mid=At("ln_2", "input"), mlp_post=At("mlp.o_proj", "input")),
    ),
    Family(
        "olmo",
        ("olmo",),
        notes="clip_qkv clamps q/k/v",
        final_norm_eps=1e-5,  # OlmoLayerNorm's forward hard-codes it
    ),
    Family(
        "olmo2", ("olmo2",), notes="q/k norm before RoPE; norm after attention", sites=_OLMO2_SITES
    ),
    Family("smollm3", ("smollm3",), notes="GQA; NoPE layers"),
    Family("qwen2", ("qwen2",), notes="GQA; qkv bias"),
    Family("qwen3", ("qwen3",), notes="GQA; q/k norm"),
    Family("llama", ("llama",), notes="GQA; BOS depends on the tokenizer"),
    Family("mistral", ("mistral",), notes="GQA; sliding window optional"),
    Family("gemma", ("gemma",), notes="RMSNorm scale 1 + w; scaled embeds"),
    Family(
        "gemma2",
        ("gemma2",),
        notes="attention logit soft-capping; norms before and after attention",
        sites=_GEMMA2_SITES,
    ),
    Family(
        "gemma3",
        ("gemma3_text",),
        notes="q/k norm; sliding-window attention in most layers, full in the rest; "
        "norms before and after attention; scaled embeds",
        sites=_GEMMA2_SITES,  # the same sandwich norms as Gemma 2
    ),
    Family("phi3", ("phi3",), notes="fused qkv_proj; GQA"),
)

# Families added at run time with `register`; searched before the built-in rows.
_REGISTERED: list[Family] = []

REGISTER_HINT = (
    "To add one without editing bindscope: bindscope.families.register(Family(name, "
    "(model_type,), rename={...native: uniform...}, sites=Sites(...))), or pass "
    "load_model(..., family=Family(...)) for one model."
)


def register(family: Family) -> Family:
    """Add a family at run time (it wins over a built-in row for the same model_type)."""
    if not isinstance(family, Family):
        raise TypeError(f"register() takes a Family, not {type(family).__name__}")
    _REGISTERED[:] = [f for f in _REGISTERED if f.name != family.name]
    _REGISTERED.insert(0, family)
    return family


def families() -> tuple[Family, ...]:
    """Every family known now: registered ones first, then the built-in rows."""
    return (*_REGISTERED, *FAMILIES)


def family_for_config(config: Any, *, model_name: str = "model") -> Family:
    """Return the family row for a transformers config, or raise naming the class."""
    model_type = getattr(config, "model_type", None)
    for family in families():
        if model_type in family.model_types:
            return family
    architectures = getattr(config, "architectures", None) or [type(config).__name__]
    raise UnsupportedModelError(
        f"{model_name}: architecture {', '.join(architectures)} (model_type={model_type!r}) is not "
        f"supported. Supported families: {', '.join(f.name for f in families())}. " + REGISTER_HINT
    )


def standard_layout_family(hf_model: Any) -> Family | None:
    """A Llama-layout row for an unknown model with its module names (None: it lacks them)."""
    base = getattr(hf_model, "model", None)
    layers: Any = getattr(base, "layers", None)
    try:
        o_proj = layers[0].self_attn.o_proj
    except (AttributeError, IndexError, TypeError):
        return None
    if None in (o_proj, getattr(base, "norm", None), getattr(hf_model, "lm_head", None)):
        return None
    model_type = getattr(hf_model.config, "model_type", None) or type(hf_model).__name__
    return Family(
        str(model_type),
        (model_type,),
        notes="inferred from the standard Llama layout (no family row)",
    )


@dataclass(frozen=True)
class Dims:
    """Head geometry read from the config."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int = 0  # the hidden size: width of the residual stream
    d_mlp: int = 0  # the MLP's hidden width (mlp_post)


def dims_from_config(config: Any) -> Dims:
    """Read layer and head counts and the hidden size from any supported config."""
    n_heads = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    hidden = int(config.hidden_size)
    d_mlp = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
    d_mlp = int(d_mlp or 4 * hidden)  # GPT-2's n_inner=None means 4 x the hidden size
    return Dims(int(config.num_hidden_layers), n_heads, n_kv, int(head_dim), hidden, d_mlp)


def attention_windows(config: Any) -> tuple[int | None, ...]:
    """Each layer's sliding-window size (a query sees its last ``w`` keys), None for full.

    As transformers reads it: with ``layer_types``, only its ``sliding_attention`` layers.
    """
    n_layers = int(config.num_hidden_layers)
    window = getattr(config, "sliding_window", None)
    if not window:
        return (None,) * n_layers
    types = getattr(config, "layer_types", None)
    if types is None:
        return (int(window),) * n_layers
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


def site_names(sites: object, model_name: str) -> list[str]:
    """``sites=`` as a list: one name, or a list or tuple of names (else ``InterventionError``)."""
    if isinstance(sites, str):
        return [sites]
    if isinstance(sites, (list, tuple)):
        return list(sites)
    raise InterventionError(
        f"{model_name}: sites={sites!r} is not a site name or a list of them; pass e.g. "
        "sites=['resid_post']"
    )
