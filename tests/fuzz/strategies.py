"""Hostile values and mutations for the fuzzers: the payloads of an adversarial pass
(huge and non-ASCII numbers, control characters, shell and Hydra payloads, YAML bombs, deep nesting)
laid into valid seed documents by a mutation at a random place."""

from __future__ import annotations

import math

import yaml
from hypothesis import strategies as st

from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.model_spec import PartialModelSpec
from moeplan.inputs.schema import AssumptionsInput, OverheadsInput, ReportedInput, SystemInput, VersionsInput
from moeplan.inputs.training import TrainingSpec

#: a marker file a successful shell injection would create
PWNED = "PWNED"

SHELL_PAYLOADS = [
    f"OVERRIDES=(;touch${{IFS}}{PWNED};#",
    f"$(touch {PWNED})",
    f"`touch {PWNED}`",
    f"; touch {PWNED}",
    f"a\ntouch {PWNED}",
    f"'\"; touch {PWNED}; echo \"'",
    f"x' ; touch {PWNED} ; '",
    "${IFS}",
]
HYDRA_PAYLOADS = [
    "aux_loss\ncheckpoint.save=/evil",
    "aux_loss\rcheckpoint.save=/evil",
    "aux_loss\vcheckpoint.save=/evil",
    "aux_loss\u2028checkpoint.save=/evil",
    "aux_loss\x85checkpoint.save=/evil",
    "a,b",
    "${oc.env:HOME}",
    "\\${x}",
    "x\\",
    "a'b",
    "[a,b]",
    "{a: 1}",
    "null",
    "010",
    "1e999",
    "a b=c",
]
TEXT_PAYLOADS = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "²",
    "８",
    "٣",
    "r2d2",
    "0.16.1",
    "core_r0.16.0",
    "\u202e",
    "\ufeff",
    "x" * 70000,
    "*" * 500,
    "&a [1]",
    "*a",
    "!!python/object/apply:os.system ['touch PWNED']",
    *SHELL_PAYLOADS,
    *HYDRA_PAYLOADS,
]
INT_PAYLOADS = [0, -1, 1, 2, 3, 7, 64, 2**20, 2**24 + 1, 2**31, 2**63, 10**9, 10**30, 10**400, 10**4000]
FLOAT_PAYLOADS = [0.0, -0.0, 0.5, 1.5, 1e-320, 1e30, 1e308, math.inf, -math.inf, math.nan]

hostile_text = st.sampled_from(TEXT_PAYLOADS) | st.text(max_size=40)
hostile_int = st.sampled_from(INT_PAYLOADS) | st.integers(min_value=-(2**70), max_value=2**70)
hostile_float = st.sampled_from(FLOAT_PAYLOADS) | st.floats(allow_nan=True, allow_infinity=True)
hostile_scalar = hostile_text | hostile_int | hostile_float | st.booleans() | st.none()
hostile_value = st.recursive(
    hostile_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)

#: keys of each scenario section (mutations pick among them and a few unknown ones)
SECTION_KEYS = {
    "layout": sorted(LayoutSpec.model_fields),
    "training": sorted(TrainingSpec.model_fields),
    "system": sorted(SystemInput.model_fields),
    "versions": sorted(VersionsInput.model_fields),
    "reported": sorted(ReportedInput.model_fields),
    "overheads": sorted(OverheadsInput.model_fields),
    "assumptions": sorted(AssumptionsInput.model_fields),
    "environment": ["PYTORCH_CUDA_ALLOC_CONF", "FOO", "1BAD", "A B", "X\nY"],
    "model_overrides": sorted(
        f for f in PartialModelSpec.__dataclass_fields__ if f not in ("published_params", "measured_params")
    ),
    "workload": [
        "image_patches_per_sequence",
        "image_tokens_per_sequence",
        "images_per_sequence",
        "useful_fraction",
        "mean_patches_per_image",
        "seq_length",
    ],
}
TOP_KEYS = ["model", "framework", "recipe_defaults", "name", "no_such_key"]


@st.composite
def mutated_mapping(draw, seed: dict, sections: dict[str, list[str]] = SECTION_KEYS, max_mutations: int = 3) -> dict:
    """``seed`` with 1..``max_mutations`` mutations: a hostile value at a known or unknown key of a
    section, a deleted key, a section replaced by a hostile value, or a top-level key changed."""
    data = yaml.safe_load(yaml.safe_dump(seed))  # a deep copy
    for _ in range(draw(st.integers(1, max_mutations))):
        kind = draw(st.sampled_from(["set", "set", "set", "delete", "section", "top"]))
        if kind == "top":
            data[draw(st.sampled_from(TOP_KEYS))] = draw(hostile_value)
            continue
        sec = draw(st.sampled_from(sorted(sections)))
        if kind == "section":
            data[sec] = draw(hostile_value)
            continue
        node = data.get(sec)
        if not isinstance(node, dict):
            node = data[sec] = {}
        if kind == "delete" and node:
            node.pop(draw(st.sampled_from(sorted(node))))
            continue
        key = draw(st.sampled_from(sections[sec]) | st.text(min_size=1, max_size=12))
        node[key] = draw(hostile_value)
    return data


def to_yaml(data: object) -> str:
    """YAML text of a mutated document (values YAML cannot say are written as text)."""
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, ValueError, RecursionError):
        return repr(data)


ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9)
)
TEXT_MUTATIONS = [
    ALIAS_BOMB,
    "layout: {tensor_model_parallel_size: 2, tensor_model_parallel_size: 4}\n",
    "x: !!python/object/apply:os.system ['touch PWNED']\n",
    "x: " + "[" * 5000 + "]" * 5000 + "\n",
    "x: " + "9" * 5000 + "\n",
    "\x00\x01\x02\xff binary",
    "x: 1e999\n",
    "x: .nan\n",
    "%YAML 1.1\n---\nx: 1\n",
    "--- 1\n--- 2\n",
]


@st.composite
def mutated_text(draw, text: str) -> str:
    """``text`` with a raw mutation: a line replaced, a payload inserted, the text cut, or a bomb."""
    lines = text.splitlines()
    kind = draw(st.sampled_from(["replace", "insert", "cut", "bomb", "none"]))
    if kind == "none" or not lines:
        return text
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "bomb":
        return text + "\n" + draw(st.sampled_from(TEXT_MUTATIONS))
    i = draw(st.integers(0, len(lines) - 1))
    payload = draw(hostile_text | st.sampled_from(TEXT_MUTATIONS))
    if kind == "replace":
        key, sep, _ = lines[i].partition(":") if ":" in lines[i] else lines[i].partition("=")
        lines[i] = f"{key}{sep} {payload}" if sep else payload
    else:
        lines.insert(i, payload)
    return "\n".join(lines) + "\n"


__all__ = [
    "FLOAT_PAYLOADS",
    "HYDRA_PAYLOADS",
    "INT_PAYLOADS",
    "PWNED",
    "SECTION_KEYS",
    "SHELL_PAYLOADS",
    "TEXT_PAYLOADS",
    "hostile_float",
    "hostile_int",
    "hostile_scalar",
    "hostile_text",
    "hostile_value",
    "mutated_mapping",
    "mutated_text",
    "to_yaml",
]
