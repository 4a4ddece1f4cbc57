"""Create, check and revoke API tokens. The API's authentication class, the tokens page and
the token endpoints only call these."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from crawlhub.models import ApiToken

TOKEN_PREFIX = "chk_"
# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)
MAX_TOKENS_PER_USER = 50


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """A new token for the user. Returns the row and the raw token, which is never stored."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Give the token a name, e.g. the script that uses it."]})
    if len(name) > 100:
        raise ValidationError({"name": ["At most 100 characters."]})
    if not name.isprintable():  # a NUL would be a 500 on PostgreSQL, which stores none
        raise ValidationError({"name": ["The name may not have control characters."]})
    if ApiToken.objects.filter(user=user, revoked_at=None).count() >= MAX_TOKENS_PER_USER:
        raise ValidationError(
            {"name": [f"You already have {MAX_TOKENS_PER_USER} tokens; revoke one first."]}
        )
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=raw[: len(TOKEN_PREFIX) + 6], key_hash=hash_token(raw)
    )
    return token, raw


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token of an active user for this raw value, or None. Records the use."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=hash_token(raw.strip()), revoked_at=None, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_revoke(*, token: ApiToken) -> bool:
    """Revoke at once; the row stays for the record. False when it already was revoked."""
    revoked = ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db(fields=["revoked_at"])
    return bool(revoked)
