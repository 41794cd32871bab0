"""Write src/moeplan/catalog/data/moe_recipe_releases.yaml: the megatron-core release each vendored
Megatron-LM MoE recipe (tests/data/recipes/megatron_lm, PROVENANCE.md) was published with.

A recipe of ``examples/moe_recipes`` runs from the Megatron-LM checkout it lives in, so its release is
the one ``megatron/core/package_info.py`` states at the recipe's commit (``MAJOR.MINOR.PATCH`` and
``PRE_RELEASE``). The script reads that file from a bare Megatron-LM mirror with ``git show``, keys
each row by the SHA-256 of the recipe's text (what ``check --from megatron-lm-yaml`` recognises) and
names the commit, its date and the file read. A recipe whose commit the mirror lacks is left out and
listed on stderr (the import then keeps moeplan's newest release and says so).

    python scripts/import_moe_recipe_releases.py [--mirror DIR] [--check]

``--check`` writes nothing and exits 1 when the packaged file would change. Without the mirror it
skips (exit 0) and keeps the packaged table.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PROVENANCE = ROOT / "tests" / "data" / "recipes" / "PROVENANCE.md"
VENDORED = ROOT / "tests" / "data" / "recipes"
OUT = ROOT / "src" / "moeplan" / "catalog" / "data" / "moe_recipe_releases.yaml"
MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
PACKAGE_INFO = "megatron/core/package_info.py"
#: a PROVENANCE.md row of a Megatron-LM recipe: | file | repository | path | commit | date |
_ROW = re.compile(
    r"^\|\s*(megatron_lm/\S+\.yaml)\s*\|\s*NVIDIA/Megatron-LM\s*\|\s*(\S+)\s*\|\s*([0-9a-f]{40})\s*\|\s*([^|]+?)\s*\|"
)
_FIELD = re.compile(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*['\"]?([^'\"\s#]*)['\"]?", re.M)


def provenance_rows(text: str) -> list[tuple[str, str, str, str]]:
    """(vendored file, upstream path, commit, date) of every Megatron-LM recipe row of PROVENANCE.md."""
    return [m.groups() for line in text.splitlines() if (m := _ROW.match(line))]  # type: ignore[misc]


def release_at(mirror: Path, commit: str) -> str | None:
    """megatron-core's version at ``commit`` as a build from that checkout reports it: ``MAJOR.MINOR.PATCH``
    + ``PRE_RELEASE`` of package_info.py, with the commit as local label (package_info appends the git
    hash to ``__version__``), ``dev.`` before it for a commit of the dev line or one with the dev tree's
    features (moeplan's way to write a dev-branch checkout, ``moeplan.rules.base.is_dev_build``); None when the mirror lacks the commit."""
    run = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{commit}:{PACKAGE_INFO}"], capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        return None
    fields = dict(_FIELD.findall(run.stdout))
    release = f"{fields['MAJOR']}.{fields['MINOR']}.{fields['PATCH']}{fields.get('PRE_RELEASE', '')}"
    line = "dev." if _on_dev_line(mirror, commit) or _has_dev_features(mirror, commit) else ""
    return f"{release}+{line}{commit[:10]}"  # the checkout's __version__: package_info appends the git hash


def _ahead_of(mirror: Path, commit: str, branch: str) -> int:
    """Commits ``commit`` has beyond its merge base with ``branch``."""
    git = ["git", "-C", str(mirror)]
    base = subprocess.run([*git, "merge-base", commit, branch], capture_output=True, text=True, check=True)
    count = subprocess.run(
        [*git, "rev-list", "--count", f"{base.stdout.strip()}..{commit}"], capture_output=True, text=True, check=True
    )
    return int(count.stdout)


#: the dev tree's features moeplan gates on a dev build (``moeplan.rules.base.is_dev_build``):
#: DeepSeek-V4's attention variant and the CP partition mode, in transformer_config.py
DEV_FEATURES = ("dsv4_hybrid", "cp_partition_mode")


def _has_dev_features(mirror: Path, commit: str) -> bool:
    """True when ``commit``'s transformer_config.py declares a feature of :data:`DEV_FEATURES` (a
    ``main`` commit after the dev tree's DeepSeek-V4 work was merged, still numbered 0.19.0)."""
    run = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{commit}:megatron/core/transformer/transformer_config.py"],
        capture_output=True,
        text=True,
        check=False,
    )
    return run.returncode == 0 and any(f in run.stdout for f in DEV_FEATURES)


def _on_dev_line(mirror: Path, commit: str) -> bool:
    """True when ``commit`` branches off Megatron-LM's ``dev`` branch (fewer commits beyond its merge base
    with ``dev`` than with ``main``): a dev-branch build, which carries the number of its last release
    line while it already has the dev tree's features (DeepSeek-V4, keys of later releases)."""
    return _ahead_of(mirror, commit, "dev") < _ahead_of(mirror, commit, "main")


def build(mirror: Path) -> tuple[dict, list[str]]:
    """The table (schema 1, rows keyed by the recipe text's SHA-256) and the recipes left out."""
    rows: dict[str, dict] = {}
    missing: list[str] = []
    for file, path, commit, date in provenance_rows(PROVENANCE.read_text(encoding="utf-8")):
        version = release_at(mirror, commit)
        if version is None:
            missing.append(f"{file} ({commit[:10]} not in {mirror})")
            continue
        digest = hashlib.sha256((VENDORED / file).read_bytes()).hexdigest()
        rows[digest] = {
            "recipe": path,
            "commit": commit,
            "date": date,
            "megatron_core": version,
            "source": f"NVIDIA/Megatron-LM {PACKAGE_INFO}@{commit[:10]}",
        }
    return {"schema": 1, "recipes": dict(sorted(rows.items(), key=lambda kv: kv[1]["recipe"]))}, missing


HEADER = """\
# The megatron-core release each Megatron-LM MoE recipe (examples/moe_recipes) was published with, keyed by
# the SHA-256 of the recipe's text. Generated by scripts/import_moe_recipe_releases.py from the vendored
# recipes (tests/data/recipes/PROVENANCE.md) and megatron/core/package_info.py at each recipe's commit;
# read by moeplan.catalog.moe_recipe_releases. Do not edit by hand.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if not (args.mirror / "HEAD").is_file():
        print(f"skipped: no Megatron-LM git mirror at {args.mirror}; the packaged table is kept", file=sys.stderr)
        return 0
    table, missing = build(args.mirror)
    text = HEADER + yaml.safe_dump(table, sort_keys=False, allow_unicode=True, width=120)
    for m in missing:
        print(f"left out: {m}", file=sys.stderr)
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("unchanged" if same else f"{OUT.relative_to(ROOT)} would change")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(table['recipes'])} recipes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
