"""Oracle for the exporter: every model / optimizer / DDP key we export exists in megatron-core
0.16.1's own dataclasses (``TransformerConfig``, ``OptimizerConfig``, ``DistributedDataParallelConfig``)
unless the key is newer than 0.16 (``moeplan.io.keys.KEY_MIN_MCORE``, then it is not exported for 0.16),
and a layout our rules call valid under 0.16.1 constructs a ``TransformerConfig`` without error."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

ORACLE_SKIP = (
    "the oracle tests need the real megatron-core and torch (pip install -e '.[oracle]', Python 3.11); "
    "CI runs them: python -m pytest tests/oracle -m oracle"
)
pytest.importorskip("megatron.core", reason=ORACLE_SKIP)
pytestmark = pytest.mark.oracle

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcore_harness import mcore_config_check  # noqa: E402
from megatron.core.distributed import DistributedDataParallelConfig  # noqa: E402
from megatron.core.optimizer import OptimizerConfig  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402

from moeplan import load_scenario, validate  # noqa: E402
from moeplan.io.export import bridge_sections  # noqa: E402
from moeplan.io.keys import BRIDGE_PATHS, BRIDGE_PROVIDER_FIELDS, KEY_MIN_MCORE  # noqa: E402

FIELDS = {
    "model": {f.name for f in dataclasses.fields(TransformerConfig)},
    "optimizer": {f.name for f in dataclasses.fields(OptimizerConfig)},
    "ddp": {f.name for f in dataclasses.fields(DistributedDataParallelConfig)},
}


def test_every_mapped_key_exists_in_megatron_core_0_16():
    for _key, paths in BRIDGE_PATHS.items():
        for path in paths:
            sec, field = path.split(".", 1)
            if sec in FIELDS and field not in KEY_MIN_MCORE and field not in BRIDGE_PROVIDER_FIELDS:
                assert field in FIELDS[sec], f"{path} is not a field of megatron-core 0.16.1's {sec} dataclass"


LAYOUTS = [
    {
        "tensor_model_parallel_size": 2,
        "expert_model_parallel_size": 8,
        "recompute_granularity": "selective",
        "recompute_modules": ["moe_act", "layernorm"],
        "moe_token_dispatcher_type": "alltoall",
        "moe_grouped_gemm": True,
    },
    {
        "pipeline_model_parallel_size": 2,
        "virtual_pipeline_model_parallel_size": 2,
        "expert_model_parallel_size": 4,
        "recompute_granularity": "full",
        "recompute_method": "uniform",
        "recompute_num_layers": 1,
    },
    {
        "tensor_model_parallel_size": 4,
        "context_parallel_size": 2,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
        "moe_token_dispatcher_type": "alltoall",
    },
    {
        "pipeline_model_parallel_size": 2,
        "num_layers_in_first_pipeline_stage": 3,
        "num_layers_in_last_pipeline_stage": 5,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 0.5,
        "use_precision_aware_optimizer": True,
        "use_distributed_optimizer": True,
    },
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_valid_exported_layout_constructs_transformer_config(layout):
    scn = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "model_overrides": {"num_layers": 8},
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
            "layout": layout,
            "framework": "megatron-core",
            "versions": {"megatron_core": "0.16.1"},
        }
    )
    assert validate(scn).verdict in ("valid", "warn")
    sections = bridge_sections(scn)
    m = scn.model
    kwargs = {k: v for k, v in sections["model"].items() if k in FIELDS["model"] and k != "seq_length"}
    kwargs.update(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.kv_channels,
        ffn_hidden_size=m.moe_ffn_hidden_size,
        num_moe_experts=m.num_moe_experts,
        moe_router_topk=m.moe_router_topk,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=m.add_bias_linear,
        gated_linear_unit=m.gated_linear_unit,
    )
    if kwargs.get("pipeline_model_parallel_size", 1) > 1:
        import torch

        kwargs["pipeline_dtype"] = torch.bfloat16
    ok, msg = mcore_config_check(**kwargs)
    assert ok, msg
    import megatron.core.utils as mcu
    from packaging.version import Version

    saved = mcu._te_version
    mcu._te_version = saved or Version("2.10.0")  # the optimizer's TE-gated checks, as the harness does
    try:
        OptimizerConfig(
            **{
                k: v
                for k, v in sections.get("optimizer", {}).items()
                if k in FIELDS["optimizer"] and not k.endswith("_dtype")
            }
        )
    finally:
        mcu._te_version = saved
