"""DRF's authentication by API token, and its JSON parser. DRF imports this module while it
builds APIView (the settings name the classes here), so it imports nothing of DRF's views; the
errors are in crawlhub/web/api_errors.py, which DRF loads only when a request fails."""

from __future__ import annotations

from rest_framework import authentication, exceptions, parsers, renderers
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


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with a body nested deeper than Python's JSON reader can follow (say
    100,000 "[") refused as a parse error (400) rather than a RecursionError (500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(
                "JSON parse error - the body is nested too deeply (lists or objects inside one "
                "another, hundreds of levels down)."
            ) from None


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, for an answer that quotes a lone surrogate it was sent (a JSON body
    may carry "\\udfff", which Python reads as such; an error message naming the bad value
    echoes it): written with JSON's \\u escapes, which UTF-8 can carry, rather than failing to
    encode (a 500)."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return ascii_renderer.render(data, accepted_media_type, renderer_context)


class _ASCIIJSONRenderer(renderers.JSONRenderer):
    ensure_ascii = True


ascii_renderer = _ASCIIJSONRenderer()
