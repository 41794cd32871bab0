"""Oracle: the vendored megatron-core key table (``inputs/data/megatron_keys.json``) == the table
``scripts/gen_megatron_keys.py`` reads from the installed megatron-core's own source files.

The package directory is found with ``importlib.util.find_spec`` and its files are read with ``ast``
(nothing of megatron-core is imported); every config dataclass field the generator reads (class,
annotation, default) must be in the vendored table at the installed release with the same
annotation and default, and every vendored field of that release must be in the installed sources.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

ORACLE_SKIP = (
    "the oracle tests need the real megatron-core (pip install -e '.[oracle]', Python 3.11); "
    "CI runs them: python -m pytest tests/oracle -m oracle"
)
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.oracle


def _package_root() -> Path:
    try:
        spec = importlib.util.find_spec("megatron.core")
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(ORACLE_SKIP)
    return Path(next(iter(spec.submodule_search_locations))).parents[1]


def _generator():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_megatron_keys
    finally:
        sys.path.pop(0)
    return gen_megatron_keys


def test_vendored_megatron_core_table_equals_the_installed_sources():
    from moeplan.inputs import megatron_keys as mk

    root = _package_root()
    version = importlib.metadata.version("megatron-core")
    assert version in mk.releases("megatron-core"), f"megatron-core {version} is not a tabled release"
    gen = _generator()
    installed = gen.mcore_classes(gen.dir_reader(root))
    assert {"TransformerConfig", "ModelParallelConfig", "OptimizerConfig", "DistributedDataParallelConfig"} <= set(
        installed
    )
    got = {(cls, k): (f["type"], f["default"]) for cls, fields in installed.items() for k, f in fields.items()}
    vendored = {}
    for key in mk.table_keys("megatron-core"):
        for p in mk.lookup(key):
            if p.table == "megatron-core" and version in mk.present_in(p):
                vendored[(p.at, key)] = (mk.type_at(p, version), mk.default_at(p, version))
    assert got == vendored
