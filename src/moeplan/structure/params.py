"""Exact parameter counting: whole model, active per token, and per rank for a layout.

Counts follow the Hugging Face checkpoint tensors of each family (which Megatron Bridge maps one to
one onto Megatron-Core modules), e.g. for one standard GQA layer with SwiGLU:
``q: h·nh·d, k/v: h·ng·d each, o: nh·d·h, norms: 2h, MLP: 3·h·f``; MoE layers add a router ``h·E``
and ``E`` experts of ``3·h·f_e``. Megatron's own closed form is in
``megatron/training/theoretical_memory_usage.py`` (see ``megatron_facts.md`` §5.1, vendored in ``tests/data/reference``); ours is exact
per tensor and is cross-checked against megatron-core's ``GPTModel`` in ``tests/oracle``.

Per-rank sharding (Megatron-Core 0.16–0.20, ``megatron_facts.md`` §5.4): column/row-parallel
weights (attention projections, dense MLP, shared experts, GDN projections, vocab) are divided by
TP; norms, the router, MLA down-projections (``linear_q_down_proj``/``linear_kv_down_proj``), the
shared-expert gate and row-parallel biases are replicated; routed experts are divided by EP (whole
experts) and ETP (each expert's FC1/FC2). With TP > num_query_groups each rank keeps one KV group.
A latent MoE (``moe_latent_size``) has routed experts at the latent width and per MoE layer two
replicated latent projections, counted as the kind ``moe_latent_proj`` (:func:`latent_proj_params`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import cast

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec, PartialModelSpec, VisionSpec
from moeplan.structure import dsv4_shapes
from moeplan.structure.mamba_shapes import mamba_tp_params
from moeplan.structure.msa_shapes import msa_indexer_params

PARAM_KINDS = (
    "embedding",
    "output_layer",
    "attention",
    "norms",
    "dense_mlp",
    "router",
    "shared_experts",
    "routed_experts",
)


@dataclass(frozen=True)
class Shard:
    """Parameters of one module on one rank, split by how Megatron shards them.

    ``tp``: elements on this rank of TP-sharded weights; ``rep``: replicated elements;
    ``exp``: elements on this rank of routed-expert weights.
    """

    tp: int = 0
    rep: int = 0
    exp: int = 0

    @property
    def total(self) -> int:
        return self.tp + self.rep + self.exp

    def __add__(self, o: Shard) -> Shard:
        return Shard(self.tp + o.tp, self.rep + o.rep, self.exp + o.exp)


def _require(model: PartialModelSpec, *names: str) -> tuple[int, ...]:
    """The integer fields ``names`` of ``model``, in order.

    Raises:
        InputError: naming every one of them the model does not give.
    """
    missing = [n for n in names if getattr(model, n) is None]
    if missing:
        raise InputError(f"model.{missing[0]}", None, "a value: parameter counting needs " + ", ".join(missing))
    return tuple(getattr(model, n) for n in names)


#: the widths a linear-attention layer (Gated DeltaNet, Kimi Delta Attention) is counted from
LINEAR_WIDTHS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _linear_widths(model: PartialModelSpec) -> tuple[int, ...]:
    """A linear-attention layer's key heads, value heads, key and value head dims and conv taps
    (:data:`LINEAR_WIDTHS`). Raises InputError naming each one the model does not give."""
    return _require(model, *LINEAR_WIDTHS)


def _div(n: int, d: int, what: str) -> int:
    if n % d:
        raise InputError(what, n, f"a multiple of {d} to shard evenly")
    return n // d


# ----- attention -----------------------------------------------------------------------------


def attention_shard(model: ModelSpec, kind: str, tp: int = 1) -> dict[str, Shard]:
    """Attention parameters of one layer on one TP rank, split into ``attention`` and ``norms``.

    ``kind`` is ``full``/``sliding``/``chunked`` (softmax attention, GQA or MLA) or ``linear``
    (Gated DeltaNet). Returns a mapping kind → :class:`Shard`. Elements, exact.

    Raises:
        InputError: when a needed width is missing or a sharded dimension does not divide by TP.
    """
    h = model.hidden_size
    if kind == "none":  # the MLP-only layers of a Mamba hybrid
        return {}
    if kind == "mamba":  # the Mamba-2 mixer, counted with the token mixers (structure.mamba_shapes)
        return {"attention": Shard(tp=mamba_tp_params(model, tp))}
    if kind == "linear" and model.kimi_delta_attention:
        return kda_shard(model, tp)
    if kind == "linear":
        nk, nv, dk, dv, conv_k = _linear_widths(model)
        conv_ch = 2 * nk * dk + nv * dv
        # in_proj_qkvz (h → 2·nk·dk + 2·nv·dv), in_proj_ba (h → 2·nv), depthwise conv1d (no bias),
        # dt_bias and A_log (nv each), out_proj (nv·dv → h): all split by TP over heads.
        sharded = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + conv_ch * conv_k
        sharded += 2 * nv + nv * dv * h
        # gated RMSNorm over the value head dim: replicated.
        return {"attention": Shard(tp=_div(sharded, tp, "gated-deltanet heads vs TP"), rep=dv)}
    if model.multi_latent_attention:
        kv, qk_nope, rope, vd, nh = _require(
            model, "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "num_attention_heads"
        )
        qk = qk_nope + rope
        rep = h * (kv + rope) + kv  # kv down + norm
        sharded = kv * nh * (qk_nope + vd)  # kv up
        if model.q_lora_rank:
            rep += h * model.q_lora_rank + model.q_lora_rank  # q down + q norm
            sharded += model.q_lora_rank * nh * qk
        else:
            sharded += h * nh * qk
        sharded += nh * vd * h  # output projection
        if model.attention_output_gate:  # Kimi-K3's g_proj (h → nh·v_head_dim, column-parallel)
            sharded += h * nh * vd
        return {"attention": Shard(tp=_div(sharded, tp, "attention heads vs TP"), rep=rep)}
    # a full-attention layer of Gemma-4 has its own head dim and KV heads; with K = V Megatron Bridge
    # still builds the value rows of linear_qkv (its HF export drops them), so they are counted
    model = cast(ModelSpec, model.attention_widths(kind))
    nh, ng, d = _require(model, "num_attention_heads", "num_query_groups", "kv_channels")
    heads_rank = _div(nh, tp, "num_attention_heads vs TP")
    if ng % tp and tp % ng:
        raise InputError("num_query_groups vs TP", ng, f"a multiple or a divisor of TP={tp}")
    # linear_qkv is column-parallel over its whole output (q [+ gate] + k + v): megatron-core 0.16
    # stores (nh·d·(1|2) + 2·ng·d)/TP rows per rank even when TP > ng (measured with the oracle).
    qkv_out = _div(nh * d * (2 if model.attention_output_gate else 1) + 2 * ng * d, tp, "qkv width vs TP")
    sharded = h * qkv_out + heads_rank * d * h
    rep = 0
    if model.add_qkv_bias or model.add_bias_linear:
        sharded += qkv_out
    if model.add_bias_linear:
        rep += h  # row-parallel output bias is not split
    if model.qk_layernorm and model.qk_layernorm_full_dim:
        sharded += qk_norm_full_dim_rank(nh, ng, d, tp)
    elif model.qk_layernorm:
        rep += 2 * d
    if model.attention_sinks:
        sharded += heads_rank
    return {"attention": Shard(tp=sharded, rep=rep)}


def kda_shard(model: ModelSpec, tp: int = 1) -> dict[str, Shard]:
    """One Kimi Delta Attention mixer on one TP rank (elements, exact), as Megatron Bridge builds it
    (``models/kimi/kimi_k3_layers.py::KimiK3Attention._init_kda``, Bridge main 067f987, after v0.6.0).

    With nk key heads of d_k and nv value heads of d_v (Kimi-K3: 96 heads of 128 for both), split by TP
    over heads: ``q_proj`` / ``k_proj`` (h → nk·d_k each), ``v_proj`` and the output gate ``g_proj``
    (h → nv·d_v each), three short convolutions without bias (d_conv taps per channel: nk·d_k, nk·d_k and
    nv·d_v channels), the forget gate's up-projection ``f_b_proj`` (d_k → nk·d_k), ``b_proj`` (h → nv),
    ``A_log`` (nv), ``dt_bias`` (nk·d_k, one per gated channel) and ``o_proj`` (nv·d_v → h). Replicated:
    the forget gate's down-projection ``f_a_proj`` (h → d_k, ``parallel_mode="duplicated"``) and the
    gated RMSNorm ``o_norm`` (d_v). Against Gated DeltaNet (:func:`attention_shard`): a per-channel
    decay through a d_k bottleneck instead of one ``alpha`` per head, and ``dt_bias`` per channel.
    The Hugging Face checkpoint pads each ``A_log`` to 128 entries with zeros, which Bridge drops on
    import (32 per layer for Kimi-K3, not counted).

    Raises:
        InputError: when a width is missing or the heads do not divide by TP.
    """
    h = model.hidden_size
    nk, nv, dk, dv, conv_k = _linear_widths(model)
    qk, v = nk * dk, nv * dv
    sharded = h * (2 * qk + 2 * v) + (2 * qk + v) * conv_k  # q, k, v, g_proj; three convolutions
    sharded += dk * qk + h * nv + nv + qk + v * h  # f_b_proj, b_proj, A_log, dt_bias, o_proj
    return {"attention": Shard(tp=_div(sharded, tp, "Kimi Delta Attention heads vs TP"), rep=h * dk + dv)}


def attn_res_params(model: ModelSpec, layer: int) -> int:
    """Attention-residual parameters of decoder layer ``layer`` (0-based; elements, exact; 0 without
    ``attn_res_block_size``): per layer ``self_attention_res_norm`` and ``mlp_res_norm`` (RMSNorm(h))
    and ``self_attention_res_proj`` and ``mlp_res_proj`` (h → 1, no bias): 4·h; the last layer adds
    ``output_attn_res_norm`` and ``output_attn_res_proj``: 2·h. All replicated over TP (Megatron Bridge
    ``kimi_k3_layers.py::KimiK3TransformerLayer``, main 067f987)."""
    if not model.attn_res_block_size:
        return 0
    return 4 * model.hidden_size + (2 * model.hidden_size if layer == model.num_layers - 1 else 0)


def qk_norm_full_dim_rank(nh: int, ng: int, d: int, tp: int) -> int:
    """Elements on one TP rank of a QK norm over the whole layer (MiniMax-M2), exact.

    Megatron Bridge ``minimax_m2_provider.py`` (v0.6.0): ``FullDimQNorm`` holds ``nh/TP · d`` of the
    ``nh·d`` Q-norm weight; ``FullDimKNorm`` splits the ``ng·d`` K-norm weight over ``min(TP, ng)``
    shards (``_get_k_norm_layout``: ``ng·d / TP`` when ng ≥ TP, else one group's ``d``, replicated
    over TP / ng ranks). At TP = 1: ``(nh + ng)·d``.

    Raises:
        InputError: when ng and TP do not divide one another.
    """
    if ng % tp and tp % ng:
        raise InputError("num_query_groups vs TP", ng, f"a multiple or a divisor of TP={tp}")
    return nh // tp * d + ng * d // min(tp, ng)


# ----- MLP / MoE -----------------------------------------------------------------------------


def mlp_shard(model: ModelSpec, moe: bool, tp: int = 1, ep: int = 1, etp: int = 1) -> dict[str, Shard]:
    """MLP parameters of one layer on one rank: dense MLP, or router + shared + routed experts.

    Elements, exact. SwiGLU (``gated_linear_unit``) has FC1 of 2·f, else f.

    Raises:
        InputError: when experts do not divide by EP or widths by TP/ETP.
    """
    h = model.hidden_size
    glu = 2 if model.gated_linear_unit else 1
    if not moe:
        (f,) = _require(model, "ffn_hidden_size")
        n = h * f * glu + f * h
        return {"dense_mlp": Shard(tp=_div(n, tp, "ffn_hidden_size vs TP"))}
    e, fe = _require(model, "num_moe_experts", "moe_ffn_hidden_size")
    local = _div(e, ep, "num_moe_experts vs EP")
    w = model.moe_token_width  # the experts' input / output width: hidden, or the latent of a latent MoE
    per_expert_split = w * fe * glu + fe * w + (fe * glu if model.moe_expert_bias else 0)
    per_expert_rep = w if model.moe_expert_bias else 0  # FC2 bias is not split by ETP
    routed = Shard(exp=local * (_div(per_expert_split, etp, "moe_ffn_hidden_size vs ETP") + per_expert_rep))
    router = h * e + (e if model.moe_router_bias else 0) + (e if model.moe_router_expert_bias else 0)
    if model.moe_router_scales:  # Gemma-4: the router's input scale (h) and per-expert scale (E)
        router += h + e
    out = {"router": Shard(rep=router), "routed_experts": routed}
    if model.moe_latent_size:
        out["moe_latent_proj"] = Shard(rep=latent_proj_params(model))
    fs = model.moe_shared_expert_intermediate_size
    if fs:
        n = h * fs * glu + fs * h
        out["shared_experts"] = Shard(
            tp=_div(n, tp, "shared expert width vs TP"), rep=h if model.moe_shared_expert_gate else 0
        )
    return out


def latent_proj_params(model: ModelSpec) -> int:
    """Parameters of one MoE layer's latent projections (elements, exact; 0 without ``moe_latent_size``).

    megatron-core ``transformer/moe/moe_layer.py`` (core_v0.16.0 to dev) builds, per MoE layer, a
    ``fc1_latent_proj`` (hidden → latent) and a ``fc2_latent_proj`` (latent → hidden) as TE linears in
    ``parallel_mode="duplicated"`` with ``is_expert=False``: every TP rank holds them whole (not split
    by TP, EP or ETP), they are dense parameters for the optimizer, and they carry a bias only with
    ``add_bias_linear`` (latent + hidden elements). No norm. Nemotron-3 Super / Ultra
    (HF ``mixer.fc1_latent_proj`` / ``mixer.fc2_latent_proj``, Megatron Bridge ``nemotron_h_bridge.py``):
    ``2·h·latent``.
    """
    lat = model.moe_latent_size
    if not lat:
        return 0
    h = model.hidden_size
    norm = lat if model.moe_latent_norm else 0  # Kimi-K3's routed_expert_norm (KimiK3MoELayer)
    return 2 * h * lat + ((lat + h) if model.add_bias_linear else 0) + norm


def indexer_params(model: ModelSpec) -> int:
    """Parameters of one DeepSeek Sparse Attention lightning indexer (elements, exact; 0 without DSA).

    megatron-core ``transformer/experimental_attention_variant/dsa.py::DSAIndexer`` (core_v0.16.0 to
    dev): ``linear_wq_b`` (q_lora_rank → heads·head_dim; hidden when there is no q LoRA),
    ``linear_wk`` (hidden → head_dim), ``k_norm`` (a LayerNorm over head_dim: weight and bias),
    ``linear_weights_proj`` (hidden → heads); no biases. All built ``parallel_mode="duplicated"``:
    every TP rank holds them whole (gradients averaged over TP), so they count as replicated. HF
    DeepSeek-V3.2 / GLM-5: ``indexer.wq_b``, ``wk``, ``k_norm``, ``weights_proj``, the same shapes.
    """
    if not model.has_dsa:
        return 0
    h = model.hidden_size
    n, d = model.given("dsa_indexer_n_heads"), model.given("dsa_indexer_head_dim")
    q_in = model.q_lora_rank or h
    return q_in * n * d + h * d + 2 * d + h * n


_SHARD_CACHE: dict[tuple, tuple[ModelSpec, dict]] = {}


def layer_shard(model: ModelSpec, layer: int, tp: int = 1, ep: int = 1, etp: int = 1) -> dict[str, Shard]:
    """All parameters of decoder layer ``layer`` (0-based) on one rank, by kind (memoised per layer
    kind: the planner asks for the same shards thousands of times)."""
    _require(model, "hidden_size", "num_layers")
    kinds = model.attention_kinds or ("full",) * model.num_layers
    moe_layers = model.moe_layers or (False,) * model.num_layers
    has_mlp = model.layer_has_mlp(layer)
    indexer = model.layer_has_indexer(layer)
    res = attn_res_params(model, layer)
    msa = model.layer_is_msa(layer)
    key = (id(model), kinds[layer], moe_layers[layer], has_mlp, tp, ep, etp, indexer, _dsv4_key(model, layer), res, msa)
    hit = _SHARD_CACHE.get(key)
    if hit is not None and hit[0] is model:
        return dict(hit[1])
    if len(_SHARD_CACHE) > 20000:
        _SHARD_CACHE.clear()
    out = _layer_shard(model, kinds[layer], moe_layers[layer], tp, ep, etp, has_mlp)
    if indexer:
        out["dsa_indexer"] = Shard(rep=indexer_params(model))
    if msa:  # MSA's index branch, modelled whole on every TP rank as megatron-core builds DSA's indexer
        out["msa_indexer"] = Shard(rep=msa_indexer_params(model))
    if res:
        out["attn_res"] = Shard(rep=res)
    if model.is_dsv4:
        out.update(_dsv4_parts(model, layer, tp, "routed_experts" in out))
    _SHARD_CACHE[key] = (model, out)
    return dict(out)


def _dsv4_key(model: ModelSpec, layer: int) -> tuple[int, bool] | None:
    """What makes DeepSeek-V4 layers differ: the compression ratio and hash routing (None otherwise)."""
    if not model.is_dsv4:
        return None
    return dsv4_shapes.layer_ratio(model, layer), dsv4_shapes.is_hash_layer(model, layer)


def _dsv4_parts(model: ModelSpec, layer: int, tp: int, moe: bool) -> dict[str, Shard]:
    """A DeepSeek-V4 layer's own shards (``moeplan.structure.dsv4_shapes``): its attention by ratio
    (replacing MLA's), two hyper-connection modules, and a hash-routed layer's router without the
    expert bias (``layer = num_layers``: an MTP layer, never hash-routed)."""
    split, rep = dsv4_shapes.attention_params(model, dsv4_shapes.layer_ratio(model, layer))
    out = {"attention": Shard(tp=split // tp, rep=rep)}
    hc = 2 * dsv4_shapes.hc_module_params(model)
    if hc:
        out["hyper_connections"] = Shard(rep=hc)
    if moe and dsv4_shapes.is_hash_layer(model, layer):
        e = model.moe_experts
        out["router"] = Shard(rep=model.hidden_size * e + (e if model.moe_router_bias else 0))
    return out


def _layer_shard(
    model: ModelSpec, kind: str, moe: bool, tp: int, ep: int, etp: int, has_mlp: bool = True
) -> dict[str, Shard]:
    """One layer's shards; a hybrid-pattern layer (one symbol: a mixer or an MLP) has one pre-norm."""
    out = dict(attention_shard(model, kind, tp))
    if has_mlp:
        out.update(mlp_shard(model, moe, tp, ep, etp))
    hybrid = model.hybrid_layer_pattern is not None
    # input_layernorm + pre_mlp_layernorm, and Gemma-4's post-attention / MoE-side norms
    out["norms"] = Shard(rep=((1 if hybrid else 2) + model.extra_layer_norms) * model.hidden_size)
    return out


def mtp_shard(model: ModelSpec, tp: int = 1, ep: int = 1, etp: int = 1) -> Shard:
    """One MTP block (DeepSeek-V3 §2.2; Megatron ``MultiTokenPredictionLayer``): enorm, hnorm,
    eh_proj (2h → h, TP-sharded), one decoder layer (MoE when the model's last layer is MoE, full
    attention) and its final norm. Embedding and output head are shared with the main model.

    A hybrid model's block (``mtp_layer_pattern``; megatron-core ``MultiTokenPredictionLayer`` with a
    ``MambaStack`` of that pattern, core_v0.17.0 to dev) has enorm, hnorm, eh_proj and final_layernorm
    around one hybrid layer per pattern symbol, each with its own pre-norm, built like the decoder's
    layers of that symbol (:attr:`~moeplan.inputs.model_spec.PartialModelSpec.mtp_stand_ins`)."""
    h = model.hidden_size
    if model.mtp_layer_pattern is not None:
        s = Shard(tp=_div(2 * h * h, tp, "hidden_size vs TP"), rep=3 * h)
        for li in model.mtp_stand_ins:
            for part in layer_shard(model, li, tp, ep, etp).values():
                s = s + part
        return s
    moe = bool(model.moe_layers and model.moe_layers[-1])
    s = Shard(tp=_div(2 * h * h, tp, "hidden_size vs TP"), rep=3 * h)
    if model.is_dsv4:  # e_proj + h_proj (h·h each), the layer at the MTP ratio, its own hc head
        s = s + Shard(rep=dsv4_shapes.hc_head_params(model))
        parts = _dsv4_parts(model, model.num_layers, tp, False)
    else:
        parts = attention_shard(model, "full", tp)
    for part in parts.values():
        s = s + part
    for part in mlp_shard(model, moe, tp, ep, etp).values():
        s = s + part
    if model.has_dsa:  # MTP layers number from 1 again: the first computes its own top-k
        s = s + Shard(rep=indexer_params(model))
    return s + Shard(rep=2 * h)


def vision_params(v: VisionSpec) -> int:
    """Parameters of a vision tower (ViT + mergers / projector), elements, exact per HF modules.

    Qwen3-VL / Qwen3.5 (``modeling_qwen3_vl_moe``): Conv3d patch embed with bias, learned position
    table, ``depth`` blocks (LayerNorm ×2 with bias, qkv and proj with bias, MLP fc1/fc2 with bias),
    a patch merger (LayerNorm(h), fc1 4h→4h, fc2 4h→out) and one DeepStack merger per index
    (LayerNorm(4h), same fc1/fc2). MoonViT (Kimi-K2.5, ``modeling_kimi_k25.py``): the same blocks
    (``wqkv`` / ``wo`` / ``mlp.fc0`` / ``mlp.fc1`` with biases), a Conv2d patch embed with bias and a
    learned 2-D position table, a final LayerNorm(h) and the ``PatchMergerMLP`` (the merger above). Llama 4 (``modeling_llama4``): unfold-conv patch linear (no bias),
    class token, position table, pre/post LayerNorm, encoder layers with biased q/k/v/o and fc1/fc2,
    pixel-shuffle MLP (no bias) and the multimodal projector (no bias).
    """
    h, f = v.hidden_size, v.intermediate_size
    block = 2 * (2 * h) + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    if v.kind in ("qwen3_vl", "moonvit"):
        patch = v.in_channels * v.temporal_patch_size * v.patch_size**2 * h + h
        pos = v.num_position_embeddings * h
        m = v.spatial_merge_size**2
        merger = 2 * h + (h * m) * (h * m) + h * m + (h * m) * v.out_hidden_size + v.out_hidden_size
        deep = 2 * h * m + (h * m) * (h * m) + h * m + (h * m) * v.out_hidden_size + v.out_hidden_size
        final_norm = 2 * h if v.kind == "moonvit" else 0
        return patch + pos + v.depth * block + final_norm + merger + len(v.deepstack_visual_indexes) * deep
    patch = v.in_channels * v.patch_size**2 * h
    grid = (v.image_size // v.patch_size) ** 2 + 1
    cls_pos = h + grid * h
    norms = 2 * (2 * h)
    adapter = f * v.projector_input_dim + v.projector_output_dim * v.projector_output_dim
    projector = v.out_hidden_size * v.text_hidden_size
    return patch + cls_pos + norms + v.depth * block + adapter + projector


def vision_shard(v: VisionSpec, tp: int = 1) -> Shard:
    """Vision tower on one rank of the first pipeline stage (Megatron Bridge builds it there).

    Megatron-style TP inside the ViT: QKV and FC1 (column-parallel, weights and biases) and the
    attention projection and FC2 weights (row-parallel) are split by TP; norms, row-parallel biases,
    patch embedding and position tables are replicated; merger/projector FC1 is column- and FC2
    row-parallel. Elements; the split of the tower itself is our reading of Megatron's ViT, not
    checked against a build. A tower built from the Hugging Face modules (MoonViT,
    :attr:`~moeplan.inputs.model_spec.VisionSpec.tp_sharded` False) is whole on every TP rank.

    Raises:
        InputError: when ViT widths do not divide by TP.
    """
    total = vision_params(v)
    if not v.tp_sharded:
        return Shard(rep=total)
    h, f = v.hidden_size, v.intermediate_size
    col = h * 3 * h + 3 * h + h * f + f  # qkv + fc1 (weights and biases)
    row = h * h + f * h  # proj + fc2 weights
    split = v.depth * (col + row)
    if v.kind == "qwen3_vl":
        m = v.spatial_merge_size**2
        merger = (h * m) * (h * m) + h * m + (h * m) * v.out_hidden_size
        split += merger * (1 + len(v.deepstack_visual_indexes))
    return Shard(tp=_div(split, tp, "vision tower widths vs TP"), rep=total - split)


# ----- whole-model counts ---------------------------------------------------------------------


@dataclass(frozen=True)
class ParamCounts:
    """Whole-model parameter counts (elements), by kind, with derived totals.

    ``by_kind`` covers the decoder stack, embedding and output layer (``PARAM_KINDS``, plus
    ``moe_latent_proj`` for a latent MoE); ``mtp`` and
    ``vision`` are reported apart. ``routed_active`` is the routed-expert share used per token
    (top-k of E experts per MoE layer).
    """

    by_kind: dict[str, int]
    mtp: int
    vision: int
    routed_active: int
    per_layer_kind: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Language-model parameters without MTP and vision tower."""
        return sum(self.by_kind.values())

    def total_with(self, mtp: bool = False, vision: bool = False) -> int:
        return self.total + (self.mtp if mtp else 0) + (self.vision if vision else 0)

    def active(
        self, input_embedding: bool = True, mtp: bool = False, vision: bool = False, output_layer: bool = True
    ) -> int:
        """Parameters used per token: all but the non-selected routed experts.

        ``input_embedding=False`` drops the embedding table (a lookup, not compute), as DeepSeek
        and OpenAI count "activated" parameters.
        """
        n = self.total - self.by_kind["routed_experts"] + self.routed_active
        if not input_embedding:
            n -= self.by_kind["embedding"]
        if not output_layer:
            n -= self.by_kind["output_layer"]
        return n + (self.mtp if mtp else 0) + (self.vision if vision else 0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total"] = self.total
        d["active"] = self.active()
        return d


def count_params(model: PartialModelSpec) -> ParamCounts:
    """Exact parameter counts of ``model`` (elements), unpadded vocabulary.

    Raises:
        InputError: when the model lacks a width needed for counting.
    """
    _require(model, "hidden_size", "num_layers", "vocab_size")
    model = model.completed()
    by = dict.fromkeys(PARAM_KINDS, 0)
    per_layer_kind: dict[str, int] = {}
    routed_active = 0
    for i in range(model.num_layers):
        parts = layer_shard(model, i)
        for k, s in parts.items():
            by[k] = by.get(k, 0) + s.total
        if "routed_experts" in parts:
            routed_active += parts["routed_experts"].total * model.moe_topk // model.moe_experts
        kinds = model.attention_kinds or ("full",) * model.num_layers
        key = f"{kinds[i]}+{'moe' if model.moe_layers and model.moe_layers[i] else 'dense'}"
        per_layer_kind[key] = per_layer_kind.get(key, 0) + sum(s.total for s in parts.values())
    h, v = model.hidden_size, model.vocab_size
    by["embedding"] = v * h
    by["output_layer"] = v * h if model.untie_embeddings_and_output_weights else 0
    by["norms"] += h  # final norm
    if model.is_dsv4 and model.num_residual_streams > 1:
        by["hyper_connection_head"] = dsv4_shapes.hc_head_params(model)  # the block's stream contraction
    mtp = model.mtp_weight_sets * mtp_shard(model).total if model.mtp_num_layers else 0
    vision = vision_params(model.vision) if model.vision else 0
    return ParamCounts(by_kind=by, mtp=mtp, vision=vision, routed_active=routed_active, per_layer_kind=per_layer_kind)


def padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = 128) -> int:
    """Vocabulary padded as Megatron pads it: to a multiple of ``divisible_by · TP``
    (``megatron/training/tokenizer``: ``_vocab_size_with_padding``). ``divisible_by=1`` pads to TP only."""
    m = divisible_by * tp
    return -(-vocab_size // m) * m


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank (elements), by kind, plus the dense/expert split used for
    optimizer sharding (dense state shards over DP·CP, expert state over EDP)."""

    by_kind: dict[str, int]
    dense: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert

    def to_dict(self) -> dict:
        return {"by_kind": self.by_kind, "dense": self.dense, "expert": self.expert, "total": self.total}


def rank_params(
    model: PartialModelSpec,
    layers: list[int],
    *,
    tp: int = 1,
    ep: int = 1,
    etp: int = 1,
    embedding: bool = False,
    output_layer: bool = False,
    mtp_layers: int = 0,
    padded_vocab: int | None = None,
    vision: bool = False,
) -> RankParams:
    """Parameters on one rank that builds decoder ``layers`` (0-based ids), optionally the
    embedding (first stage), the output layer and final norm (last stage) and ``mtp_layers`` MTP
    depths (last stage, which then also holds a copy of the word embeddings, as Megatron's GPTModel
    builds them for ``mtp_process``; one block's weights for every depth with ``mtp_use_repeated_layer``,
    megatron-core ``MultiTokenPredictionBlock``), and the vision tower (``vision=True``: first stage of a VLM, see
    :func:`vision_shard`). With tied embeddings and an output layer on a rank without the embedding
    (PP > 1), Megatron keeps a copy of the word embeddings there, counted here.

    ``padded_vocab`` defaults to :func:`padded_vocab_size` (divisible by 128·TP).

    Raises:
        InputError: when a dimension does not shard evenly or a needed width is missing.
    """
    _require(model, "hidden_size", "num_layers", "vocab_size")
    model = model.completed()
    by = dict.fromkeys(PARAM_KINDS, 0)
    dense = expert = 0
    for i in layers:
        for k, s in layer_shard(model, i, tp, ep, etp).items():
            by[k] = by.get(k, 0) + s.total
            dense += s.tp + s.rep
            expert += s.exp
    vpad = padded_vocab or padded_vocab_size(model.vocab_size, tp)
    vocab_rank = _div(vpad, tp, "padded vocab vs TP") * model.hidden_size
    if embedding:
        by["embedding"] += vocab_rank
        dense += vocab_rank
    if output_layer:
        by["norms"] += model.hidden_size
        dense += model.hidden_size
        if model.is_dsv4 and model.num_residual_streams > 1:  # the block's hc head sits beside the final norm
            head = dsv4_shapes.hc_head_params(model)
            by["hyper_connection_head"] = head
            dense += head
        if model.untie_embeddings_and_output_weights or not embedding:
            by["output_layer"] += vocab_rank
            dense += vocab_rank
    if vision and model.vision is not None:
        vs = vision_shard(model.vision, tp)
        by["vision"] = vs.total
        dense += vs.total
    if mtp_layers and not embedding:
        # GPTModel builds the word embeddings when pre_process or mtp_process: the MTP stage keeps a
        # copy (kept in sync like tied embeddings)
        by["embedding"] += vocab_rank
        dense += vocab_rank
    if mtp_layers:
        m = mtp_shard(model, tp, ep, etp)
        sets = min(1, mtp_layers) if model.mtp_use_repeated_layer else mtp_layers  # one block reused per depth
        by["mtp"] = sets * m.total
        dense += sets * (m.tp + m.rep)
        expert += sets * m.exp
    return RankParams(by_kind=by, dense=dense, expert=expert)
