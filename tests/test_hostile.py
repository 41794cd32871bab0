"""Hostile input, one test per defect an adversarial run found, each built from its reproducer.
Every hostile input ends in exit code 0, 1 or 2 (never 3), quickly, with no command injected and no
half-written output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.diagnose.compare import shift_test
from moeplan.errors import InputError, short_repr
from moeplan.inputs.loading import load_json_text
from moeplan.io import write as writer
from moeplan.io.export import hydra_quote, hydra_value
from moeplan.io.imports import hydra_value as read_hydra
from moeplan.io.imports import import_config
from moeplan.io.run_logs import parse_log
from moeplan.plan import sweep

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SMALL = {
    "model": "qwen3-30b-a3b",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
}
BASH = shutil.which("bash")
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def run(*args, seconds: float = 30.0):
    """Run the CLI in-process; (exit code as the console script gives it, stdout, stderr). A run
    taking more than ``seconds`` of CPU fails the test (CPU, not wall time: a loaded machine does not
    fail it)."""
    t0 = time.process_time()
    r = runner.invoke(app, [str(a) for a in args])
    elapsed = time.process_time() - t0
    assert elapsed < seconds, f"took {elapsed:.0f} CPU s"
    code = 3 if r.exception is not None and not isinstance(r.exception, SystemExit) else r.exit_code
    assert code != 3, f"exit 3: {r.exception!r}"
    assert "Traceback" not in r.stdout + r.stderr
    return code, r.stdout, r.stderr


@pytest.fixture
def small(tmp_path) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


# ---- High -----------------------------------------------------------------------------------


@pytest.mark.skipif(BASH is None, reason="bash not found")
def test_sweep_smoke_script_is_rendered_from_data_no_injection(tmp_path):
    """``versions: {container: "OVERRIDES=(;touch${IFS}PWNED;#"}`` ended the '# moeplan:' comment
    of smoke.sh and ran as shell code; the smoke run lost train_iters and num_layers."""
    sc = {**SMALL, "versions": {"container": "OVERRIDES=(;touch${IFS}PWNED;#"}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    code, _, err = run(
        "sweep", tmp_path / "s.yaml", "-o", tmp_path / "sw", "--top", "1", "--no-mbs-variants", seconds=120
    )
    assert code == 0, err
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "srun").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > srun.args\n')
    (stub / "srun").chmod(0o755)
    env = {"PATH": f"{stub}:{os.environ['PATH']}", "CONTAINER": "c", "RECIPE": "r"}
    for smoke in (tmp_path / "sw").glob("*/smoke.sh"):
        assert subprocess.run([BASH, "-n", smoke], check=False).returncode == 0
        subprocess.run([BASH, smoke], cwd=smoke.parent, env=env, check=False, capture_output=True)
        assert not list(tmp_path.rglob("PWNED"))
        args = (smoke.parent / "srun.args").read_text().splitlines()
        assert "train.train_iters=20" in args and any(a.startswith("model.num_layers=") for a in args)
        assert smoke.read_text().count("\n# moeplan: ") == 1


def test_alias_bombs_in_imports_and_argument_dumps(tmp_path):
    """A 500-byte file of aliases hung ``check --from mbridge-yaml`` and every argument-dump value
    (log, compare, calibrate LOG, check --from megatron-log) at gigabytes."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB + "model: {tensor_model_parallel_size: 2, recompute_modules: *i}\n")
    code, _, err = run("check", bomb, "--from", "mbridge-yaml", "--model", "qwen3-30b-a3b")
    assert code == 2 and "aliases" in err
    flow = "{a: &a [x,x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]}"
    log = tmp_path / "bomb.log"
    log.write_text(
        "------------------------ arguments ------------------------\n"
        f"  tensor_model_parallel_size ........ 2\n  recompute_modules ........ {flow}\n"
        "-------------------- end of arguments ---------------------\n"
        + "".join(f" iteration {i}/ 10 | elapsed time per iteration (ms): 100.0 |\n" for i in range(1, 9))
    )
    for args in (
        ["log", log, "--json"],
        ["compare", log, log, "--json"],
        ["check", log, "--from", "megatron-log", "--model", "qwen3-30b-a3b"],
    ):
        code, out, err = run(*args)
        assert code in (0, 1) and len(out) + len(err) < 20_000


@pytest.mark.parametrize(
    "writer_args",
    [
        ["plan", "{s}", "--top", "1", "--report", "{s}"],
        ["plan", "{s}", "--top", "1", "--save", "{s}"],
        ["plan", "{s}", "--top", "1", "--save", "{link}"],
        ["export", "{s}", "-o", "{hard}"],
        ["calibrate", "{runs}", "-o", "{runs}"],
        ["vlm-stats", "{m}", "-s", "8192", "-o", "{m}"],
    ],
)
def test_writers_never_write_onto_their_inputs(tmp_path, small, writer_args):
    """``plan s.yaml --report s.yaml`` (and three others) replaced the scenario with the output."""
    (tmp_path / "link.yaml").symlink_to(small)
    os.link(small, tmp_path / "hard.yaml")
    runs = tmp_path / "runs.yaml"
    runs.write_text(
        yaml.safe_dump({"runs": [{"id": "a", "scenario": SMALL, "measured": {"tokens_per_s_per_gpu": 5e3}}]})
    )
    m = tmp_path / "m.jsonl"
    m.write_text('{"image_sizes": [[512, 512]], "text_tokens": 100}\n')
    names = {"s": small, "link": tmp_path / "link.yaml", "hard": tmp_path / "hard.yaml", "runs": runs, "m": m}
    before = {p: p.read_bytes() for p in (small, runs, m)}
    code, _, err = run(*[a.format(**names) for a in writer_args], seconds=60)
    assert code == 2 and "other than the input" in err
    assert {p: p.read_bytes() for p in before} == before


def test_log_parser_is_linear_on_spaces_and_wrapped_records():
    """A run of spaces after ``| a`` made the field regex quadratic (160 K spaces: 20 s); joining a
    wrapped record copied the growing record (2 M continuation lines: 2 min)."""
    t0 = time.process_time()  # CPU seconds: a loaded machine does not fail it
    parse_log("iteration 1/ 10 | a" + " " * 1_000_000 + "\n")
    record = " iteration 1/ 10 | elapsed time per iteration (ms): 1.0 | lm loss: 1.0 | x"
    parse_log(record + "".join("x: 1 |\n" for _ in range(300_000)))
    assert time.process_time() - t0 < 10


def test_other_loggers_lines_are_not_continuations():
    """``date | INFO | ...`` lines after an iteration line counted as continuations of it."""
    text = (
        " iteration        1/      10 | elapsed time per iteration (ms): 100.0 | lm loss: 2.0 |\n"
        "2025-10-02 12:00:00 | INFO | lm loss: 99.0 | grad norm: 7.0 |\n"
        "INFO | grad norm: 5.0 |\n"
    )
    st = parse_log(text)
    assert st.iterations[1] == {"iteration_time_ms": 100.0, "loss": 2.0}
    # a real hard wrap is still joined
    wrapped = " iteration 1/ 10 | elapsed time per iteration (ms): 100.0 | lm lo\nss: 2.0 | grad n\norm: 0.5 |\n"
    assert parse_log(wrapped).iterations[1] == {"iteration_time_ms": 100.0, "loss": 2.0, "grad_norm": 0.5}


def test_model_overrides_are_bounded(small):
    """``num_layers=1000000000`` ran estimate / check / plan / params for minutes; a 400-digit
    hidden_size ended in exit 3."""
    for cmd in ("estimate", "check", "params", "plan"):
        code, _, err = run(cmd, small, "--set", "model_overrides.num_layers=1000000000", seconds=10)
        assert code == 2 and "10,000" in err
    code, _, err = run("estimate", small, "--set", "model_overrides.hidden_size=" + "9" * 400)
    assert code == 2 and "hidden_size" in err and len(err) < 400


# ---- Medium ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,value",
    [
        ("moe_layers", "5"),
        ("attention_kinds", "5"),
        ("attention_kinds", "abc"),
        ("attention_kinds", "[foo]"),
        ("moe_layers", "[1, 0]"),
        ("normalization", "foo"),
        ("qk_head_dim", "true"),
        ("qk_layernorm", "1"),
        ("mtp_num_layers", "null"),
        ("name", '"a\\nb"'),
    ],
)
def test_model_overrides_are_typed_like_the_schema(small, key, value):
    """moe_layers / attention_kinds / normalization / qk_* / null were accepted as anything (``=abc``
    as ('a','b','c'), unknown kinds, then exit 3 in estimate)."""
    for cmd in ("check", "estimate"):
        code, _, err = run(cmd, small, "--set", f"model_overrides.{key}={value}")
        assert code == 2 and f"model_overrides.{key}" in err


def test_qk_head_dim_is_an_integer_and_null_topk_is_input_error(small):
    """``qk_head_dim=128`` was refused (typed as a boolean); ``moe_router_topk: null`` ended in exit 3."""
    code, _, _ = run("estimate", small, "--set", "model_overrides.qk_head_dim=128")
    assert code in (0, 1)
    for cmd in ("check", "estimate", "params"):
        code, _, _ = run(cmd, small, "--set", "model_overrides.moe_router_topk=null")
        assert code in (0, 1, 2)


def test_fit_with_etp_above_tp(small):
    """``fit`` ended in exit 3 whenever ETP > TP (``--tp 2 --etp 4``, a legal layout)."""
    for extra in (
        ["--tp", "2", "--etp", "4"],
        ["--tp", "2", "--etp", "4", "--ep", "4"],
        ["--tp", "1", "--etp", "2", "--ep", "4"],
    ):
        code, _, _ = run("fit", small, *extra, "--json", seconds=120)
        assert code in (0, 1, 2)


def test_distributed_optimizer_instances_above_dp(small):
    """num_distributed_optimizer_instances above DP: check said broken rule, estimate exit 3."""
    for n in ("3", "16", "32", "64"):
        code, _, _ = run("check", small, "--set", f"layout.num_distributed_optimizer_instances={n}")
        assert code in (0, 1)
        code, _, _ = run("estimate", small, "--set", f"layout.num_distributed_optimizer_instances={n}")
        assert code in (0, 1)


def test_tokens_per_step_is_bounded(small):
    """``--tokens-per-step 99999999999999999999999`` built a range of ~10^17 batches."""
    code, _, err = run("plan", small, "--tokens-per-step", "99999999999999999999999", seconds=10)
    assert code == 2 and "--tokens-per-step" in err


def test_huge_and_non_ascii_numbers_in_logs_dumps_and_manifests(tmp_path):
    """Integers over 4,300 digits in a log, dump or manifest, a ``²`` in a dump, huge floats in logs
    and manifests: exit 3."""
    dump = (
        "------------------------ arguments ------------------------\n"
        f"  tensor_model_parallel_size ........ {'9' * 5000}\n  seq_length ........ ²\n  world_size ........ ８\n"
        "-------------------- end of arguments ---------------------\n"
        f"iteration 1/ 10 | elapsed time per iteration (ms): {'9' * 5000} |\n"
        f" iteration 2/ 10 | elapsed time per iteration (ms): {'9' * 400}.5 |\n"
        f"[Rank 0] (after 2 iterations) memory (MB) | allocated: {'9' * 400}.0 | max allocated: 1 | reserved: 1 | max reserved: 1\n"
        f"using world size: {'9' * 5000}\n"
    )
    log = tmp_path / "x.log"
    log.write_text(dump)
    for args in (["log", log, "--json"], ["check", log, "--from", "megatron-log", "--model", "qwen3-30b-a3b"]):
        code, _, _ = run(*args)
        assert code in (0, 1, 2)
    m = tmp_path / "m.jsonl"
    m.write_text(
        '{"image_sizes": [[1e999, 5]]}\n{"text_tokens": ' + "9" * 5000 + '}\n{"width": 99999999999, "height": 1}\n'
        '{"image_sizes": [[512, 512]], "text_tokens": 5}\n'
    )
    code, out, _ = run("vlm-stats", m, "-s", "8192", "--json")
    assert code == 0 and len(json.loads(out)["bad_files"]) == 3


def test_deeply_nested_json_header_is_ignored_with_a_note():
    """A deeply nested JSON ``# moeplan:`` header: RecursionError, exit 3."""
    text = "# moeplan: " + "[" * 100_000 + "]" * 100_000 + "\nmodel.tensor_model_parallel_size=2\n"
    sc, notes = import_config(text, "mbridge-overrides")
    assert sc["layout"]["tensor_model_parallel_size"] == 2 and any("header" in n for n in notes)
    with pytest.raises(InputError, match="nested"):
        load_json_text("[" * 100 + "]" * 100, "f", "w")


@pytest.mark.parametrize("sep", ["\n", "\r", "\v", "\u2028", "\x85", "\x00"])
def test_control_characters_in_layout_text_are_refused(small, sep):
    """A newline (or \\r, \\v, U+2028 ...) in a free-text layout value smuggled ``checkpoint.save=/evil``
    into the exports and launch scripts."""
    sc = {
        **SMALL,
        "layout": {**SMALL["layout"], "moe_router_load_balancing_type": f"aux_loss{sep}checkpoint.save=/evil"},
    }
    small.write_text(yaml.safe_dump(sc))
    for fmt in ("mbridge-overrides", "slurm"):
        code, out, err = run("export", small, "-f", fmt)
        assert code == 2 and "control characters" in err and "evil" not in out


@pytest.mark.parametrize(
    "text", ["a'b", "x\\", "${oc.env:HOME}", "\\${x}", "a\\'b", "a,b", "010", "null", "a b", "x\\\\"]
)
def test_hydra_values_are_quoted_and_read_back(text):
    """Every free-text value is written so that Hydra reads back exactly that text (no interpolation,
    no sweep, no second override)."""
    written = hydra_value(text)
    assert read_hydra(written) == text
    assert "\n" not in written
    with pytest.raises(InputError):
        hydra_quote("a\nb")


def test_sweep_and_recipes_folders_are_built_atomically(tmp_path, monkeypatch):
    """``sweep -o`` and ``recipes --write`` left half-written folders on a full disk or kill -9,
    which the next run then refused."""
    calls = {"n": 0}
    real = writer.write_file_in

    def full_disk(folder, name, data, executable=False):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(28, "No space left on device")
        return real(folder, name, data, executable)

    monkeypatch.setattr(sweep, "write_file_in", full_disk)
    with pytest.raises(InputError, match="No space left"):
        sweep.write_sweep(SMALL, tmp_path / "sw", top=1, mbs_variants=False)
    assert not (tmp_path / "sw").exists() and not [p for p in tmp_path.iterdir() if writer.TMP_MARKER in p.name]
    monkeypatch.setattr(sweep, "write_file_in", real)
    sweep.write_sweep(SMALL, tmp_path / "sw", top=1, mbs_variants=False)  # the next run is not refused
    assert (tmp_path / "sw" / "manifest.json").exists()


def test_compare_sorts_each_sample_once(monkeypatch):
    """``compare`` sorted log B once per element of log A (two 10^6-iteration logs: 153 s of sorting)."""
    import moeplan.diagnose.compare as cmp

    calls = {"n": 0}
    real = cmp._thin

    def counted(x):
        calls["n"] += 1
        return real(x)

    monkeypatch.setattr(cmp, "_thin", counted)
    shift_test([float(i % 97) for i in range(5000)], [float(i % 89) for i in range(5000)])
    assert calls["n"] == 2


def test_log_statistics_do_not_hold_the_text():
    """``log`` held about 4× the log's size in memory (the text, a dict per iteration)."""
    st = parse_log("".join(f" iteration {i}/ 9 | elapsed time per iteration (ms): {i}.0 |\n" for i in range(1, 9)))
    assert not hasattr(st, "text") and len(st.iterations) == 8
    assert st.iterations[3] == {"iteration_time_ms": 3.0}


# ---- Low ------------------------------------------------------------------------------------


@pytest.mark.parametrize("edit", [{"num_gpus": 0}, {"num_gpus": "Infinity"}, {"num_gpus": 10**30}, {"num_gpus": -1}])
def test_sweep_collect_on_an_edited_manifest(tmp_path, edit):
    """``sweep collect`` ended in exit 3 on a manifest edited to ``num_gpus: 0`` or ``Infinity``."""
    sc = {**SMALL, "system": {**SMALL["system"], **edit}}
    entry = {"id": "01-x", "label": "x", "scenario": sc, "predicted": {"tokens_per_s_per_gpu": 5000.0}}
    text = json.dumps({"entries": [entry]}).replace('"Infinity"', "Infinity")
    (tmp_path / "manifest.json").write_text(text)
    (tmp_path / "01-x").mkdir()
    (tmp_path / "01-x" / "run.log").write_text(
        "".join(f" iteration {i}/ 9 | elapsed time per iteration (ms): 100.0 |\n" for i in range(1, 9))
    )
    code, _, _ = run("sweep", "collect", tmp_path, "--json")
    assert code in (0, 2)


def test_repeated_unknown_label_is_refused_not_printed_200000_times(tmp_path):
    """200,000 identical findings printed for a repeated unknown label (1 MB in, 36 MB out)."""
    sc = {
        **SMALL,
        "layout": {**SMALL["layout"], "recompute_granularity": "selective", "recompute_modules": ["foo"] * 20000},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    code, out, err = run("check", tmp_path / "s.yaml")
    assert code == 2 and len(out) + len(err) < 2000
    notes = import_config(
        "\n".join(["nope.key=1"] * 20000) + "\nmodel.tensor_model_parallel_size=2\n", "mbridge-overrides"
    )[1]
    assert len(notes) == 1


def test_plot_replaces_a_symlink_as_every_writer_does(tmp_path):
    """``compare --plot`` onto a symlink: the link is replaced by the figure, the file it named is left
    as it was (no writer follows a link)."""
    log = tmp_path / "a.log"
    log.write_text(
        "".join(f" iteration {i}/ 99 | elapsed time per iteration (ms): {100 + i % 3}.0 |\n" for i in range(1, 30))
    )
    (tmp_path / "real.png").write_bytes(b"old")
    (tmp_path / "link.png").symlink_to("real.png")
    code, _, _ = run("compare", log, log, "--plot", tmp_path / "link.png")
    assert code == 0 and not (tmp_path / "link.png").is_symlink()
    assert (tmp_path / "link.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "real.png").read_bytes() == b"old"


def test_stale_temporary_files_are_recognised_and_cleaned(tmp_path):
    """Temp files were left after kill -9 (with anonymous names)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.yaml{writer.TMP_MARKER}{dead.pid}-abcd1234"
    stale.write_text("half")
    writer.write_atomically(tmp_path / "out.yaml", "a: 1\n")
    assert not stale.exists() and (tmp_path / "out.yaml").read_text() == "a: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_symlink_loop_as_output_is_input_error(tmp_path, small):
    """A symlink loop as the output path: exit 3 (RuntimeError from Path.resolve)."""
    (tmp_path / "l1").symlink_to("l2")
    (tmp_path / "l2").symlink_to("l1")
    for args in (["export", small, "-o", tmp_path / "l1"], ["plan", small, "--save", tmp_path / "l1"]):
        code, _, err = run(*args)
        assert code == 2 and "resolves" in err


@pytest.mark.parametrize("version", ["r2d2", "８", "０.16", "0.16.1rc1x", "v"])
def test_version_text_that_is_no_version_is_refused(small, version):
    """Version text such as ``r2d2`` or a full-width ``８`` was parsed as a version."""
    code, _, err = run("check", small, "--set", f"versions.megatron_core={version}")
    assert code == 2 and "versions.megatron_core" in err


def test_nul_in_an_environment_value_is_refused(small):
    """A NUL byte in an environment value was accepted, then altered in the script."""
    code, out, err = run("export", small, "-f", "slurm", "--set", 'environment.FOO="a\\0b"')
    assert code == 2 and "environment.FOO" in err and out == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_calibration_fifo_is_refused_without_blocking(tmp_path, small):
    """``--calibration`` pointed at a FIFO blocked forever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["estimate", small, "--calibration", fifo], ["log", fifo], ["check", fifo]):
        code, _, err = run(*args, seconds=10)
        assert code == 2 and ("regular file" in err or "existing" in err)


def test_profile_duplicate_key_check_is_linear(tmp_path, small):
    """The calibration-profile reader's duplicate-key check was quadratic (``keys.count`` per key)."""
    prof = tmp_path / "p.json"
    prof.write_text("{" + ",".join(f'"k{i}": 1' for i in range(200_000)) + ', "k0": 2}')
    code, _, err = run("estimate", small, "--calibration", prof, seconds=10)
    assert code == 2 and "duplicate" in err


def test_errors_quote_values_cut():
    """Notes and errors quoted a rejected value with ``repr``: an alias bomb's repr is gigabytes."""
    assert len(short_repr("x" * 10**6)) < 100 and "digits" in short_repr(10**5000)
    big = [[list(range(10**4))] * 100] * 100  # shared lists: huge when expanded
    assert len(short_repr(big)) < 120


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no kill -9 here")
def test_kill_9_during_an_atomic_write_leaves_old_or_new(tmp_path):
    """Single-file writers must stay atomic under kill -9: the target is whole (old or new)."""
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    code = (
        "import sys; from moeplan.io.write import write_atomically\n"
        "while True: write_atomically(sys.argv[1], 'new\\n' * 2_000_000)\n"
    )
    for delay in (0.3, 0.6):
        p = subprocess.Popen([sys.executable, "-c", code, str(target)])
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert target.read_text() in ("old\n", "new\n" * 2_000_000)
    writer.write_atomically(target, "done\n")  # the next writer cleans the killed one's temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def _padded_config(tmp_path: Path, name: str, pad_items: int, **fields) -> Path:
    """A copy of the packaged Qwen3-30B-A3B config.json with ``fields`` replaced and a
    ``_padding`` list of ``pad_items`` short strings (about 13 bytes each)."""
    cfg = json.loads((ROOT / "src/moeplan/catalog/data/models/Qwen__Qwen3-30B-A3B.json").read_text())
    cfg.update(fields)
    if pad_items:
        cfg["_padding"] = ["y" * 10] * pad_items
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def test_plan_reads_a_config_json_model_once_per_file_version(tmp_path, monkeypatch):
    """``plan --model big.json`` re-read and re-parsed the config.json for every candidate (a 250 KB
    file: 38 s); it is read once, and read again only after the file changes."""
    from moeplan.catalog import models

    cfg = _padded_config(tmp_path, "big.json", 20_000)  # 260 KB
    reads: list[str] = []
    real = models.load_config_file
    monkeypatch.setattr(models, "load_config_file", lambda p: reads.append(str(p)) or real(p))
    models._cached_model_file.cache_clear()
    code, out, err = run(
        "plan", "--model", cfg, "--gpu", "h100", "--num-gpus", "8", "--seq-length", "4096", "--json", seconds=60
    )
    assert code == 0, err
    assert reads == [str(cfg)]
    cfg.write_text(cfg.read_text().replace('"num_experts_per_tok": 8', '"num_experts_per_tok": 4 '))
    assert models.get_model(str(cfg)).moe_router_topk == 4 and len(reads) == 2


@pytest.mark.parametrize(
    ("fields", "field", "allowed"),
    [
        ({"num_attention_heads": 97, "num_key_value_heads": 7}, "config.json:num_query_groups", "(97 heads, 7 groups)"),
        ({"num_experts": 160, "num_experts_per_tok": 1000}, "config.json:moe_router_topk", "(1000 > 160)"),
    ],
)
def test_config_json_model_gets_the_consistency_checks_of_overrides(tmp_path, fields, field, allowed):
    """A config.json with 97 heads over 7 KV heads, or top-k 1000 of 160 experts, was "valid": it is
    held to the checks ``model_overrides`` get (97 % 7 = 6; 1000 > 160)."""
    cfg = _padded_config(tmp_path, "c.json", 0, **fields)
    code, _, err = run("check", "--model", cfg, "--gpu", "h100", "--num-gpus", "8")
    assert code == 2 and field in err and allowed in err


def test_overrides_nested_500_brackets_deep_are_input_error(tmp_path):
    """``check --from mbridge-overrides`` with a value nested 600 brackets deep: exit 3
    (RecursionError); now exit 2 naming the line and key. 64 levels still parse."""
    deep = tmp_path / "deep.txt"
    deep.write_text("model.tensor_model_parallel_size=1\nmodel.recompute_modules=" + "[" * 600 + "]" * 600 + "\n")
    code, _, err = run("check", deep, "--from", "mbridge-overrides", "--model", "qwen3-30b-a3b")
    assert code == 2 and "override line 2: model.recompute_modules" in err and "64 brackets deep" in err
    assert read_hydra("[" * 64 + "]" * 64) is not None
    with pytest.raises(InputError):
        read_hydra("[" * 65 + "]" * 65)


def _moeplan(*args: object, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The console script's ``main`` in a child process (exit codes as a shell sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *map(str, args)],
        env={**os.environ, **(env or {})},
        capture_output="stdout" not in kw,
        timeout=120,
        check=False,
        **kw,
    )


@pytest.mark.parametrize(
    ("env", "times"),
    [({"PYTHONIOENCODING": "ascii"}, b"x"), ({"PYTHONIOENCODING": "latin-1", "LANG": "C"}, "×".encode("latin-1"))],
)
def test_output_prints_on_a_stream_that_cannot_encode_it(env, times):
    """With ``PYTHONIOENCODING=ascii`` the tables' ``×`` and ``≥`` raised UnicodeEncodeError (exit 3);
    they print as ASCII fallbacks (``256 x gb300``; latin-1 holds ``×`` itself) and the exit code is
    the verdict's."""
    r = _moeplan("estimate", ROOT / "examples/deepseek_v3_gb300.yaml", env=env)
    assert r.returncode == 0, r.stderr
    assert b"256 " + times + b" gb300" in r.stdout and b"internal error" not in r.stderr
    r = _moeplan("check", ROOT / "examples/long_context_broken.yaml", "--lang", "zh", env=env)
    assert r.returncode == 1 and b"Traceback" not in r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_full_standard_output_is_one_line_and_exit_2():
    """``moeplan rules > /dev/full`` ended with OSError ENOSPC as a moeplan bug (exit 3)."""
    with open("/dev/full", "wb") as full:
        r = _moeplan("rules", stdout=full, stderr=subprocess.PIPE)
    assert r.returncode == 2
    assert r.stderr.decode() == "error: standard output: cannot write the output (No space left on device)\n"


def test_a_pipe_its_reader_closed_ends_quietly_with_the_sigpipe_code():
    """A reader that closed the pipe before any output (EPIPE, ``moeplan rules | head``) gave exit 1,
    the code of a broken rule; it ends as a Unix tool ended by SIGPIPE does: no message, exit 141."""
    p = subprocess.Popen([sys.executable, "-m", "moeplan", "rules"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    assert p.wait(timeout=120) == 141
    assert p.stderr.read().decode() == ""


def test_closed_standard_output_is_one_line_and_exit_2():
    """Standard output closed before the start (``moeplan rules >&-``) wrote nothing and said nothing."""
    p = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m moeplan rules >&-'], capture_output=True, timeout=120, check=False
    )
    assert p.returncode == 2
    assert p.stderr.decode().splitlines() == [
        "error: standard output: cannot write the output (standard output is closed)"
    ]


def test_doctor_with_a_5000_digit_installed_version(tmp_path, monkeypatch):
    """An installed megatron-core ``0.999…`` (5,000 digits) made ``doctor --scenario`` exit 3, and a
    stated one showed Python's digit-limit text as what is allowed."""
    from moeplan.api import diagnose
    from moeplan.diagnose.doctor import EnvironmentReport

    huge = "0." + "9" * 5000
    rep = EnvironmentReport(gpus=[], gpu_source="none", packages={"megatron_core": huge}, modules={}, environment={})
    monkeypatch.setattr(diagnose, "collect_environment", lambda: rep)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**SMALL, "versions": {"megatron_core": "0.16.1"}}))
    code, out, err = run("doctor", "--scenario", sc, "--json")
    assert code in (0, 1), err
    (note,) = [f for f in json.loads(out)["findings"] if f["rule"] == "doctor.version"]
    assert len(note["message"]) < 300
    sc.write_text(yaml.safe_dump({**SMALL, "versions": {"megatron_core": huge}}))
    code, _, err = run("check", sc)
    assert code == 2 and "versions.megatron_core" in err and "at most 30 digits" in err
    assert "4300" not in err and "set_int_max_str_digits" not in err


@pytest.mark.parametrize("command", ["check", "estimate"])
@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("system.gpu_overrides.peak_dense_tflops={}", "system.gpu_overrides.peak_dense_tflops"),
        ("system.gpu={id: mygpu, usable_hbm_gib: 94}", "system.gpu.peak_dense_tflops"),
    ],
)
def test_gpu_without_a_bf16_peak_is_refused_by_check_and_estimate_alike(small, command, setting, field):
    """``gpu_overrides.peak_dense_tflops: {}`` was valid for ``check`` and refused by ``estimate``:
    one schema check, one message, for both."""
    code, _, err = run(command, small, "--set", setting)
    assert code == 2
    assert (
        err.strip()
        == f"error: {field}: {{}} is not valid; allowed: a bf16 dense peak in TFLOP/s (and fp8/fp4 for those precisions): the step-time estimate needs it"
    )


def test_errors_name_a_few_unknown_keys_and_cut_long_names(tmp_path, small):
    """Error lines of megabytes: a profile's 5,000 unknown keys were all listed, a 60,000-character
    model name was quoted whole. An error names 5 keys and the count (5,000 - 5 = 4,995 more) and
    quotes a name by its first 80 characters with its length."""
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({f"k{i}": 1 for i in range(5000)}))
    code, _, err = run("estimate", small, "--calibration", prof)
    assert code == 2 and "(unknown keys k0, k1, k10, k100, k1000 … and 4,995 more)" in err and len(err) < 400
    code, _, err = run("check", "--model", "m" * 60_000)
    assert code == 2 and "'" + "m" * 80 + "'... (60,000 characters) is not a built-in model" in err
    assert len(err) < 2500
    code, _, err = run("plan", small, "--free", ",".join(f"bogus{i}" for i in range(5000)))
    assert code == 2 and "(48,889 characters)" in err and len(err) < 2500


def test_error_parts_are_cut_with_their_length():
    """Every part of an error is bounded: the field at 200 characters, a quoted text at 80, what is
    allowed at 2,000, each with its length."""
    e = InputError("f" * 1000, "v" * 500, "a" * 10_000)
    assert str(e) == (
        f"{'f' * 200}… (1,000 characters): '{'v' * 80}'... (500 characters) is not valid; "
        f"allowed: {'a' * 2000}… (10,000 characters)"
    )


def test_line_wrapping_is_linear_in_the_longest_token():
    """Wrapping re-measured the line for every character: a 20,000-character token took 6 s, a
    200,000-character one minutes. It is linear, and slices a token wider than the line at the width."""
    from moeplan.cli.render import break_offsets

    line = "skipped " + "a" * 200_000 + " end"
    t0 = time.process_time()
    cuts = break_offsets(line, 80)
    assert time.process_time() - t0 < 5
    pieces = [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]
    assert "".join(pieces) == line
    # 200,000 = 2,500 x 80: 2,500 full slices, the last one ending at the space before "end"
    assert pieces[0] == "skipped " and len(pieces) == 2502 and pieces[-1] == "end"
    assert all(p.rstrip() == "a" * 80 for p in pieces[1:-1])


def test_vlm_stats_with_a_200000_character_image_path(tmp_path):
    """``vlm-stats`` on a manifest with one 200,000-character image path did not finish in 120 s
    (1.1 s with --json); the path is echoed by its first 200 characters and its length."""
    rows = [
        json.dumps({"image": "a" * 200_000 + ".jpg"}),
        json.dumps({"image_sizes": [[942, 893]], "text_tokens": 197}),
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(rows) + "\n")
    code, out, err = run("vlm-stats", tmp_path / "m.jsonl", "-s", "4096", "--model", "qwen3-vl-30b", seconds=30)
    assert code == 0, err
    path = str(tmp_path / ("a" * 200_000 + ".jpg"))  # as the manifest's folder resolves it
    assert f"{path[:200]}… ({len(path):,} characters)" in out.replace("\n", "") and len(out) < 5000


def test_estimate_with_a_65536_character_container_text(tmp_path):
    """A 65,536-character ``versions.container`` made ``estimate`` take 54 s and echo the text twice:
    it is quoted by its first 80 characters."""
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**SMALL, "versions": {"container": "c" * 65_536}}, width=10**6))
    code, out, err = run("estimate", sc, seconds=30)
    assert code in (0, 1), err  # 1: the layout's own verdict
    assert "versions.container '" + "c" * 80 + "'... names no NN.NN release" in out.replace("\n", " ")
    assert len(out) < 20_000


# ---- a further adversarial pass --------------------------------------------------------------


@pytest.mark.parametrize("text", ["{[a]: 1}\n", "? {a: 1}\n: 1\n", "model: x\nlayout: {1: 2, [a]: 4}\n"])
def test_a_yaml_key_that_is_a_list_or_mapping_is_input_error(tmp_path, text):
    """A mapping key that is a list or a mapping raised TypeError (unhashable): exit 3, HTTP 500."""
    p = tmp_path / "k.yaml"
    p.write_text(text)
    code, _, err = run("check", p)
    assert code == 2 and "YAML" in err


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("megatron-lm-args", "--pipeline-model-parallel-layout " + "E" * 400_000 + "\n"),
        ("mbridge-overrides", "model.pipeline_model_parallel_layout=" + "E" * 400_000 + "\n"),
    ],
)
def test_a_token_longer_than_the_text_limit_is_refused_before_splitting(tmp_path, fmt, text):
    """``shlex`` splits in time growing with the square of a token's length (400 KB: 5 s, 2 MB: over
    120 s); the token is refused first, naming its length."""
    p = tmp_path / "a.txt"
    p.write_text(text)
    code, _, err = run("check", "--from", fmt, p)
    assert code == 2 and "tokens of at most 65,536 characters" in err


def test_a_misspelt_key_given_as_null_is_still_an_unknown_key(small):
    """``layout: {tensor_model_paralel_size: null}`` was dropped as "not stated" before the unknown-key
    check, so the typo passed silently; a null of a known key still reads as unset."""
    doc = yaml.safe_load(small.read_text())
    doc["layout"]["tensor_model_paralel_size"] = None
    small.write_text(yaml.safe_dump(doc))
    code, _, err = run("check", small)
    assert code == 2 and "did you mean 'tensor_model_parallel_size'" in err
    small.write_text(yaml.safe_dump(SMALL))
    code, _, err = run("check", small, "--set", "layout.zzz=null")
    assert code == 2 and "layout.zzz" in err
    code, _, err = run("check", small, "--set", ".x=1")
    assert code == 2 and err.startswith("error: --set: '.x=1'")


def test_terminal_control_characters_in_printed_text_are_shown_as_escapes(monkeypatch):
    """An environment value holding ``ESC ] 0 ; ... BEL ESC [ 31 m`` reached the terminal raw from
    ``doctor`` (it set the window title and the colour)."""
    from moeplan.cli.render import console

    buf = __import__("io").StringIO()
    con = console()
    con.file = buf
    con.print("NCCL_DEBUG \x1b]0;PWNED\x07\x1b[31mred")
    assert "\x1b" not in buf.getvalue() and "\\x1b]0;PWNED" in buf.getvalue()


def test_a_sweep_into_the_current_folder_is_refused(tmp_path, monkeypatch, small):
    """``sweep -o .`` in an empty current folder renamed a new folder onto it, leaving the shell in a
    folder that no longer exists."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for out in (".", ""):
        code, _, err = run("sweep", small, "-o", out)
        assert code == 2 and "not the current one" in err
    assert here.is_dir() and (here.stat().st_ino == os.stat(".").st_ino)


def test_thirty_digits_pass_the_digit_limit_and_meet_the_fields_own_range(small):
    """``--gbs`` of thirty nines was refused as "an integer of at most 30 digits" (a bit-length
    estimate); the field's own range is what it breaks."""
    code, _, err = run("check", small, "--gbs", "9" * 30)
    assert code == 2 and "16777216" in err and "30 digits" not in err


def test_a_yaml_document_over_one_mib_is_refused_at_once(tmp_path):
    """A 4 MB scenario of nested lists took 66 s and 1.4 GB to parse before it was refused; the YAML
    limit is 1 MiB (a scenario, a config dump or a runs file is far smaller)."""
    p = tmp_path / "big.yaml"
    p.write_text("layout: {recompute_modules: [" + ",".join(["[1,1]"] * 210_000) + "]}\n")
    assert p.stat().st_size > 2**20
    code, _, err = run("check", p)
    assert code == 2 and "1 MiB" in err
