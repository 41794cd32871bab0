"""The vendored reference data (``tests/data/reference``, provenance in ``tests/data/README.md``):
the copies are byte for byte what ``SHA256SUMS`` records, every copied file is listed, and nothing in
the repository reads a ``../shared`` folder beside the checkout (CI runs on a clean clone without it,
where a test reading it would silently skip or vanish)."""

from __future__ import annotations

import hashlib
import re

from tests.conftest import REF, ROOT, load_cases, load_published_runs


def _manifest() -> dict[str, str]:
    out = {}
    for line in (REF / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[name] = digest
    return out


def test_every_vendored_file_matches_its_recorded_sha256():
    manifest = _manifest()
    on_disk = {p.relative_to(REF).as_posix() for p in REF.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    assert on_disk == set(manifest), on_disk ^ set(manifest)
    for name, digest in manifest.items():
        assert hashlib.sha256((REF / name).read_bytes()).hexdigest() == digest, f"{name} edited by hand"


def test_the_vendored_sets_have_their_documented_sizes():
    # tests/data/reference/README.md, "Files": 113 runs, 25 cases
    assert len(load_published_runs()) == 113
    assert len(load_cases()) == 25


def test_every_vendored_file_keeps_its_source_header():
    for name in _manifest():
        if name.endswith(".yaml"):
            head = (REF / name).read_text().splitlines()[:12]
            assert any("Source" in line for line in head), f"{name} lost its source header"


#: a path into the shared folder beside the checkout, however spelled
_SHARED_PATH = re.compile(r"""parents\[2\]\s*/\s*["']shared["']|\.parent\s*/\s*["']shared["']|["']\.\./shared/""")


def test_nothing_reads_the_shared_folder_beside_the_checkout():
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")]
    files += [*ROOT.glob("src/**/*.py"), ROOT / ".ci" / "run"]
    assert len(files) > 40
    readers = [str(p.relative_to(ROOT)) for p in files if p.is_file() and _SHARED_PATH.search(p.read_text())]
    assert readers == []
