"""DRF's authentication by API token. DRF imports this module while it builds APIView (the
settings name the class here), so it imports nothing of DRF's views; the errors are in
crawlhub/api_errors.py, which DRF loads only when a request fails."""

from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from crawlhub import tokens


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>` (or `Token <token>`) with a token from /account/tokens/."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].decode(errors="replace").lower() not in self.keywords:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: expected 'Bearer <token>'."
            )
        try:
            raw = parts[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                "The token has characters it cannot have."
            ) from None
        token = tokens.token_authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) when no credentials came.
        return 'Bearer realm="api"'
