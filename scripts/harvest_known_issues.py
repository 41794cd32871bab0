"""Harvest known-issue entries from the merged fixes of Megatron-LM, Megatron Bridge, Transformer Engine and DeepEP.

A development tool (the package never imports it). It reads git mirrors with full history (no work
tree) and writes ``src/moeplan/catalog/data/known_issues_harvested.yaml``, which
:mod:`moeplan.catalog.known_issue_table` loads beside the hand-entered ``known_issues.yaml``:

1. the release tags (``core_vX.Y.Z`` for megatron-core, ``vX.Y.Z`` for Megatron Bridge, ``vX.Y[.Z]``
   for Transformer Engine; final releases only) and, for DeepEP, which tags one release only, the commit
   that first declares each version its package reports (``version='1.1.0'`` in setup.py,
   ``__version__`` in deep_ep/__init__.py: a build reports ``1.1.0+<rev>`` from there on, so a fix
   after it is first in every build of the next declared version); once per release point, the commits it adds over the older tags (``git rev-list TAG --not OLDER``):
   the first release that contains each commit; a fix cherry-picked onto a release branch is matched
   to its ``main`` commit by its subject (without the PR number), so a patch release counts;
2. the fix commits of 2025-2026 on ``main``: subject or body names a failure (:data:`FIX_WORDS`);
3. the features the touched files belong to (:data:`FEATURES`, a path → feature map, each with its
   reasoning) and the trigger each feature stands for in the trigger language; a fix touching no
   feature, or too many (a refactor), proposes nothing;
4. the symptom from the text (:data:`SYMPTOM_WORDS`, first match wins); ``unspecified`` when the text
   names no failure mode (most fixes say what they change, not what went wrong);
5. an entry: affected ``<first fixed``, fixed = the first release containing the fix, the trigger, the
   family (the most specific feature), a title composed from these facts
   (``i18n/en/rules_harvested.yaml`` fragments; never the commit's prose), an example scenario at the
   last release before the fix with the trigger met and a near miss at the fixed release;
6. a fix the hand-entered database already holds (same source URL) is left to it;
7. the curation in ``scripts/known_issues_overrides.yaml`` (reject by id with a reason, trigger and
   family corrections), applied last, so a rerun reproduces the vendored file exactly.

Every proposed entry is parsed by the package's loader, and its example must fire and its near miss
must not; an entry that fails is dropped (``--verbose`` names it).

Usage::

    python scripts/harvest_known_issues.py            # write the vendored file
    python scripts/harvest_known_issues.py --check    # exit 1 when the output would change
    python scripts/harvest_known_issues.py --stats    # counts by family and symptom

The mirrors are read under ``$MOEPLAN_MIRRORS`` (default ``/work/.mirror``); when one is absent the
script says so and leaves the vendored file as it is (exit 0), so ``scripts/regen.py`` runs anywhere.

Exit status: 0 done (unchanged with ``--check``, or skipped), 1 would change.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src/moeplan/catalog/data/known_issues_harvested.yaml"
OVERRIDES = ROOT / "scripts/known_issues_overrides.yaml"
HAND = ROOT / "src/moeplan/catalog/data/known_issues.yaml"
RECIPE_RELEASES = ROOT / "src/moeplan/catalog/data/moe_recipe_releases.yaml"
MIRROR_ROOT = Path(os.environ.get("MOEPLAN_MIRRORS", "/work/.mirror"))


@dataclass(frozen=True)
class Mirror:
    """One upstream repository: the package its releases version (a ``versions:`` key of a scenario),
    the family prefix, its URL and mirror, its release tags, the library files a run executes
    (``scope``, with the suffixes ``exts``) and, where releases are not all tagged, the files and the
    pattern that declare the package's version (``declared``: (path, regex with one group))."""

    package: str
    short: str
    url: str
    path: Path
    tag: re.Pattern
    scope: re.Pattern
    exts: tuple[str, ...] = (".py",)
    declared: tuple[tuple[str, str], ...] = ()


MIRRORS = (
    Mirror(
        "megatron_core",
        "mcore",
        "https://github.com/NVIDIA/Megatron-LM",
        MIRROR_ROOT / "NVIDIA+Megatron-LM/repo",
        re.compile(r"core_v(\d+\.\d+\.\d+)\Z"),
        re.compile(r"megatron/(core|training|rl)/"),
    ),
    Mirror(
        "megatron_bridge",
        "mbridge",
        "https://github.com/NVIDIA-NeMo/Megatron-Bridge",
        MIRROR_ROOT / "NVIDIA-NeMo+Megatron-Bridge/repo",
        re.compile(r"v(\d+\.\d+\.\d+(?:rc\d+)?)\Z"),
        re.compile(r"src/megatron/bridge/"),
    ),
    Mirror(
        "transformer_engine",
        "te",
        "https://github.com/NVIDIA/TransformerEngine",
        MIRROR_ROOT / "NVIDIA+TransformerEngine/repo",
        re.compile(r"v(\d+\.\d+(?:\.\d+)?)\Z"),
        re.compile(r"transformer_engine/(pytorch|common)/"),
        (".py", ".cu", ".cuh", ".cpp", ".h"),
    ),
    Mirror(
        "deepep",
        "deepep",
        "https://github.com/deepseek-ai/DeepEP",
        MIRROR_ROOT / "deepseek-ai+DeepEP/repo",
        re.compile(r"v(\d+\.\d+\.\d+)\Z"),
        re.compile(r"(deep_ep|csrc)/"),
        (".py", ".cu", ".cuh", ".cpp", ".hpp", ".h"),
        (("deep_ep/__init__.py", r"^__version__\s*=\s*'(\d+\.\d+\.\d+)'"), ("setup.py", r"version='(\d+\.\d+\.\d+)'")),
    ),
)

#: words of a subject or body that name a failure a fix removes
FIX_WORDS = re.compile(
    r"\b(fix\w*|bug\w*|hang\w*|deadlock\w*|nan|nans|oom|leak\w*|crash\w*|assert\w*|wrong|incorrect\w*|"
    r"mismatch\w*|race|segfault|illegal memory|overflow)\b",
    re.I,
)
#: subjects that fix the project's tooling, not the library a run executes
NOT_RUNTIME = re.compile(
    r"^\W*(ci|tests?|docs?|build|chore|lint|style|typo)\b|\b(ci|unit tests?|golden values?)\b", re.I
)
#: a fix that adds a check names an assertion it introduces, not one users hit
ADDS_CHECK = re.compile(r"\b(add|adds|added|adding|improve)\b[^.]{0,40}\bassert", re.I)
#: symptom classes from the text, first match wins (the order ranks how a fix names its failure)
SYMPTOM_WORDS = (
    ("hang", re.compile(r"\b(hang\w*|deadlock\w*|stuck|freez\w*|timeout)\b", re.I)),
    ("nan", re.compile(r"\b(nan|nans|inf|overflow|diverg\w*)\b", re.I)),
    ("oom", re.compile(r"\b(oom|out of memory|leak\w*|memory|buffers? kept|keep alive)\b", re.I)),
    ("assertion", re.compile(r"\bassert\w*\b", re.I)),
    (
        "crash",
        re.compile(
            r"\b(crash\w*|error|exception|segfault|segmentation|illegal|ima|fail\w*|raise\w*|\w+error|breakage|"
            r"broken|not working|out of bounds|oob)\b",
            re.I,
        ),
    ),
    (
        "wrong_result",
        re.compile(
            r"\b(wrong\w*|incorrect\w*|mismatch\w*|accura\w*|loss|losses|inconsisten\w*|corrupt\w*|"
            r"miscalculat\w*|converg\w*|numerical\w*|precision loss)\b",
            re.I,
        ),
    ),
    ("slowdown", re.compile(r"\b(slow\w*|perf(ormance)?|speed\w*|throughput)\b", re.I)),
)
#: library areas a training run does not execute (inference, export, tokenizers, diffusion, Transformer
#: Engine's JAX and ONNX paths, DeepEP's low-latency kernels: Megatron's flex dispatcher calls DeepEP's
#: normal intranode / internode kernels; the low-latency ones serve inference decoding): their files
#: count for no feature
NOT_TRAINING = re.compile(
    r"/(inference|export|post_training|tokenizers?|diffusion|text_generation|perf_recipes|jax|onnx\w*)/|_inference\.py"
    r"|onnx|internode_ll|low_latency"
)
#: a fix touching more features than this is a refactor: no entry
MAX_FEATURES = 3
#: a fix touching more library files than this is a refactor: no entry
MAX_FILES = 25


@dataclass(frozen=True)
class Feature:
    """A feature a touched file belongs to: ``paths`` (regex on the path) and, when set, ``text`` (regex
    the subject and body must match too); ``trigger``: the scenario condition in the trigger language;
    ``scenario``: what an example scenario sets to meet it; ``why``: the reasoning of the mapping;
    ``mention``: a regex of the subject and body that names the feature outright, which maps the fix to
    it whatever library file it touches (a fix says "under CP" about a RoPE helper)."""

    key: str
    paths: str
    trigger: dict
    scenario: dict
    why: str
    text: str | None = None
    packages: tuple[str, ...] = ("megatron_core", "megatron_bridge")
    mention: str | None = None


_MOE = {"layout": {"expert_model_parallel_size": 8}}
_FLEX = {
    "layout": {
        "expert_model_parallel_size": 8,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep",
    }
}
_BRIDGE = ("megatron_bridge",)
_TE = ("transformer_engine",)
_DEEPEP = ("deepep",)
#: EP 16 on 8-GPU H100 nodes: one EP group spans two nodes
_DEEPEP_INTERNODE = {"layout": {**_FLEX["layout"], "expert_model_parallel_size": 16}}

#: the path → feature map, most specific first (an entry's family is its first feature)
FEATURES: tuple[Feature, ...] = (
    Feature(
        "flex_dispatcher",
        r"moe/fused_a2a\.py|moe/token_dispatcher\.py|deepep|hybrid_?ep",
        {"dispatcher": {"in": ["deepep", "hybridep"]}},
        _FLEX,
        "fused_a2a.py wraps DeepEP / HybridEP; token_dispatcher.py holds the flex dispatcher, so a fix there naming DeepEP, flex or HybridEP is theirs",
        text=r"deep_?ep|flex|hybrid_?ep|fused.?a2a",
        mention=r"deep_?ep|hybrid_?ep|flex.dispatch",
    ),
    Feature(
        "mla",
        r"multi_latent_attention|mla_|/mla\b",
        {"model.multi_latent_attention": True},
        {"model": "deepseek-ai/DeepSeek-V2-Lite"},
        "multi-latent attention lives in multi_latent_attention.py (and Bridge's mla_provider)",
        mention=r"\bmla\b|multi.latent",
    ),
    Feature(
        "mtp",
        r"multi_token_prediction|/mtp",
        {"mtp_num_layers": {"gt": 0}},
        {"layout": {"mtp_num_layers": 1}},
        "the MTP block is multi_token_prediction.py",
        mention=r"\bmtp\b|multi.token.predict",
    ),
    Feature(
        "vlm",
        r"models/(multimodal|vision|mimo|llava|\w*_vl)\b|multimodal|vlm|vision",
        {"model.is_vlm": True},
        {"model": "Qwen/Qwen3-VL-30B-A3B-Instruct"},
        "vision encoders, multimodal models and VLM datasets run only for a VLM",
        mention=r"\bvlm\b|vision|multimodal|\bvit\b|llava|\bvl\b",
    ),
    Feature(
        "peft",
        r"/peft/|lora",
        {"training.task": "finetune"},
        {"training": {"task": "finetune"}},
        "Bridge's peft/ (LoRA, DoRA) runs only in fine-tuning: the task is the closest scenario fact",
        packages=_BRIDGE,
        mention=r"\blora\b|\bpeft\b|\bdora\b",
    ),
    Feature(
        "packing",
        r"packed_seq|packing|/packed|thd",
        {"training.packed_sequences": True},
        {"training": {"packed_sequences": True}},
        "PackedSeqParams / packed datasets are the THD path",
        mention=r"\bthd\b|packed.seq|sequence.packing|\bpacking\b",
    ),
    Feature(
        "fsdp",
        r"distributed/fsdp/|megatron_fsdp|custom_fsdp|fsdp",
        {"layout.use_megatron_fsdp": True},
        {"layout": {"use_megatron_fsdp": True}},
        "distributed/fsdp is Megatron-FSDP",
        mention=r"\bfsdp\b|m-?fsdp",
    ),
    Feature(
        "optimizer_offload",
        r"optimizer/cpu_offloading|hybrid_optimizer|optimizer_offload",
        {"layout.optimizer_cpu_offload": True},
        {"layout": {"optimizer_cpu_offload": True, "use_distributed_optimizer": True}},
        "optimizer/cpu_offloading is the CPU-offloaded optimizer",
        mention=r"optimizer.{0,6}offload",
    ),
    Feature(
        "activation_offload",
        r"fine_grained_activation_offload|cpu_offload\.py|activation_offload",
        {"any": [{"layout.fine_grained_activation_offloading": True}, {"layout.cpu_offloading": True}]},
        {"layout": {"fine_grained_activation_offloading": True}},
        "activation offloading runs only when it is on",
        mention=r"activation.{0,6}offload",
    ),
    Feature(
        "cuda_graphs",
        r"cuda_graph|full_cuda_graph|graph_capture",
        {"graphs_on": True},
        {"layout": {"cuda_graph_impl": "transformer_engine"}},
        "cuda_graphs.py and full_cuda_graph.py capture and replay CUDA graphs",
        mention=r"cuda.?graph",
    ),
    Feature(
        "cp",
        r"context_parallel|hybrid_cp|ring_attention|transformer_engine\.py|dot_product_attention|/attention",
        {"cp": {"gt": 1}},
        {"layout": {"context_parallel_size": 2}},
        "context-parallel attention is in TE's attention wrapper and the CP schedules; a fix there naming CP is CP's",
        text=r"\bcp\b|context.parallel|a2a\+p2p|ring",
        mention=r"\bcp\b|context.parallel|hybrid.cp",
    ),
    Feature(
        "moe_overlap",
        r"combined_1f1b|model_chunk_schedule_plan|fine_grained_callables|overlap_moe",
        {"layout.overlap_moe_expert_parallel_comm": True},
        {"layout": {"expert_model_parallel_size": 8, "overlap_moe_expert_parallel_comm": True}},
        "the EP communication overlap schedule is combined_1f1b.py and the model-chunk schedule plan",
        mention=r"\bep.overlap|a2a.overlap|overlap_moe|1f1b.overlap",
    ),
    Feature(
        "vpp",
        r"pipeline_parallel/|pipeline_parallel_layer_layout|/pipeline",
        {"pp": {"gt": 1}, "vpp": {"gt": 1}},
        {"layout": {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2}},
        "the interleaved (VPP) schedule is in pipeline_parallel/; a fix there naming VPP or interleaving is VPP's",
        text=r"\bvpp\b|virtual.pipeline|interleav",
        mention=r"\bvpp\b|virtual.pipeline|interleav",
    ),
    Feature(
        "pp",
        r"pipeline_parallel/(schedules|p2p_communication|utils|bridge_communicator)|pipeline_parallel_layer_layout",
        {"pp": {"gt": 1}},
        {"layout": {"pipeline_model_parallel_size": 2}},
        "schedules.py and p2p_communication.py run only with PP > 1",
        mention=r"\bpp\b|pipeline.parallel",
    ),
    Feature(
        "fp8",
        r"fp8|fp4|quantiz|mixed_precision",
        {"training.precision": {"ne": "bf16"}},
        {"training": {"precision": "fp8-tensorwise"}},
        "fp8_utils / fp4_utils and the mixed-precision recipes run only for FP8 / FP4",
        mention=r"\bfp8\b|\bfp4\b|mxfp8|nvfp4",
    ),
    Feature(
        "tp_overlap",
        r"comm_overlap|userbuffer",
        {"layout.tp_comm_overlap": True},
        {"layout": {"tensor_model_parallel_size": 2, "sequence_parallel": True, "tp_comm_overlap": True}},
        "TP communication overlap (userbuffers) runs only with tp_comm_overlap",
        mention=r"tp.comm.overlap|userbuffer",
    ),
    Feature(
        "linear_attention",
        r"ssm/|gated_delta|mamba|linear_attention",
        {"model.has_linear_attention": True},
        {"model": "Qwen/Qwen3-Next-80B-A3B-Instruct"},
        "ssm/ (Mamba, gated delta net) runs only in hybrid linear-attention models",
        mention=r"mamba|gated.delta|\bgdn\b|linear.attention",
    ),
    Feature(
        "rl",
        r"megatron/rl/|/rl/|rl_utils",
        {"system.reserved_gib": {"gt": 0}},
        {"system": {"reserved_gib": 8}},
        "the RL loop colocates a rollout engine: a scenario says so by reserving GPU memory for it",
        mention=r"\brl\b|\bgrpo\b|rollout",
    ),
    Feature(
        "moe_dispatch",
        r"moe/(token_dispatcher|moe_utils|fused_a2a)|token_dispatcher",
        {"model.is_moe": True, "ep": {"gt": 1}},
        _MOE,
        "token_dispatcher.py and the permute helpers run with EP > 1",
        mention=r"dispatcher|all.?to.?all|\ba2a\b|permut",
    ),
    Feature(
        "moe_routing",
        r"moe/router|router_replay|aux_loss|load_balanc",
        {"model.is_moe": True},
        _MOE,
        "router.py and its load-balancing losses run in every MoE layer",
        mention=r"\brouter\b|routing|aux.loss|load.balanc",
    ),
    Feature(
        "moe_experts",
        r"moe/(experts|moe_layer|shared_experts|grouped_gemm|upcycling)|grouped_gemm|moe/",
        {"model.is_moe": True},
        _MOE,
        "experts.py, moe_layer.py and shared_experts.py run in every MoE layer",
        mention=r"\bmoe\b|\bexperts?\b",
    ),
    Feature(
        "dist_optimizer",
        r"optimizer/distrib_optimizer|distrib_optimizer|optimizer/",
        {"layout.use_distributed_optimizer": True},
        {"layout": {"use_distributed_optimizer": True}},
        "distrib_optimizer.py is the distributed optimizer",
        mention=r"distributed.optimizer|distopt|\bzero-?1\b",
    ),
    Feature(
        "grad_sync",
        r"distributed/(distributed_data_parallel|param_and_grad_buffer|finalize_model_grads)|finalize_model_grads|grad_buffer",
        {"dp": {"gt": 1}, "layout.overlap_grad_reduce": True},
        {"layout": {"overlap_grad_reduce": True}},
        "the gradient buffers and their reduce run with DP > 1; their overlap is where the bucket accounting lives",
        mention=r"grad(ient)?s? (reduce|reduction|sync|accumulat|scal)|main_grad|param_and_grad",
    ),
    Feature(
        "recompute",
        r"recompute|tensor_parallel/random",
        {"layout.recompute_granularity": {"in": ["full", "selective"]}},
        {"layout": {"recompute_granularity": "selective"}},
        "activation recompute runs only with a recompute granularity",
        mention=r"\brecompute|activation.checkpoint",
    ),
    # Transformer Engine (transformer_engine/pytorch and common), most specific first
    Feature(
        "moe_permute",
        r"permutation|moe_permute",
        {"model.is_moe": True, "layout.moe_permute_fusion": True},
        {"layout": {"expert_model_parallel_size": 8, "moe_permute_fusion": True}},
        "TE's fused permute / unpermute (permutation.py, common/permutation) runs only with moe_permute_fusion",
        packages=_TE,
        mention=r"permut",
    ),
    Feature(
        "cp",
        r"context_parallel|attention/",
        {"cp": {"gt": 1}},
        {"layout": {"context_parallel_size": 2}},
        "context_parallel.py holds TE's CP attention (p2p ring, all-gather, a2a); an attention fix naming CP is CP's",
        text=r"\bcp\b|context.parallel|a2a\+p2p|\bring\b",
        packages=_TE,
        mention=r"\bcp\b|context.parallel",
    ),
    Feature(
        "cuda_graphs",
        r"pytorch/graph\.py|cuda_graph",
        {"graphs_on": True},
        {"layout": {"cuda_graph_impl": "transformer_engine"}},
        "graph.py (make_graphed_callables) captures the graphs of cuda_graph_impl: transformer_engine",
        packages=_TE,
        mention=r"cuda.?graph|graphed.callable",
    ),
    Feature(
        "tp_overlap",
        r"comm_gemm_overlap|userbuffers",
        {"layout.tp_comm_overlap": True},
        {"layout": {"tensor_model_parallel_size": 2, "sequence_parallel": True, "tp_comm_overlap": True}},
        "comm_gemm_overlap / userbuffers are the TP communication overlap, run only with tp_comm_overlap",
        packages=_TE,
        mention=r"userbuffer|comm.gemm.overlap|tp.comm.overlap|\bub\b",
    ),
    Feature(
        "moe_routing",
        r"fused_router|pytorch/router\.py|extensions/router",
        {"model.is_moe": True},
        _MOE,
        "TE's fused router (top-k with score function, aux loss) runs in every MoE layer with router fusion; "
        "the scenario does not say whether router fusion is on, so it stands for every MoE run (a broad feature)",
        packages=_TE,
        mention=r"fused.router|fused.topk|score.function|aux.loss",
    ),
    Feature(
        "fp8",
        r"fp8|fp4|mxfp8|nvfp4|float8|quantiz|recipe|/cast/|hadamard|swizzle|blockwise",
        {"training.precision": {"ne": "bf16"}},
        {"training": {"precision": "fp8-tensorwise"}},
        "the FP8 / FP4 recipes, casts and quantized tensors run only for FP8 / FP4 (a broad feature of such runs)",
        packages=_TE,
        mention=r"\bfp8\b|\bfp4\b|mxfp8|nvfp4|float8|delayed.scaling|current.scaling",
    ),
    Feature(
        "attention",
        r"attention|fused_attn|flash_attn|fused_softmax|fused_rope",
        {"any": [{"layout.attention_backend": {"stated": False}}, {"layout.attention_backend": {"ne": "local"}}]},
        {},
        "TE's DotProductAttention (fused / flash / cuDNN backends) runs in every attention layer unless "
        "attention_backend is local: nearly every run (a broad feature)",
        packages=_TE,
        mention=r"fused.attn|flash.attn|cudnn.attention|dot.?product.?attention|\bdpa\b",
    ),
    # DeepEP (deep_ep and csrc); the low-latency kernels count for no feature (NOT_TRAINING)
    Feature(
        "internode",
        r"internode(?!_ll)|ibgda|nvshmem|rdma",
        {"dispatcher": "deepep", "derived.ep_spans_nodes": True},
        _DEEPEP_INTERNODE,
        "internode.cu and the NVSHMEM / IBGDA transport run only when the EP group spans nodes",
        packages=_DEEPEP,
        mention=r"internode(?!_ll)|inter-node|\brdma\b|nvshmem|ibgda|multi.node|cross.node",
    ),
    Feature(
        "intranode",
        r"intranode",
        {"dispatcher": "deepep", "derived.ep_spans_nodes": False},
        _FLEX,
        "intranode.cu (NVLink only) runs when the EP group fits in one NVLink domain",
        packages=_DEEPEP,
        mention=r"intranode|intra-node",
    ),
    Feature(
        "buffer",
        r"deep_ep/buffer\.py|deep_ep/buffers/legacy|csrc/deep_ep\.cpp|csrc/legacy/|csrc/config|kernels/(legacy/)?"
        r"(layout|runtime|buffer|utils|launch|configs?|api)",
        {"dispatcher": "deepep"},
        _FLEX,
        "the Buffer API, its layout kernel and runtime run in every DeepEP dispatch and combine",
        packages=_DEEPEP,
    ),
)

#: Bridge model folders (models/<dir>/, the HF ↔ Megatron conversion) → the HF model types they convert
CONVERSION_MODELS: dict[str, tuple[list[str], str]] = {
    "qwen": (["qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen2"], "Qwen/Qwen3-30B-A3B"),
    "qwen_vl": (["qwen3_vl_moe", "qwen3_vl", "qwen2_5_vl"], "Qwen/Qwen3-VL-30B-A3B-Instruct"),
    "deepseek": (["deepseek_v3", "deepseek_v2"], "deepseek-ai/DeepSeek-V2-Lite"),
    "llama": (["llama", "llama4"], "meta-llama/Llama-3.1-8B"),
    "mistral": (["mixtral", "mistral"], "mistralai/Mixtral-8x7B-v0.1"),
    "gpt_oss": (["gpt_oss"], "openai/gpt-oss-20b"),
    "glm": (["glm4_moe"], "zai-org/GLM-4.5-Air"),
    "kimi": (["kimi_k2"], "moonshotai/Kimi-K2-Instruct"),
}
CONVERSION_PATH = re.compile(r"src/megatron/bridge/models/(\w+)/")
BASE_SCENARIO = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
    "layout": {},
}


@dataclass
class Commit:
    """A fix commit: sha, date (YYYY-MM-DD), subject, body and the library files it touches."""

    sha: str
    date: str
    subject: str
    body: str
    files: list[str] = field(default_factory=list)

    @property
    def pr(self) -> str | None:
        m = re.search(r"\(#(\d+)\)\s*$", self.subject) or re.search(r"!(\d+)\b", self.subject)
        return m.group(1) if m and "(#" in self.subject else None


def git(repo: Path, *args: str) -> str:
    """Output of ``git --git-dir=repo args`` (raises CalledProcessError on failure)."""
    return subprocess.run(["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True).stdout


def releases(m: Mirror) -> list[tuple[Version, str]]:
    """The mirror's release points as (version, tag or commit), oldest first: its release tags, and for
    a version declared in the package's files (:attr:`Mirror.declared`) but never tagged, the first
    commit declaring it."""
    out = []
    for tag in git(m.path, "tag", "--list").split():
        hit = m.tag.match(tag)
        if hit:
            try:
                out.append((Version(hit.group(1)), tag))
            except InvalidVersion:
                continue
    tagged = {v for v, _ in out}
    out += [(v, sha) for v, sha in declared_versions(m) if v not in tagged]
    return sorted(out)


def declared_versions(m: Mirror) -> list[tuple[Version, str]]:
    """The first commit on ``HEAD`` declaring each version of the package (:attr:`Mirror.declared`:
    the first file whose pattern matches at that commit wins), as (version, commit), oldest first."""
    if not m.declared:
        return []
    paths = [p for p, _ in m.declared]
    first: dict[Version, str] = {}
    for sha in git(m.path, "log", "--reverse", "--format=%H", "HEAD", "--", *paths).split():
        for path, rx in m.declared:
            try:
                hit = re.search(rx, git(m.path, "show", f"{sha}:{path}"), re.M)
            except subprocess.CalledProcessError:  # the file does not exist at that commit
                continue
            if hit:
                first.setdefault(Version(hit.group(1)), sha)
                break
    return sorted(first.items())


def _norm_subject(subject: str) -> str:
    s = re.sub(r"\(#\d+\)|\[[^\]]*\]|cherry[- ]pick(ed)?( of)?|\bcp\b:?|^\W+", " ", subject.lower())
    return " ".join(s.split())


def first_release(m: Mirror, tags: list[tuple[Version, str]]) -> tuple[dict[str, Version], dict[str, Version]]:
    """The first release containing each commit (by reachability, one ``rev-list`` per tag) and by
    normalised subject (a cherry-pick onto a release branch); subjects under 25 characters are not matched."""
    by_sha: dict[str, Version] = {}
    by_subject: dict[str, Version] = {}
    seen: list[str] = []
    for ver, tag in tags:
        lines = (
            git(m.path, "log", "--format=%H%x1f%s", tag, "--not", *seen).splitlines()
            if seen
            else git(m.path, "log", "--format=%H%x1f%s", tag).splitlines()
        )
        for line in lines:
            sha, _, subject = line.partition("\x1f")
            by_sha.setdefault(sha, ver)
            norm = _norm_subject(subject)
            if len(norm) >= 25:
                by_subject.setdefault(norm, ver)
        seen.append(tag)
    return by_sha, by_subject


def fix_commits(m: Mirror, head: str) -> list[Commit]:
    """The fix commits of 2025-2026 reachable from ``head`` (no merges), with their library files."""
    raw = git(
        m.path,
        "log",
        head,
        "--no-merges",
        "--since=2025-01-01",
        "--date=short",
        "--format=%x1e%H%x1f%ad%x1f%s%x1f%b%x1f",
        "--name-only",
    )
    out = []
    for rec in raw.split("\x1e")[1:]:
        sha, date, subject, body, names = rec.split("\x1f", 4)
        if not date.startswith(("2025-", "2026-")) or not FIX_WORDS.search(subject):
            continue
        if NOT_RUNTIME.search(subject):
            continue
        files = [
            f
            for f in names.split()
            if m.scope.match(f) and f.endswith(m.exts) and "/tests/" not in f and not NOT_TRAINING.search(f)
        ]
        if files:
            trailers = re.compile(r"^(signed-off-by|co-authored-by|reviewed-by):.*$", re.I | re.M)
            out.append(Commit(sha, date, subject.strip(), trailers.sub("", body).strip(), files))
    return out


def features_of(m: Mirror, c: Commit) -> list[Feature]:
    """The features the commit's files belong to (:data:`FEATURES`), most specific first, without one
    another implies (VPP implies PP; the flex dispatcher implies the MoE dispatch)."""
    text = re.sub(r"^\W*cp:\s*", "", c.subject) + " " + c.body[:600]  # "cp:" there is a cherry-pick
    found = []
    for f in FEATURES:
        if m.package not in f.packages:
            continue
        by_path = any(re.search(f.paths, p) for p in c.files) and (f.text is None or re.search(f.text, text, re.I))
        if by_path or (f.mention is not None and re.search(f.mention, text, re.I)):
            found.append(f)
    keys = {f.key for f in found}
    implied = {
        "vpp": {"pp"},
        "flex_dispatcher": {"moe_dispatch", "moe_experts", "moe_routing"},
        "moe_dispatch": {"moe_experts", "moe_routing"},
        "moe_overlap": {"moe_dispatch", "moe_experts", "pp"},
        "moe_routing": {"moe_experts"},
        "optimizer_offload": {"dist_optimizer"},
        "fsdp": {"grad_sync", "dist_optimizer"},
        "cp": {"attention"},
        "internode": {"buffer"},
        "intranode": {"buffer"},
    }
    drop = set().union(*(implied.get(k, set()) for k in keys))
    return [f for f in found if f.key not in drop]


def conversion_of(c: Commit) -> str | None:
    """The Bridge model folder a conversion fix touches (one folder only), else None."""
    dirs = {m.group(1) for p in c.files if (m := CONVERSION_PATH.match(p)) and m.group(1) in CONVERSION_MODELS}
    return dirs.pop() if len(dirs) == 1 else None


def symptom_of(c: Commit) -> str:
    """The symptom class the fix's subject (then body) names; ``unspecified`` when it names none (a
    result is ``wrong_result`` only when the text says so: wrong, incorrect, mismatch, accuracy, loss ...)."""
    for text in (c.subject, c.body[:600]):
        for name, rx in SYMPTOM_WORDS:
            if rx.search(text) and not (name == "assertion" and ADDS_CHECK.search(text)):
                return name
    return "unspecified"


# ----------------------------------------------------------------------------------------------------
# entries


def _merge(into: dict, patch: dict) -> dict:
    for key, val in patch.items():
        if isinstance(val, dict) and isinstance(into.get(key), dict):
            _merge(into[key], val)
        elif key != "model" or into.get("model") == BASE_SCENARIO["model"]:
            into[key] = copy.deepcopy(val)
    return into


def _trigger(parts: list[dict]) -> dict:
    out: dict = {}
    for part in parts:
        for key, val in part.items():
            if key in out and out[key] != val:
                out.setdefault("all", []).append({key: val})
            else:
                out[key] = val
    return out


def previous_release(tags: list[tuple[Version, str]], fixed: Version) -> Version | None:
    """The newest release older than ``fixed`` (None when ``fixed`` is the first)."""
    older = [v for v, _ in tags if v < fixed and v.release != fixed.release]  # <X excludes X's pre-releases
    return older[-1] if older else None


def fixed_release(c: Commit, by_sha: dict[str, Version], by_subject: dict[str, Version]) -> Version | None:
    """The first release containing the fix: by reachability or, earlier, a cherry-pick of the same subject."""
    got = [v for v in (by_sha.get(c.sha), by_subject.get(_norm_subject(c.subject))) if v is not None]
    return min(got) if got else None


def entry_id(m: Mirror, c: Commit) -> str:
    return f"{m.short}_pr_{c.pr}" if c.pr else f"{m.short}_commit_{c.sha[:10]}"


def _parts(m: Mirror, c: Commit) -> tuple[list[str], list[dict], list[dict]] | None:
    """Feature keys, their triggers and scenario patches; None when the fix maps to no feature or too many."""
    feats = features_of(m, c)
    keys, triggers, patches = [f.key for f in feats], [f.trigger for f in feats], [f.scenario for f in feats]
    conv = conversion_of(c) if m.package == "megatron_bridge" else None
    if conv is not None:
        types, model = CONVERSION_MODELS[conv]
        keys.insert(0, f"conversion:{conv}")
        triggers.insert(0, {"model.model_type": {"in": types}})
        patches.insert(0, {"model": model})
    if not keys or len(keys) > MAX_FEATURES or len(c.files) > MAX_FILES:
        return None
    if m.package == "megatron_bridge":  # Bridge's code runs only under Bridge
        triggers.append({"framework": "megatron-bridge"})
    return keys, triggers, patches


def propose(m: Mirror, c: Commit, tags: list[tuple[Version, str]], fixed: Version) -> dict | None:
    """The entry a fix proposes (before curation), or None when it maps to no feature."""
    parts = _parts(m, c)
    if parts is None:
        return None
    keys, triggers, patches = parts
    prev = previous_release(tags, fixed)
    if prev is None:
        return None
    symptom = symptom_of(c)
    scenario = _merge(copy.deepcopy(BASE_SCENARIO), {})
    for p in patches:
        _merge(scenario, p)
    if not scenario["layout"]:
        del scenario["layout"]
    source = f"{m.url}/pull/{c.pr}" if c.pr else f"{m.url}/commit/{c.sha}"
    entry = {
        "id": entry_id(m, c),
        "family": f"{m.short}_{keys[0].split(':')[0]}",
        "features": keys,
        "source": source,
        "reported": c.date,
        "packages": {m.package: {"affected": f"<{fixed}", "fixed": str(fixed)}},
        "trigger": _trigger(triggers),
        "symptom": symptom,
        "certainty": "reported",
        "_subject": c.subject,
        "_sha": c.sha,
        "example": {**scenario, "versions": {m.package: str(prev)}},
        "near_miss": {**copy.deepcopy(scenario), "versions": {m.package: str(fixed)}},
    }
    if symptom == "slowdown":
        entry["size"] = "not measured by the fix"
    return entry


def compose_texts(entry: dict) -> dict:
    """The entry with its title and workaround composed from its facts (the English fragments of
    ``i18n/en/rules_harvested.yaml``), keys in the vendored file's order."""
    from moeplan.catalog.known_issue_table import ENTRY_KEYS
    from moeplan.rules.known_issue_families import compose_title, compose_workaround

    ((pkg, rng),) = entry["packages"].items()
    title = compose_title(entry["symptom"], entry["features"], pkg, rng["fixed"], entry["source"])
    work = compose_workaround(entry["features"], pkg, rng["fixed"])
    full = {**entry, "title": str(title), "workaround": str(work)}
    return {k: full[k] for k in ENTRY_KEYS if k in full}


# ----------------------------------------------------------------------------------------------------
# curation and checks


def load_overrides(path: Path = OVERRIDES) -> dict:
    """The curation: ``reject_subject`` (regex of a fix's subject → reason), ``reject`` (id → reason),
    ``feature_trigger`` (package → feature → conditions added to the trigger of every entry of that
    package with that feature), ``trigger`` (id → trigger), ``family`` (id → family), ``symptom``
    (id → symptom). Missing file: none."""
    keys = ("reject_subject", "reject", "feature_trigger", "trigger", "family", "symptom")
    data = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
    return {k: dict(data.get(k) or {}) for k in keys}


def hand_sources(path: Path = HAND) -> set[str]:
    """The sources (and related URLs) of the hand-entered database: a fix already entered by hand."""
    if not path.is_file():
        return set()
    issues = yaml.safe_load(path.read_text(encoding="utf-8"))["issues"]
    return {u for k in issues for u in [k["source"], *(k.get("related") or [])]}


def curate(entries: list[dict], overrides: dict, hand: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """Apply the curation: drop the rejected ids and the fixes ``hand`` (the hand-entered sources)
    already holds, add the conditions of ``feature_trigger`` to the triggers of the entries with that
    package and feature, then replace triggers, families and symptoms by id."""
    out = []
    subjects = [re.compile(rx, re.I) for rx in overrides["reject_subject"]]
    for e in entries:
        subject = e.pop("_subject", "")
        if e["id"] in overrides["reject"] or e["source"] in hand or any(rx.search(subject) for rx in subjects):
            continue
        for pkg in e.get("packages") or {}:
            for feature, cond in (overrides["feature_trigger"].get(pkg) or {}).items():
                if feature in (e.get("features") or ()):
                    e["trigger"] = {**e["trigger"], **copy.deepcopy(cond)}
        for key in ("trigger", "family", "symptom"):
            if e["id"] in overrides[key]:
                e[key] = copy.deepcopy(overrides[key][e["id"]])
        if e["symptom"] == "slowdown":
            e.setdefault("size", "not measured by the fix")
        else:
            e.pop("size", None)
        out.append(e)
    return out


def verified(entries: list[dict], verbose: bool = False) -> list[dict]:
    """The entries the package's loader accepts whose example fires and whose near miss does not."""
    from moeplan.catalog.known_issue_table import KnownIssueDataError, parse_known_issues
    from moeplan.errors import InputError
    from moeplan.resolve.load import load_scenario

    keep = []
    for e in entries:
        try:
            (k,) = parse_known_issues({"schema": 1, "issues": [e]})
            ex, nm = load_scenario(copy.deepcopy(e["example"])), load_scenario(copy.deepcopy(e["near_miss"]))
        except (KnownIssueDataError, InputError, ValueError) as exc:
            if verbose:
                print(f"dropped {e['id']}: {exc}", file=sys.stderr)
            continue
        fires = k.triggered(ex) and k.version_status(ex.versions)[0] == "affected"
        if fires and k.version_status(nm.versions)[0] == "not_affected":
            keep.append(e)
        elif verbose:
            print(f"dropped {e['id']}: example does not fire ({e['trigger']})", file=sys.stderr)
    return keep


# ----------------------------------------------------------------------------------------------------
# the vendored file


def harvest_mirror(m: Mirror) -> tuple[list[dict], str]:
    """The proposed entries of one mirror (unique ids, oldest fix first) and the commit it was read at."""
    head = git(m.path, "rev-parse", "HEAD").strip()
    tags = [(v, t) for v, t in releases(m) if not v.is_prerelease or m.package == "megatron_bridge"]
    by_sha, by_subject = first_release(m, tags)
    finals = [(v, t) for v, t in tags if not v.is_prerelease]
    out: dict[str, dict] = {}
    for c in fix_commits(m, head):
        fixed = fixed_release(c, by_sha, by_subject)
        if fixed is None or fixed.is_prerelease:
            fixed = min((v for v, _ in finals if fixed is not None and v > fixed), default=None)
        if fixed is None:
            continue
        e = propose(m, c, tags, fixed)
        if e is not None:
            out.setdefault(e["id"], e)
    ordered = sorted(out.values(), key=lambda e: (Version(e["packages"][m.package]["fixed"]), e["reported"], e["id"]))
    return ordered, head


HEADER = """\
# GENERATED by scripts/harvest_known_issues.py: do not edit; curate in scripts/known_issues_overrides.yaml
# and rerun (`python scripts/harvest_known_issues.py --check` fails when this file is stale).
#
# Known issues harvested from the merged fixes of the repositories below (read at the commits named):
# affected = the releases before the first release that contains the fix, fixed = that release (a
# release tag; for DeepEP, the first commit declaring the version its package reports), trigger = the
# features the fix's files belong to (the script's path → feature map), symptom = the failure the fix's
# text names (unspecified: it names none), family = the most specific feature. Titles and workarounds are composed
# from these facts (i18n/*/rules_harvested.yaml), not copied from the sources. Every entry is
# certainty: reported (a warning); `moeplan check` folds the entries of one family into one finding.
#
{mirrors}
schema: 1
issues:
"""


class _NoAliases(yaml.SafeDumper):
    """A YAML dumper that writes a repeated mapping again rather than as an anchor and alias."""

    def ignore_aliases(self, data) -> bool:
        return True


CHECKOUTS_HEADER = """\
# megatron-core dev checkouts (the commits of the published Megatron-LM recipes whose version carries a
# dev.<sha> local label), each decided against the megatron_core entries above by git ancestry (the fix
# commit reachable from the checkout, or a commit of the same subject: a cherry-pick): carries = entries
# whose affected range holds the checkout's number but whose fix the checkout already has; lacks =
# entries whose range excludes its number but whose fix it does not have yet. Every other megatron_core
# entry above is decided by its range for these checkouts; any other checkout is undecided.
"""


def render(entries: list[dict], heads: dict[str, str], checkouts: dict | None = None) -> str:
    """The vendored YAML text: the header (each mirror and its commit), the entries, then the dev
    checkouts decided by ancestry (:func:`checkout_ancestry`) when there are any."""
    mirrors = "\n".join(f"# mirror {url} at {sha}" for url, sha in sorted(heads.items()))
    body = yaml.dump(
        entries, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=120, default_flow_style=None
    )
    body = "\n".join("  " + line if line else line for line in body.splitlines())
    text = HEADER.format(mirrors=mirrors) + body + "\n"
    if checkouts:
        more = yaml.dump(
            {"dev_checkouts": checkouts}, Dumper=_NoAliases, sort_keys=False, width=120, default_flow_style=None
        )
        text += CHECKOUTS_HEADER + more
    return text


def known_dev_checkouts(path: Path = RECIPE_RELEASES) -> dict[str, tuple[str, str]]:
    """The megatron-core dev checkouts of the published Megatron-LM recipes (the rows of
    ``moe_recipe_releases.yaml`` whose version has a ``dev.<sha>`` local label): the short sha of the
    label → (full commit, version), in sha order."""
    if not path.is_file():
        return {}
    out: dict[str, tuple[str, str]] = {}
    for row in (yaml.safe_load(path.read_text(encoding="utf-8")).get("recipes") or {}).values():
        local = Version(str(row["megatron_core"])).local or ""
        if local.startswith("dev."):
            out[local.removeprefix("dev.")] = (str(row["commit"]), str(row["megatron_core"]))
    return dict(sorted(out.items()))


def checkout_ancestry(
    mirror: Path, entries: list[dict], fixes: dict[str, tuple[str, str]], checkouts: dict | None = None
) -> dict:
    """Per dev checkout (``checkouts``: short sha → (commit, version); default
    :func:`known_dev_checkouts`): its commit, version and the megatron_core
    ``entries`` its number misjudges, decided by ancestry: ``carries`` (range holds the number, fix
    reachable from the checkout by sha or by subject, the way :func:`first_release` matches a
    cherry-pick) and ``lacks`` (range excludes the number, fix not reachable). ``fixes``: entry id →
    (fix sha, subject). A checkout missing from the mirror is left out (undecided)."""
    mcore = [e for e in entries if "megatron_core" in e["packages"] and e["id"] in fixes]
    out: dict[str, dict] = {}
    for short, (commit, version) in (known_dev_checkouts() if checkouts is None else checkouts).items():
        try:
            lines = git(mirror, "log", "--format=%H%x1f%s", commit).splitlines()
        except subprocess.CalledProcessError:
            continue
        shas = {line.partition("\x1f")[0] for line in lines}
        subjects = {n for line in lines if len(n := _norm_subject(line.partition("\x1f")[2])) >= 25}
        carries, lacks = [], []
        for e in mcore:
            sha, subject = fixes[e["id"]]
            has = sha in shas or _norm_subject(subject) in subjects
            numbered = SpecifierSet(e["packages"]["megatron_core"]["affected"]).contains(Version(version))
            if has and numbered:
                carries.append(e["id"])
            elif not has and not numbered:
                lacks.append(e["id"])
        out[short] = {"commit": commit, "megatron_core": version, "carries": carries, "lacks": lacks}
    return out


def build(mirrors: tuple[Mirror, ...] = MIRRORS, overrides: Path = OVERRIDES, verbose: bool = False) -> str:
    """The vendored file's text from ``mirrors`` and the curation in ``overrides``, with the known dev
    checkouts of megatron-core decided by ancestry (:func:`checkout_ancestry`)."""
    entries, heads = [], {}
    for m in mirrors:
        found, heads[m.url] = harvest_mirror(m)
        entries += found
    fixes = {e["id"]: (e.pop("_sha"), e["_subject"]) for e in entries if "megatron_core" in e["packages"]}
    curated = [compose_texts(e) for e in curate(entries, load_overrides(overrides), hand_sources())]
    kept = verified(curated, verbose)
    mcore = next((m for m in mirrors if m.package == "megatron_core"), None)
    checkouts = checkout_ancestry(mcore.path, kept, fixes) if mcore is not None else {}
    return render(kept, heads, checkouts)


def stats(text: str) -> str:
    """Counts of the vendored entries by family and by symptom."""
    issues = yaml.safe_load(text)["issues"]
    fam = Counter(e["family"] for e in issues)
    sym = Counter(e["symptom"] for e in issues)
    lines = [f"{len(issues)} entries", "by family:"] + [f"  {k}: {v}" for k, v in sorted(fam.items())]
    return "\n".join(lines + ["by symptom:"] + [f"  {k}: {v}" for k, v in sorted(sym.items())])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the output would change")
    ap.add_argument("--stats", action="store_true", help="print the counts by family and symptom")
    ap.add_argument("--verbose", action="store_true", help="name each dropped entry and why")
    args = ap.parse_args(argv)
    missing = [str(m.path) for m in MIRRORS if not m.path.is_dir()]
    if missing:
        print(f"skipped: mirrors absent ({', '.join(missing)}); the vendored file is left as it is")
        return 0
    text = build(verbose=args.verbose)
    if args.stats:
        print(stats(text))
    old = OUT.read_text(encoding="utf-8") if OUT.is_file() else None
    if args.check:
        print("unchanged" if old == text else f"{OUT.relative_to(ROOT)} would change")
        return 0 if old == text else 1
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main(sys.argv[1:]))
