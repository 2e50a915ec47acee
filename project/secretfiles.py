"""Secrets Conveyor keeps in files of var/: created private, refused when others can read them.

A file is written under a temporary name opened with ``O_CREAT | O_EXCL`` and mode 0600, so
it is never readable by anyone else, not even for a moment; it then takes its real name
atomically (``link`` when it must not exist yet, ``replace`` to overwrite).
"""

import contextlib
import os
import secrets
import stat
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

PRIVATE_MODE = 0o600


def check_private(path: Path) -> None:
    """Raise ImproperlyConfigured if ``path`` can be read or written by group or others."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ImproperlyConfigured(
            f"{path} holds a secret but its mode is {mode:o}: other users can read it; "
            f"run 'chmod 600 {path}' (and replace the secret if it may have leaked)"
        )


def read_private(path: Path) -> str | None:
    """Return the stripped content of secret file ``path``, or None when it does not exist."""
    try:
        check_private(path)
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def write_private(path: Path, value: str, *, replace: bool = False) -> bool:
    """Write ``value`` to ``path`` with mode 0600 from its creation.

    Without ``replace``, an existing file is kept and False is returned (another process
    created it first); with it, the file is replaced atomically.
    """
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(value)
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def kept_secret(path: Path, generate) -> str:
    """Return the secret kept in ``path``, first creating it privately with ``generate()``."""
    found = read_private(path)
    if found:
        return found
    write_private(path, generate())
    return read_private(path) or ""


# --- Private directories and files of var/ ---------------------------------------------------
PRIVATE_DIR_MODE = 0o700
_tightened: list[str] = []


def _tighten(path: Path, private_mode: int) -> None:
    """Remove group and other access from ``path`` (an install made before it was private)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        try:
            path.chmod(private_mode)
        except OSError as exc:  # not ours: say so in one line rather than run exposed
            raise ImproperlyConfigured(
                f"{path} can be read by other users (mode {mode:o}) and cannot be made "
                f"private ({exc.strerror}); run 'chmod {private_mode:o} {path}' as its owner"
            ) from None
        _tightened.append(f"{path} {mode:o}->{private_mode:o}")


def private_dir(path: Path) -> Path:
    """Create directory ``path`` with mode 0700, or take group and other access from it."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    _tighten(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create file ``path`` empty with mode 0600 if missing, or make an existing one 0600."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE))
    _tighten(path, PRIVATE_MODE)
    return path


def private_sqlite(name: Path | str | None) -> Path | str | None:
    """Make an SQLite database file and its WAL and shared-memory files private (0600).

    An empty file is a valid new database, so creating it here means SQLite never creates
    it with the umask's mode; SQLite gives its ``-wal`` and ``-shm`` files the mode of the
    database file. An in-memory database, or one in a missing directory (SQLite then says
    what is wrong), is returned untouched.
    """
    if not name or str(name) == ":memory:" or not Path(name).parent.is_dir():
        return name
    path = Path(name)
    private_file(path)
    for suffix in ("-wal", "-shm"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            _tighten(companion, PRIVATE_MODE)
    return name


def tightened_paths() -> list[str]:
    """Return the paths whose modes start-up took group and other access from (``old->new``)."""
    return list(_tightened)
