"""Generate ``src/moeplan/inputs/data/megatron_keys.json``: every configuration key of megatron-core,
Megatron-LM and Megatron Bridge, per release, read from their sources with :mod:`ast` (never imported).

What it reads, per release:

- megatron-core: the config dataclasses a training run sets (:data:`MCORE_FILES`: ``ModelParallelConfig``,
  ``TransformerConfig``, ``MLATransformerConfig``, ``OptimizerConfig``, ``DistributedDataParallelConfig``,
  the torch-FSDP and CUDA-graph configs where a release has them): each field's name, annotation and
  default, under the class that declares it;
- Megatron-LM: ``megatron/training/arguments.py``: every ``add_argument`` call (flags, dest, type,
  default, action, nargs) and, from 0.16 on, the flags ``ArgumentGroupFactory(TransformerConfig,
  exclude=[...])`` derives from the dataclass (``--name`` with ``_`` → ``-``; a bool defaulting to true
  becomes ``--no-name``), as ``megatron/training/argument_utils.py`` builds them;
- Megatron Bridge: ``ConfigContainer``'s sections (``training/config.py``) and their dataclasses,
  ``model`` read as ``GPTModelProvider`` (its own fields and its Bridge bases); a section whose class
  derives from a megatron-core class is recorded with that class, whose keys it also accepts.

Sources: the git mirrors ``/work/.mirror/NVIDIA+Megatron-LM/repo`` (tags :data:`MCORE_TAGS`, and the
``dev`` branch at a pinned commit) and ``/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo`` (tags
:data:`BRIDGE_TAGS`). :func:`mcore_tables` reads the same files from a directory (an unpacked wheel or
an installed ``site-packages``), which the oracle test uses to regenerate the installed release.

Only facts are written: key names, annotation text, default text, releases. No docstrings or code.

Usage::

    python scripts/gen_megatron_keys.py          # write the table
    python scripts/gen_megatron_keys.py --check  # exit 1 when the table would change
    python scripts/gen_megatron_keys.py --package-dir DIR  # print the fields of an unpacked wheel

Exit status: 0 written or unchanged, or skipped because no mirror is present (said on stderr);
1 ``--check`` found a difference; 2 ``--package-dir`` holds no megatron-core.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src/moeplan/inputs/data/megatron_keys.json"
MIRRORS = Path("/work/.mirror")
MLM_REPO = MIRRORS / "NVIDIA+Megatron-LM/repo"
BRIDGE_REPO = MIRRORS / "NVIDIA-NeMo+Megatron-Bridge/repo"

#: megatron-core release → git ref (the newest patch of each minor from 0.14; ``dev`` pinned to a commit)
MCORE_TAGS: dict[str, str] = {
    "0.14.0": "core_v0.14.0",
    "0.15.3": "core_v0.15.3",
    "0.16.1": "core_v0.16.1",
    "0.17.1": "core_v0.17.1",
    "0.18.2": "core_v0.18.2",
    "0.19.0": "core_v0.19.0",
    "0.20.0.dev0": "d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1",
}
#: Megatron Bridge release → git tag (the two newest minor releases)
BRIDGE_TAGS: dict[str, str] = {"0.5.1": "v0.5.1", "0.6.0": "v0.6.0"}

#: megatron-core files holding config dataclasses a training run sets (relative to the package root)
MCORE_FILES = (
    "megatron/core/model_parallel_config.py",
    "megatron/core/transformer/transformer_config.py",
    "megatron/core/optimizer/optimizer_config.py",
    "megatron/core/distributed/distributed_data_parallel_config.py",
    "megatron/core/distributed/torch_fully_sharded_data_parallel_config.py",
    "megatron/core/transformer/cuda_graph_config.py",
)
MLM_ARGUMENTS = "megatron/training/arguments.py"
BRIDGE_CONFIG = "src/megatron/bridge/training/config.py"
BRIDGE_MODEL_PROVIDER = ("src/megatron/bridge/models/gpt_provider.py", "GPTModelProvider")
#: longest default text kept (a longer expression is cut with an ellipsis)
MAX_TEXT = 120

Reader = Callable[[str], "str | None"]


class _Batch:
    """One ``git cat-file --batch`` process per repository: blobs by ``ref:path``, read once each."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.cache: dict[str, str | None] = {}

    def read(self, spec: str) -> str | None:
        if spec not in self.cache:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(spec.encode() + b"\n")
            self.proc.stdin.flush()
            head = self.proc.stdout.readline().split()
            text = None
            if len(head) == 3 and head[1] in (b"blob", b"tree", b"commit", b"tag"):
                data = self.proc.stdout.read(int(head[2]))
                self.proc.stdout.read(1)
                text = data.decode("utf-8") if head[1] == b"blob" else None
            self.cache[spec] = text
        return self.cache[spec]


_BATCHES: dict[Path, _Batch] = {}


def git_reader(repo: Path, ref: str) -> Reader:
    """A reader of ``repo`` at ``ref``: path → text, None when the file is not there."""
    batch = _BATCHES.setdefault(repo, _Batch(repo))
    return lambda rel: batch.read(f"{ref}:{rel}")


def dir_reader(root: Path) -> Reader:
    """A reader of a directory (``site-packages`` or an unpacked wheel): path → text, None when absent."""

    def read(rel: str) -> str | None:
        p = root / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    return read


def commit_of(repo: Path, ref: str) -> str:
    """The commit ``ref`` names in ``repo``."""
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", f"{ref}^{{commit}}"], capture_output=True, check=True)
    return out.stdout.decode().strip()


def _text(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    t = " ".join(ast.unparse(node).split())
    return t if len(t) <= MAX_TEXT else t[: MAX_TEXT - 1] + "…"


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for d in cls.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if (isinstance(f, ast.Name) and f.id == "dataclass") or (
            isinstance(f, ast.Attribute) and f.attr == "dataclass"
        ):
            return True
    return False


def _default(value: ast.expr | None) -> str | None:
    """The default's text: ``field(default=X)`` → X, ``field(default_factory=F)`` → ``F()`` (a lambda's
    body), no default → None."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "field":
        kw = {k.arg: k.value for k in value.keywords}
        if "default" in kw:
            return _text(kw["default"])
        fac = kw.get("default_factory")
        if isinstance(fac, ast.Lambda):
            return _text(fac.body)
        return f"{_text(fac)}()" if fac is not None else None
    return _text(value)


def class_fields(cls: ast.ClassDef) -> dict[str, dict]:
    """The fields a dataclass body declares: name → {"type", "default"}; ``ClassVar`` and private
    (``_``) names left out."""
    out: dict[str, dict] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name, ann = node.target.id, _text(node.annotation) or ""
        if name.startswith("_") or ann.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            continue
        out[name] = {"type": ann, "default": _default(node.value)}
        flags = _meta_flags(node.value)
        if flags:
            out[name]["_flags"] = flags
    return out


def _meta_flags(value: ast.expr | None) -> list[str]:
    """The ``arg_names`` of ``field(metadata={"argparse_meta": {...}})`` (Megatron-LM's factory uses
    them for the flag), when written as a literal; else empty."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "field"):
        return []
    kw = {k.arg: k.value for k in value.keywords}
    meta = _const(kw["metadata"]) if "metadata" in kw else None
    names = (meta or {}).get("argparse_meta", {}).get("arg_names") if isinstance(meta, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def dataclasses_of(text: str) -> dict[str, ast.ClassDef]:
    """The top-level dataclasses of a module's text, by name."""
    tree = _parse(text)
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and _is_dataclass(n)}


def mcore_classes(read: Reader) -> dict[str, dict[str, dict]]:
    """megatron-core's config dataclasses (those named ``*Config`` in :data:`MCORE_FILES`): class →
    its own fields (inherited ones stay under the base that declares them)."""
    out: dict[str, dict[str, dict]] = {}
    for rel in MCORE_FILES:
        text = read(rel)
        if text is None:
            continue
        for name, cls in dataclasses_of(text).items():
            if name.endswith("Config"):
                out[name] = class_fields(cls)
    return out


def _bases(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, (ast.Name, ast.Attribute))]


def _all_fields(classes: dict[str, ast.ClassDef], name: str) -> dict[str, dict]:
    """A class's fields with those of its bases in the same module (base first, as ``fields()`` orders)."""
    cls = classes[name]
    out: dict[str, dict] = {}
    for b in reversed(_bases(cls)):
        if b in classes:
            out.update(_all_fields(classes, b))
    out.update(class_fields(cls))
    return out


def _const(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _arg_record(call: ast.Call) -> tuple[str, dict] | None:
    """(dest, record) of one ``add_argument`` call; None for a positional argument."""
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    longs = [f for f in flags if f.startswith("--")]
    if not longs:
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    dest = _const(kw["dest"]) if "dest" in kw else longs[0][2:].replace("-", "_")
    action = _const(kw["action"]) if "action" in kw else None
    rec: dict = {"flag": longs[0]}
    if action is not None:
        rec["action"] = action if isinstance(action, str) else _text(kw["action"])
    for k in ("type", "nargs", "default"):
        if k in kw:
            rec[k] = _text(kw[k])
    if "default" not in rec and action in ("store_true", "store_false"):
        rec["default"] = "False" if action == "store_true" else "True"
    return (str(dest), rec)


def _factory_args(cfg: dict[str, dict], exclude: set[str]) -> dict[str, dict]:
    """The flags ``ArgumentGroupFactory`` derives from a dataclass's fields (argument_utils.py)."""
    out: dict[str, dict] = {}
    for name, f in cfg.items():
        if name in exclude:
            continue
        flag = (f.get("_flags") or ["--" + name.replace("_", "-")])[0]
        rec = {"flag": flag, "type": f["type"], "default": f["default"]}
        if f["type"] in ("bool", "Optional[bool]", "bool | None"):
            rec = {"flag": flag, "action": "store_true", "default": f["default"]}
            if f["default"] == "True" and not f.get("_flags"):
                rec = {"flag": "--no-" + name.replace("_", "-"), "action": "store_false", "default": "True"}
        out[name] = rec
    return out


def mlm_arguments(read: Reader, transformer_fields: dict[str, dict]) -> dict[str, dict]:
    """Megatron-LM's arguments: dest → {"flag", "type", "default", "action", "nargs"}, in source order
    (the first call naming a dest wins, as argparse keeps the first default). ``transformer_fields``:
    every field of ``TransformerConfig`` with its bases', for its factory-built group; the other
    factories' dataclasses (``TrainingConfig``, ``RNGConfig``, ...) are found through the imports of
    ``arguments.py``. Empty when the file is absent."""
    text = read(MLM_ARGUMENTS)
    if text is None:
        return {}
    calls = [n for n in ast.walk(_parse(text)) if isinstance(n, ast.Call)]
    out: dict[str, dict] = {}
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if fname == "add_argument":
            got = _arg_record(node)
            if got is not None:
                out.setdefault(got[0], got[1])
        elif fname == "ArgumentGroupFactory" and node.args:
            cls = _text(node.args[0]) or ""
            fields = transformer_fields if cls == "TransformerConfig" else repo_class(read, MLM_ARGUMENTS, cls, "")[0]
            for dest, rec in _factory_args(fields, _exclude(text, node)).items():
                out.setdefault(dest, rec)
    return out


def _exclude(text: str, call: ast.Call) -> set[str]:
    """The ``exclude=`` names of a factory call: a list literal or a list assigned to a name."""
    kw = {k.arg: k.value for k in call.keywords}
    if "exclude" not in kw:
        return set()
    if isinstance(kw["exclude"], ast.Name):
        return _named_list(text, kw["exclude"].id)
    return {x for x in (_const(kw["exclude"]) or []) if isinstance(x, str)}


def _named_list(text: str, name: str) -> set[str]:
    """The string items of the list literal last assigned to ``name`` anywhere in ``text``."""
    found: set[str] = set()
    for node in ast.walk(_parse(text)):
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        if named and isinstance(node.value, ast.List):
            found = {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return found


def transformer_all_fields(classes: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """``TransformerConfig``'s fields with ``ModelParallelConfig``'s (its base), base first."""
    return {**classes.get("ModelParallelConfig", {}), **classes.get("TransformerConfig", {})}


def mcore_tables(read: Reader) -> dict:
    """One megatron-core release's tables from ``read``: {"classes": class → field → {"type", "default"},
    "args": Megatron-LM dest → record (empty for a package directory, which has no ``megatron/training``)}."""
    classes = mcore_classes(read)
    return {"classes": classes, "args": mlm_arguments(read, transformer_all_fields(classes))}


# ---------------------------------------------------------------------------------------------
# Megatron Bridge
# ---------------------------------------------------------------------------------------------


@functools.cache
def _parse(text: str) -> ast.Module:
    """A module's tree, parsed once per text."""
    return ast.parse(text)


_IMPORTS: dict[int, dict[str, tuple[str, str]]] = {}


def _imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Local name → (module, original name) of a module's ``from X import Y [as Z]`` (once per tree)."""
    if id(tree) not in _IMPORTS:
        _IMPORTS[id(tree)] = _imports_uncached(tree)
    return _IMPORTS[id(tree)]


def _imports_uncached(tree: ast.Module) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):  # function-level imports too (arguments.py imports its configs there)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = (node.module, a.name)
    return out


def _module_file(read: Reader, module: str, prefix: str) -> str | None:
    base = prefix + module.replace(".", "/")
    for rel in (base + ".py", base + "/__init__.py"):
        if read(rel) is not None:
            return rel
    return None


def find_class(
    read: Reader, rel: str, name: str, prefix: str, depth: int = 0
) -> tuple[str, ast.ClassDef, ast.Module] | None:
    """Where class ``name`` seen from file ``rel`` is defined in the same repository (following
    imports and re-exports; ``prefix``: the folder the package starts in, ``src/`` for Bridge); None
    when it is not found there."""
    text = read(rel)
    if text is None or depth > 4:
        return None
    tree = _parse(text)
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == name:
            return rel, n, tree
    mod, orig = _imports(tree).get(name, ("", ""))
    target = _module_file(read, mod, prefix) if mod else None
    return find_class(read, target, orig, prefix, depth + 1) if target else None


#: packages whose classes a Bridge section derives from but which the Bridge repository does not hold
OUTSIDE = ("megatron.core", "megatron.training")


def repo_class(read: Reader, rel: str, name: str, prefix: str) -> tuple[dict[str, dict], list[str]]:
    """A dataclass's fields (its bases' in the same repository included, base first) and the classes
    outside the repository it derives from (``module.Class``)."""
    found = find_class(read, rel, name, prefix)
    if found is None:
        return {}, []
    where, cls, tree = found
    fields: dict[str, dict] = {}
    outside: list[str] = []
    imports = _imports(tree)
    for b in reversed(_bases(cls)):
        mod, orig = imports.get(b, ("", b))
        if prefix and mod.startswith(OUTSIDE):
            outside.append(f"{mod}.{orig}")
            continue
        sub, subout = repo_class(read, where, b, prefix)
        fields.update(sub)
        outside += subout
    fields.update(class_fields(cls))
    return fields, outside


def _section_class(ann: ast.expr | None) -> str | None:
    """The first class name of a section annotation (``Optional[X]``, ``X | None``, ``Union[X, str]``)."""
    if ann is None:
        return None
    for n in ast.walk(ann):
        if isinstance(n, ast.Name) and n.id[:1].isupper() and n.id not in ("Optional", "Union", "Any", "Literal"):
            return n.id
    return None


def bridge_tables(read: Reader) -> dict:
    """One Bridge release: {"sections": section → {"class", "mcore": [bases outside Bridge]},
    "keys": section → field → {"type", "default"}}."""
    text = read(BRIDGE_CONFIG)
    if text is None:
        return {"sections": {}, "keys": {}}
    tree = _parse(text)
    cc = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ConfigContainer")
    sections: dict[str, dict] = {}
    keys: dict[str, dict] = {}
    for node in cc.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        sec = node.target.id
        if sec.startswith("_"):
            continue
        rel, name = BRIDGE_MODEL_PROVIDER if sec == "model" else (BRIDGE_CONFIG, _section_class(node.annotation))
        if name is None:
            continue
        fields, outside = repo_class(read, rel, name, "src/")
        if not fields and not outside:
            continue
        sections[sec] = {"class": name, "mcore": sorted(set(outside))}
        keys[sec] = fields
    return {"sections": sections, "keys": keys}


# ---------------------------------------------------------------------------------------------
# merging releases into one compact table
# ---------------------------------------------------------------------------------------------


def _merge(per_release: dict[str, dict[tuple[str, str], dict]]) -> dict[str, list[dict]]:
    """(key, place) → record per release → key → [{"at": place, "type" and "default": {release: text,
    only where it changes}, "in": runs of releases (:func:`spans`), the newest "flag" / "action" /
    "nargs"}], places sorted."""
    merged: dict[tuple[str, str], dict] = {}
    for rel, rows in per_release.items():
        for (key, place), rec in rows.items():
            m = merged.setdefault((key, place), {"at": place, "in": [], "default": {}, "type": {}})
            for part in ("default", "type"):
                last = list(m[part].values())[-1] if m[part] else object()
                if rec.get(part) != last:
                    m[part][rel] = rec.get(part)
            m["in"].append(rel)
            m.update({k: v for k, v in rec.items() if k not in ("default", "type")})
    order = list(per_release)
    out: dict[str, list[dict]] = {}
    for (key, _), m in sorted(merged.items()):
        m["in"] = spans(m["in"], order)
        out.setdefault(key, []).append(m)
    return out


def spans(present: list[str], order: list[str]) -> list[list[str]]:
    """Releases as runs of consecutive releases of ``order``: [[first, last], ...]."""
    idx = sorted(order.index(r) for r in present)
    runs: list[list[int]] = []
    for i in idx:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return [[order[a], order[b]] for a, b in runs]


def _public(f: dict) -> dict:
    return {k: v for k, v in f.items() if not k.startswith("_")}


def mcore_rows(t: dict) -> dict[tuple[str, str], dict]:
    return {(k, cls): _public(f) for cls, fields in t["classes"].items() for k, f in fields.items()}


def mlm_rows(t: dict) -> dict[tuple[str, str], dict]:
    return {(dest, "arguments"): rec for dest, rec in t["args"].items()}


def bridge_rows(t: dict) -> dict[tuple[str, str], dict]:
    return {(k, sec): _public(f) for sec, fields in t["keys"].items() for k, f in fields.items()}


def build(mcore: dict[str, dict], bridge: dict[str, dict], header: dict) -> dict:
    """The vendored document from per-release tables (release → :func:`mcore_tables` /
    :func:`bridge_tables`)."""
    sections: dict[str, dict] = {}
    for rel, t in bridge.items():
        for sec, s in t["sections"].items():
            sections.setdefault(sec, {"in": []}).update({"class": s["class"], "mcore": s["mcore"]})
            sections[sec]["in"].append(rel)
    for s in sections.values():
        s["in"] = spans(s["in"], list(bridge))
    return {
        "header": header,
        "megatron_core": {"releases": list(mcore), "keys": _merge({r: mcore_rows(t) for r, t in mcore.items()})},
        "megatron_lm": {
            "releases": [r for r, t in mcore.items() if t["args"]],
            "args": _merge({r: mlm_rows(t) for r, t in mcore.items() if t["args"]}),
        },
        "megatron_bridge": {
            "releases": list(bridge),
            "sections": sections,
            "keys": _merge({r: bridge_rows(t) for r, t in bridge.items()}),
        },
    }


def render(doc: dict) -> str:
    """Compact JSON: one line per key (sorted), the header indented."""
    lines = ["{", f'"header": {json.dumps(doc["header"], indent=1, sort_keys=True)},']
    parts = []
    for table in ("megatron_core", "megatron_lm", "megatron_bridge"):
        t = doc[table]
        inner = []
        for field, val in t.items():
            if isinstance(val, dict) and field in ("keys", "args", "sections"):
                rows = [
                    f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True, ensure_ascii=False)}" for k, v in val.items()
                ]
                inner.append(f" {json.dumps(field)}: {{\n" + ",\n".join(rows) + "\n }")
            else:
                inner.append(f" {json.dumps(field)}: {json.dumps(val)}")
        parts.append(f"{json.dumps(table)}: {{\n" + ",\n".join(inner) + "\n}")
    return "\n".join(lines) + "\n" + ",\n".join(parts) + "\n}\n"


def from_mirrors() -> dict:
    """The document from the git mirrors (:data:`MLM_REPO`, :data:`BRIDGE_REPO`)."""
    mcore = {rel: mcore_tables(git_reader(MLM_REPO, ref)) for rel, ref in MCORE_TAGS.items()}
    bridge = {rel: bridge_tables(git_reader(BRIDGE_REPO, ref)) for rel, ref in BRIDGE_TAGS.items()}
    header = {
        "generator": "scripts/gen_megatron_keys.py (ast, no import)",
        "what": "configuration keys of megatron-core dataclasses, Megatron-LM arguments and Megatron Bridge "
        "ConfigContainer sections: where each lives, annotation, default per release where it changes, releases",
        "megatron_core_sources": {
            rel: {"ref": ref, "commit": commit_of(MLM_REPO, ref)} for rel, ref in MCORE_TAGS.items()
        },
        "megatron_bridge_sources": {
            rel: {"ref": ref, "commit": commit_of(BRIDGE_REPO, ref)} for rel, ref in BRIDGE_TAGS.items()
        },
        "repositories": ["github.com/NVIDIA/Megatron-LM", "github.com/NVIDIA-NeMo/Megatron-Bridge"],
        "files": [*MCORE_FILES, MLM_ARGUMENTS, BRIDGE_CONFIG, BRIDGE_MODEL_PROVIDER[0]],
    }
    return build(mcore, bridge, header)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="Generate the Megatron key tables from the sources.")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the table would change")
    ap.add_argument(
        "--package-dir",
        type=Path,
        help="print the megatron-core config fields read from this directory (an unpacked wheel or a "
        "site-packages holding megatron/core) as JSON, and write nothing",
    )
    args = ap.parse_args(argv)
    if args.package_dir is not None:
        if not (args.package_dir / MCORE_FILES[0]).is_file():
            print(f"error: {args.package_dir} holds no {MCORE_FILES[0]}", file=sys.stderr)
            return 2
        classes = mcore_classes(dir_reader(args.package_dir))
        print(json.dumps({c: {k: _public(f) for k, f in fs.items()} for c, fs in classes.items()}, indent=1))
        return 0
    if not (MLM_REPO / "HEAD").exists() or not (BRIDGE_REPO / "HEAD").exists():
        print(
            f"skipped: no Megatron-LM / Megatron Bridge git mirror under {MIRRORS}; the vendored table is kept (--package-dir reads an unpacked megatron-core wheel)",
            file=sys.stderr,
        )
        return 0
    text = render(from_mirrors())
    old = OUT.read_text(encoding="utf-8") if OUT.is_file() else None
    if args.check:
        if old != text:
            print(f"{OUT.relative_to(ROOT)} would change", file=sys.stderr)
            return 1
        return 0
    if old != text:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
