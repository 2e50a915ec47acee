r"""Mask secret values, and their common encodings, in a byte stream cut into arbitrary pieces.

The forms masked (``encoded_forms``): the raw value; its base64 on its own (``base64 <<<
$SECRET``) and at any alignment inside longer encoded text (for secrets of at least 5 bytes;
shorter ones leave too few characters of their own, which is one reason secrets must have at
least ``MIN_SECRET_LENGTH`` characters where they enter, projects-as-code);
percent-encoded (``%40`` and ``%2f``/``%2F``: upper- and lower-case hex, with ``/`` encoded
or kept, and the ``+``-for-space form), as it appears in a URL; and JSON-escaped (``\"``,
``\\``, ``\uXXXX``, ``\/``). A step that transforms a secret otherwise (hex, hashing,
reversing, another encoding) is not covered: what it prints is what it chose to print.

A secret may arrive split across two reads. ``SecretMasker.feed`` masks what it can and holds
back the longest tail that could still be the start of a secret, so nothing is released
until it is known not to be (part of) one; ``flush`` releases the tail at the end. The
runner keeps one masker for all of a deployment's steps, so a secret printed half at the end
of one step and half at the start of the next is masked too.
"""

import base64
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from project.redaction import url_password

MASK = b"***"
# Shorter secret values are refused where secrets enter (projects-as-code): a few characters
# would mask ordinary output, and their base64 inside longer text cannot be recognised.
MIN_SECRET_LENGTH = 8


def base64_forms(secret: bytes) -> set[bytes]:
    """Return the base64 text a secret produces wherever it sits in an encoded stream.

    Base64 encodes 3-byte groups, so a secret starting at offset 0, 1 or 2 of a group is
    encoded three different ways; only the characters made of the secret's bits alone are
    kept (the ones at each end also depend on neighbouring bytes).
    """
    forms = set()
    bits = len(secret) * 8
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret + b"\0\0")
        first = -(-shift * 8 // 6)  # first character whose bits all come from the secret
        last = (shift * 8 + bits) // 6  # one past the last such character
        form = encoded[first:last]
        if len(form) >= 6:
            forms.add(form)
    return forms


def project_secrets(project) -> list[str]:
    """Return what a project's step logs mask: its secret values and its repo URL's password."""
    values = [str(value) for value in (project.secrets or {}).values()]
    password = url_password(project.repo or "")
    return [*values, password] if password else values


_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")


def encoded_forms(secret: str) -> set[bytes]:
    """Return every form of ``secret`` that is masked: raw, base64, percent, JSON-escaped."""
    texts = {secret}
    for percent in (quote(secret, safe=""), quote(secret, safe="/"), quote_plus(secret)):
        texts.add(percent)
        texts.add(_PERCENT_HEX.sub(lambda m: m.group(0).lower(), percent))
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        texts |= {escaped, escaped.replace("/", "\\/")}
    forms = {text.encode() for text in texts}
    alone = base64.b64encode(secret.encode())
    return forms | {alone, alone.rstrip(b"=")} | base64_forms(secret.encode())


class SecretMasker:
    """Replace every secret (and each encoded form of it) with ``***`` in a stream of bytes."""

    def __init__(self, secrets: Iterable[str]) -> None:
        patterns: set[bytes] = set()
        for secret in secrets:
            raw = str(secret).encode()
            if not raw or raw in MASK:
                continue
            patterns |= encoded_forms(str(secret))
        self.patterns = sorted(patterns, key=len, reverse=True)
        self._prefixes = {p[:i] for p in self.patterns for i in range(1, len(p))}
        self._hold_max = max((len(p) - 1 for p in self.patterns), default=0)
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        """Return the masked bytes that can be released now; keep a possible secret start."""
        if not self.patterns:
            return data
        buffer = self._tail + data
        keep = self._hold_start(buffer)
        self._tail = buffer[keep:]  # kept unmasked: more data may complete a longer form
        return self.mask(buffer[:keep])

    def flush(self) -> bytes:
        """Release whatever is held, masked (the stream ended, so it cannot grow any more)."""
        tail, self._tail = self._tail, b""
        return self.mask(tail)

    def mask(self, data: bytes) -> bytes:
        """Return complete ``data`` (not part of the stream) with every secret form masked."""
        for pattern in self.patterns:
            if pattern in data:
                data = data.replace(pattern, MASK)
        return data

    def _hold_start(self, buffer: bytes) -> int:
        """Return where the held tail starts: at a possible secret start, or earlier.

        Any whole form reaching into that tail is held with it: masked now, it could be cut
        from a longer form that the next read completes (a secret's base64 and its padding).
        """
        start = len(buffer) - self._held(buffer)
        floor = max(0, len(buffer) - 2 * self._hold_max - 2)  # the tail stays bounded
        moved = True
        while moved and start > floor:
            moved = False
            for pattern in self.patterns:
                # a match starting before ``start`` and ending after it
                begin = max(floor, start - len(pattern) + 1)
                found = buffer.find(pattern, begin, start + len(pattern) - 1)
                if found != -1:
                    start, moved = found, True
        return start

    def _held(self, buffer: bytes) -> int:
        for size in range(min(self._hold_max, len(buffer)), 0, -1):
            if buffer[-size:] in self._prefixes:
                return size
        return 0
