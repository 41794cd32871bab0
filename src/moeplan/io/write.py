"""Writing output files: checked before any work, written atomically (a temporary file in the same
directory, then a rename), so that readers never see half a file and a bad path leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from moeplan.errors import InputError


def check_writable(output: Path | str, field: str = "--output") -> Path:
    """The resolved target of an output path that can be written (checked before any work, so that
    one bad path of several leaves nothing half-written).

    Args:
        output: the path as given (a symlink is followed).
        field: the option named in the error (``--output``, ``--save``, ...).

    Returns:
        The real path of the target file (it may not exist yet).

    Raises:
        InputError: an empty path, a directory, a missing directory, or not a regular file.
    """
    if not str(output).strip():
        raise InputError(field, str(output), "a file path, or - for standard output")
    target = Path(os.path.realpath(output))
    if target.is_dir():
        raise InputError(field, str(output), "a file path (it is a directory)")
    if not target.parent.is_dir():
        raise InputError(field, str(output), "a path in an existing directory")
    if target.exists() and not target.is_file():
        raise InputError(field, str(output), "a regular file (use - for standard output)")
    return target


def write_atomically(output: Path | str, text: str, executable: bool = False, field: str = "--output") -> None:
    """Write ``text`` to ``output`` through a temporary file in the same directory and a rename:
    readers never see half a file. A symlink is followed (its target is replaced); an existing file
    keeps its permissions; a new one gets the umask's (0644 with the usual 022; 0755 with
    ``executable``).

    Args:
        output: the file to write.
        text: its whole content (UTF-8 as the platform writes text).
        executable: a new file is made executable (launch scripts).
        field: the option named in errors.

    Raises:
        InputError: an empty path, a directory, a missing directory, or an unwritable location.
    """
    target = check_writable(output, field)
    umask = os.umask(0)
    os.umask(umask)
    mode = target.stat().st_mode & 0o777 if target.exists() else (0o777 if executable else 0o666) & ~umask
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise InputError(field, str(output), f"a writable directory ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(field, str(output), f"a writable file ({exc.strerror})") from None


__all__ = ["check_writable", "write_atomically"]
