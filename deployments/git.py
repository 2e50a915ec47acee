"""Run git commands for workspaces: bounded, killable, with a minimal environment.

A repository URL's credentials never reach the disk: clones and fetches use the URL without
its userinfo (``remote_url``), and git gets the user name and password at fetch time from
``git_askpass.sh``, which prints them from variables set only in that git process's
environment (never its arguments). No credential helper runs for such a fetch, so none can
store them either.

``keep_alive`` is called about every second while a command runs (the runner passes one that
heartbeats and raises ``Interrupted`` on cancel); the command's process group is then
killed, so a cancel never waits for a slow fetch.
"""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from project import env as process_env
from project.redaction import redact_text, url_password

GIT_TIMEOUT_SECONDS = 900
ERROR_TAIL = 2000
ASKPASS = Path(__file__).resolve().with_name("git_askpass.sh")


class GitError(Exception):
    """A git command failed; the message carries the tail of its stderr, URLs redacted."""


class Interrupted(Exception):  # noqa: N818 - raised to abandon the checkout, not an error
    """Raised by ``keep_alive`` to abandon the command (cancel, lost lease)."""


@dataclass(frozen=True)
class Credentials:
    """The user name and password a repository URL carried, given to git only at fetch time."""

    username: str
    password: str

    def __repr__(self) -> str:  # never in a traceback or a log line
        return "Credentials(***)"


def _carries_http_credentials(url: str) -> bool:
    # Only http(s): ssh takes its user from the URL and its secrets from keys or an agent.
    return url.lower().startswith(("http://", "https://")) and url_password(url) is not None


def remote_url(url: str) -> str:
    """Return ``url`` without the user name and password of an http(s) URL."""
    if not _carries_http_credentials(url):
        return url
    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


def url_credentials(url: str) -> Credentials | None:
    """Return the credentials an http(s) repository URL carries, else None."""
    if not _carries_http_credentials(url):
        return None
    parts = urlsplit(url)
    # https://TOKEN@host: hosts that take a token as the user name accept any password.
    return Credentials(unquote(parts.username or ""), unquote(parts.password or ""))


def git_environment(credentials: Credentials | None = None) -> dict[str, str]:
    """Return the environment for git: enough to find it and its credentials, no prompts."""
    env = process_env.inherited(("PATH", "HOME", "SSH_AUTH_SOCK"))
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        LANG="C",
        LC_ALL="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="true",
        # No ext:: or fd:: transports: a repo URL must never run a command.
        GIT_ALLOW_PROTOCOL="file:git:http:https:ssh",
    )
    if credentials is not None:
        env.update(
            GIT_ASKPASS=str(ASKPASS),
            CONVEYOR_GIT_USERNAME=credentials.username,
            CONVEYOR_GIT_PASSWORD=credentials.password,
            # No credential helper (store, cache, osxkeychain ...) sees, and so keeps, them.
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="credential.helper",
            GIT_CONFIG_VALUE_0="",
        )
    return env


def git(
    *args: str,
    cwd: Path | str | None = None,
    keep_alive: Callable[[], None] | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    credentials: Credentials | None = None,
) -> str:
    """Run ``git *args``; return its stdout, or raise GitError with its stderr."""
    process = subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=git_environment(credentials),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                out, err = process.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise GitError(f"git {args[0]} timed out after {timeout:.0f}s") from None
                if keep_alive is not None:
                    keep_alive()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    if process.returncode != 0:
        message = err.decode(errors="replace").strip()[-ERROR_TAIL:]
        # git names the remote's URL in its errors, password included (project.redaction).
        raise GitError(redact_text(f"git {args[0]} failed (exit {process.returncode}): {message}"))
    return out.decode(errors="replace")


class AmbiguousRef(GitError):
    """A name that is both a branch and a tag of different commits (git would take the tag)."""


def resolve(repo: Path, ref: str) -> str | None:
    """Return the full commit sha ``ref`` names in ``repo``, or None.

    Raises AmbiguousRef when ``ref`` names both a branch and a tag of different commits:
    git would pick the tag, so whoever may push a tag could deploy an unreviewed commit in
    the place of a branch an environment's ``refs`` rule admits.
    """
    branch = _commit_of(repo, f"refs/heads/{ref}")
    tag = _commit_of(repo, f"refs/tags/{ref}")
    if branch and tag and branch != tag:
        raise AmbiguousRef(
            f"{ref!r} names both a branch and a tag of different commits (git would take "
            "the tag); rename or delete one of them"
        )
    return _commit_of(repo, ref)


def _commit_of(repo: Path, ref: str) -> str | None:
    try:
        return (
            git(
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                f"{ref}^{{commit}}",
                cwd=repo,
            ).strip()
            or None
        )
    except GitError:
        return None
