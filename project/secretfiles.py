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
