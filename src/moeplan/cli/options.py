"""What every command shares: exit codes, the InputError → exit 2 mapping, the option declarations,
and :func:`scenario_options`, which declares the scenario flags once for every command that takes them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from moeplan.errors import InputError
from moeplan.inputs.overrides import FLAG_NAMES, ScenarioFlags

EXIT_OK, EXIT_RULE, EXIT_INPUT = 0, 1, 2


@contextlib.contextmanager
def input_errors() -> Iterator[None]:
    """Turn an :class:`InputError` raised inside the block into ``error: ...`` on stderr and exit 2."""
    try:
        yield
    except InputError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(EXIT_INPUT) from None


def exit_with(ok: bool) -> None:
    """Exit 0 when ``ok``, else 1 (a rule is broken, it does not fit, B is slower, ...)."""
    raise typer.Exit(EXIT_OK if ok else EXIT_RULE)


# Options shared by several commands (typer reads the Annotated metadata).
ScenarioArg = Annotated[Optional[Path], typer.Argument(help="Scenario YAML (model, system, training, layout).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Every reason, source and default behind the short default output.")
]
CalibrationOpt = Annotated[
    Optional[Path], typer.Option("--calibration", help="A profile from `moeplan calibrate` for step times.")
]
WorkloadOpt = Annotated[
    Optional[Path], typer.Option("--workload", help="A workload YAML from `moeplan vlm-stats -o` (VLMs).")
]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="HF id, short name or config.json path.")]
HeadroomOpt = Annotated[
    Optional[float], typer.Option("--headroom-gib", min=0.0, help="GiB kept free per GPU (default 5 % of HBM).")
]

LangOpt = Annotated[
    Optional[str],
    typer.Option(
        "--lang",
        help="Language of the human-readable output: en or zh (default: from LC_ALL / LC_MESSAGES / LANG, "
        "e.g. zh_CN.UTF-8). --json stays English.",
    ),
]

#: the scenario flags, one option per :class:`ScenarioFlags` field, in that order
SCENARIO_OPTIONS: dict[str, Any] = {
    "model": ModelOpt,
    "gpu": Annotated[
        Optional[str],
        typer.Option("--gpu", help="a100, h100, h200, b200, b300, gb200, gb300, a800, h800, h20 (moeplan gpus)."),
    ],
    "num_gpus": Annotated[Optional[int], typer.Option("--num-gpus", "-n", min=1, help="World size.")],
    "seq_length": Annotated[Optional[int], typer.Option("--seq-length", "-s", min=1, help="Tokens per sequence.")],
    "mbs": Annotated[Optional[int], typer.Option("--mbs", min=1, help="micro_batch_size (sequences).")],
    "gbs": Annotated[
        Optional[int], typer.Option("--global-batch-size", "--gbs", min=1, help="global_batch_size (sequences).")
    ],
    "tokens_per_step": Annotated[
        Optional[int],
        typer.Option("--tokens-per-step", min=1, help="The global batch in tokens (GBS ≈ this / seq length)."),
    ],
    "precision": Annotated[
        Optional[str],
        typer.Option("--precision", help="bf16, fp8-tensorwise, fp8-delayed, fp8-blockwise, mxfp8, nvfp4."),
    ],
    "tp": Annotated[Optional[int], typer.Option("--tp", min=1, help="tensor_model_parallel_size")],
    "pp": Annotated[Optional[int], typer.Option("--pp", min=1, help="pipeline_model_parallel_size")],
    "vpp": Annotated[Optional[int], typer.Option("--vpp", min=1, help="virtual_pipeline_model_parallel_size")],
    "cp": Annotated[Optional[int], typer.Option("--cp", min=1, help="context_parallel_size")],
    "ep": Annotated[Optional[int], typer.Option("--ep", min=1, help="expert_model_parallel_size")],
    "etp": Annotated[Optional[int], typer.Option("--etp", min=1, help="expert_tensor_parallel_size")],
    "sets": Annotated[
        Optional[list[str]],
        typer.Option(
            "--set",
            help="Any other key: section.key=value (YAML value), e.g. layout.recompute_modules=\\[moe_act,layernorm]; "
            "nested: system.gpu_overrides.usable_hbm_gib=75; top-level: recipe_defaults=mbridge-perf. Repeatable.",
        ),
    ],
}


def scenario_options(*names: str, **replace: Any) -> Callable[[Callable], Callable]:
    """Declare the scenario flags of a command once: the decorated function takes one parameter
    ``flags: ScenarioFlags``, and typer sees, in its place, one option per flag.

    Args:
        names: the flags to offer, in ``--help`` order (default: all 15). A name that is not a flag
            is one of the function's own parameters, moved to that place in ``--help``.
        replace: another declaration for a flag (e.g. ``gbs=Annotated[...]`` with more names).

    Returns:
        The decorator. The command receives ``flags`` with the flags not offered left at None.

    Raises:
        KeyError: (when the module is imported) a name that is neither a flag nor a parameter.
    """
    offered = names or FLAG_NAMES

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = {k: p for k, p in sig.parameters.items() if k != "flags"}
        placed = [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=replace.get(n, opt))
            if (opt := SCENARIO_OPTIONS.get(n)) is not None
            else own.pop(n)
            for n in offered
        ]
        params: list[inspect.Parameter] = []
        for k, p in sig.parameters.items():
            if k == "flags":
                params += placed
            elif k in own:  # not moved into the flags' place
                params.append(p)
        flag_names = [n for n in offered if n in SCENARIO_OPTIONS]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in flag_names}
            given["sets"] = tuple(given.get("sets") or ())
            return fn(flags=ScenarioFlags(**given), **kwargs)

        del command.__wrapped__  # typer reads the signature below, not fn's
        # mypy types functools.wraps' result without __signature__; inspect (and typer) read it off any function
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


FromOpt = Annotated[
    Optional[str],
    typer.Option(
        "--from",
        help="Read SCENARIO as mbridge-yaml, mbridge-overrides, megatron-lm-args, megatron-log (the argument dump), megatron-lm-yaml (a Megatron-LM MoE recipe), verl-yaml, slime-args, nemo-rl-yaml, ms-swift-args, skyrl-overrides; or mbridge-recipe with a catalog perf recipe id as SCENARIO.",
    ),
]


__all__ = [
    "FromOpt",
    "EXIT_INPUT",
    "EXIT_OK",
    "EXIT_RULE",
    "SCENARIO_OPTIONS",
    "CalibrationOpt",
    "HeadroomOpt",
    "JsonOpt",
    "LangOpt",
    "ModelOpt",
    "ScenarioArg",
    "VerboseOpt",
    "WorkloadOpt",
    "exit_with",
    "input_errors",
    "scenario_options",
]
