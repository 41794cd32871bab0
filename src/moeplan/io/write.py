"""Writing output files and folders: one output policy for every writer.

- Checked before any work: a path that resolves (no symlink loop), in an existing folder, not a
  folder or a FIFO itself, and never one of the command's own inputs (``plan s.yaml --report s.yaml``
  is refused, hard links and symlinks to an input too).
- A writer never follows a symlink at the path it writes (a link planted in an output folder would
  otherwise overwrite a file outside it): a link there is replaced by the new regular file, the file
  it pointed to is left as it was; a new folder's path that is a link is refused. The folders above
  the file or folder written are the user's path and are followed (an existing output folder named
  through a link is written into; each file in it is written as above).
- Atomic: a file is written under a temporary name in the same folder, flushed, then renamed over
  the target; a folder is built under a temporary name beside the target and renamed into place.
  Readers never see half a file or half a folder, and a full disk or ``kill -9`` leaves the target
  as it was.
- Temporary names are recognisable (``.NAME.moeplan-tmp-PID-RANDOM``); a failed write removes its
  own, and the next write beside the same target removes those whose process is gone (``kill -9``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from moeplan.errors import InputError

#: the marker in every temporary name a writer uses
TMP_MARKER = ".moeplan-tmp-"


def resolve_output(output: Path | str, field: str = "--output") -> Path:
    """The real path an output names: symlinks followed (a dangling link names its target), a symlink
    loop or an unreadable path refused.

    Raises:
        InputError: an empty path, a NUL byte, a loop, or a path that cannot be resolved.
    """
    text = os.fspath(output)
    if not str(text).strip():
        raise InputError(field, str(output), "a file path, or - for standard output")
    if "\x00" in str(text):
        raise InputError(field, str(output), "a path without a NUL byte")
    try:
        return Path(os.path.realpath(text, strict=True))
    except FileNotFoundError:
        pass  # a new file, or a link to one: resolved as far as it exists
    except OSError as exc:  # ELOOP (a symlink loop), EACCES, ENAMETOOLONG
        raise InputError(field, str(output), f"a path that resolves ({exc.strerror or type(exc).__name__})") from None
    try:
        real = Path(os.path.realpath(text))
        os.lstat(real.parent)
    except OSError as exc:
        raise InputError(field, str(output), f"a path in an existing directory ({exc.strerror})") from None
    return real


def _same(a: Path, b: Path | str) -> bool:
    """True when ``a`` (a resolved output) is the file ``b`` names (same real path, or same inode)."""
    try:
        rb = Path(os.path.realpath(b))
    except (OSError, ValueError):
        return False
    if rb == a:
        return True
    try:
        return os.path.samefile(a, rb)
    except (OSError, ValueError):
        return False


def check_not_input(target: Path, output: Path | str, field: str, inputs: Iterable[Path | str | None]) -> None:
    """Refuse an output that is one of the command's inputs (it would be replaced by the output).

    Raises:
        InputError: naming ``field`` and the input.
    """
    for inp in inputs:
        if inp is not None and str(inp) not in ("", "-") and _same(target, inp):
            raise InputError(field, str(output), f"a path other than the input {inp} (it would be overwritten)")


def check_writable(output: Path | str, field: str = "--output", inputs: Iterable[Path | str | None] = ()) -> Path:
    """The resolved target of an output path that can be written (checked before any work, so that
    one bad path of several leaves nothing half-written).

    Args:
        output: the path as given (a symlink is followed for these checks only: a link to a folder,
            a FIFO or an input is refused; the write itself replaces the link, see
            :func:`write_atomically`).
        field: the option named in the error (``--output``, ``--save``, ...).
        inputs: the command's input files: the output may be none of them.

    Returns:
        The real path of the target file (it may not exist yet).

    Raises:
        InputError: an empty path, a symlink loop, a directory, a missing directory, not a regular
            file, or one of ``inputs``.
    """
    target = resolve_output(output, field)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(field, str(output), f"a writable file path ({exc.strerror})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(field, str(output), "a file path (it is a directory)")
    if not target.parent.is_dir():
        raise InputError(field, str(output), "a path in an existing directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(field, str(output), "a regular file (use - for standard output)")
    check_not_input(target, output, field, inputs)
    return target


def named_path(output: Path | str) -> Path:
    """The path a writer writes: its folder resolved (links above the last component followed), the
    last component as named, never followed (a symlink there is replaced, not written through).

    Raises:
        InputError: a path :func:`resolve_output` refuses (field ``--output``).
    """
    text = os.fspath(output)
    head, name = os.path.split(text)
    if name in ("", ".", ".."):  # a folder, refused by the callers' checks
        return resolve_output(output)
    return Path(os.path.realpath(head or ".")) / name


def _is_link(output: Path | str) -> bool:
    """True when the last component of ``output`` (trailing slashes ignored) is a symlink."""
    text = os.fspath(output).rstrip(os.sep)
    return bool(text) and os.path.islink(text)


def _tmp_name(target: Path) -> Path:
    return target.parent / f".{target.name[:100]}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True
    return True


def clean_stale(target: Path) -> list[Path]:
    """Remove the temporary files and folders a killed writer left beside ``target`` (recognised by
    name, their process gone). Never raises.

    Returns:
        What was removed.
    """
    removed: list[Path] = []
    prefix = f".{target.name[:100]}{TMP_MARKER}"
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith(prefix):
            continue
        pid = e.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or not pid.isascii() or _alive(int(pid)):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
            removed.append(Path(e.path))
        except OSError:
            pass
    return removed


def _mode(target: Path, executable: bool) -> int:
    """An existing regular file keeps its permissions; a new one, or one replacing a symlink, gets the
    umask's (0644 with the usual 022; 0755 with ``executable``)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        st = os.lstat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return st.st_mode & 0o777
    return (0o777 if executable else 0o666) & ~umask


def write_atomically(
    output: Path | str,
    text: str | bytes,
    executable: bool = False,
    field: str = "--output",
    inputs: Iterable[Path | str | None] = (),
) -> Path:
    """Write ``text`` (or bytes) to ``output`` through a temporary file in the same directory, flushed
    to disk, and a rename: readers never see half a file, and a failure leaves the target as it was.
    A symlink at ``output`` is never followed: the rename replaces the link itself and the file it
    pointed to is left as it was. An existing regular file keeps its permissions; a new one gets the
    umask's (0644 with the usual 022; 0755 with ``executable``).

    Args:
        output: the file to write.
        text: its whole content (str as UTF-8, or bytes).
        executable: a new file is made executable (launch scripts).
        field: the option named in errors.
        inputs: the command's input files (the output may be none of them).

    Returns:
        The path written (its folder resolved, see :func:`named_path`).

    Raises:
        InputError: a path :func:`check_writable` refuses, or an unwritable location (a full disk).
    """
    check_writable(output, field, inputs)
    target = named_path(output)
    clean_stale(target)
    data = text.encode("utf-8") if isinstance(text, str) else text
    mode = _mode(target, executable)
    tmp = _tmp_name(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise InputError(field, str(output), f"a writable directory ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(field, str(output), f"a writable file ({exc.strerror})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def check_new_directory(output: Path | str, field: str = "--output", inputs: Iterable[Path | str | None] = ()) -> Path:
    """The resolved target of a folder to create: new, or an empty folder, in an existing folder.

    Raises:
        InputError: a loop, a missing parent, a file, a non-empty folder, a symlink (a writer never
            follows one), or one of ``inputs``.
    """
    if _is_link(output):
        raise InputError(
            field, str(output), "a new or empty directory, not a symbolic link (a writer never follows one)"
        )
    target = resolve_output(output, field)
    if target.exists() and not target.is_dir():
        raise InputError(field, str(output), "a new or empty directory (it is a file)")
    if target.is_dir() and any(target.iterdir()):
        raise InputError(field, str(output), "a new or empty directory (a writer never overwrites one)")
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:  # renaming onto it would pull the shell's folder away
        raise InputError(field, str(output), "a new directory, not the current one or a folder above it")
    if not target.parent.is_dir():
        raise InputError(field, str(output), "a path in an existing directory")
    check_not_input(target, output, field, inputs)
    return target


@contextlib.contextmanager
def atomic_directory(
    output: Path | str, field: str = "--output", inputs: Iterable[Path | str | None] = ()
) -> Iterator[Path]:
    """Build a new folder atomically: yields a temporary folder beside the target to fill; when the
    block ends without an error it is renamed onto the target (new, or an empty folder), otherwise
    removed. A full disk or ``kill -9`` leaves no target (and a recognisable temporary name that the
    next writer removes).

    Raises:
        InputError: a target :func:`check_new_directory` refuses, or an unwritable location.
    """
    target = check_new_directory(output, field, inputs)
    clean_stale(target)
    tmp = _tmp_name(target)
    try:
        os.mkdir(tmp)
    except OSError as exc:
        raise InputError(field, str(output), f"a writable directory ({exc.strerror})") from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        os.rename(tmp, target)  # POSIX: replaces an empty folder atomically
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(field, str(output), f"a writable directory ({exc.strerror})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_file_in(folder: Path, name: str, data: str | bytes, executable: bool = False) -> None:
    """Write one file into a folder being built by :func:`atomic_directory` (flushed to disk).

    Raises:
        OSError: the write failed (the folder is then removed by :func:`atomic_directory`).
    """
    path = folder / name
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(path, (0o777 if executable else 0o666) & ~_umask())


__all__ = [
    "TMP_MARKER",
    "atomic_directory",
    "check_new_directory",
    "check_not_input",
    "check_writable",
    "clean_stale",
    "named_path",
    "resolve_output",
    "write_atomically",
    "write_file_in",
]
