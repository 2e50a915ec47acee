"""Sign deliveries two ways: Standard Webhooks and Conveyor's ``X-Conveyor-Signature``.

* ``webhook-signature: v1,<base64>``: HMAC-SHA256 keyed with the base64-decoded part of the
  secret after ``whsec_``, over ``"<webhook-id>.<webhook-timestamp>.<body>"`` (the Standard
  Webhooks spec). During a rotation overlap it carries one ``v1,…`` entry per valid secret,
  separated by spaces, the newest first.
* ``X-Conveyor-Signature: sha256=<hex>``: HMAC-SHA256 keyed with the whole ``whsec_…``
  string as UTF-8, over ``"<timestamp>." + body`` (seed 003's ``verify()``). The header holds
  the signature with the current secret; during an overlap ``X-Conveyor-Signature-Previous``
  holds the one with the previous secret.
"""

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def generate_secret() -> str:
    """Return a new endpoint secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """Return the HMAC key of the Standard Webhooks signature: the decoded part after whsec_."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise ValueError("a webhook secret is whsec_ followed by base64") from None


def standard_signature(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    """Return ``v1,<base64 HMAC-SHA256>`` over ``"<id>.<timestamp>.<body>"``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def conveyor_signature(secret: str, *, timestamp: int, body: bytes) -> str:
    """Return ``sha256=<hex HMAC-SHA256>`` keyed with the whole secret over ``"<ts>." + body``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def signature_headers(
    secrets_: list[str], *, message_id: str, topic: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """Return the identifying and signature headers of one attempt.

    ``secrets_`` are the endpoint's valid secrets, current first (see ``active_secrets``).
    """
    if not secrets_:
        raise ValueError("an endpoint needs a secret to sign with")
    current, *previous = secrets_
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            standard_signature(s, message_id=message_id, timestamp=timestamp, body=body)
            for s in secrets_
        ),
        "X-Conveyor-Topic": topic,
        "X-Conveyor-Event-Id": message_id,
        "X-Conveyor-Timestamp": str(timestamp),
        "X-Conveyor-Signature": conveyor_signature(current, timestamp=timestamp, body=body),
    }
    if previous:
        headers["X-Conveyor-Signature-Previous"] = conveyor_signature(
            previous[0], timestamp=timestamp, body=body
        )
    return headers


def active_secrets(endpoint, now) -> list[str]:
    """Return the secrets that sign ``endpoint``'s deliveries at ``now``, current first."""
    found = [endpoint.secret]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and expires > now:
        found.append(endpoint.previous_secret)
    return found
