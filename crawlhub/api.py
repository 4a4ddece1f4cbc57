"""The JSON API under /api/: authentication, errors, the router, API tokens and the schema.

Included from crawlhub/urls.py. Each app owns its API routes (crawls/api/urls.py,
proxies/api_urls.py); this module reaches them by dotted name, as the project's urls include the
apps' pages, so crawlhub never imports an app. DRF's views answer 401/403 themselves, so
LoginRequiredMiddleware lets them through (DRF marks its views login_required = False).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import include, path
from django.utils.module_loading import import_string
from django.views.decorators.http import require_POST
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.renderers import (
    OpenApiJsonRenderer,
    OpenApiJsonRenderer2,
    OpenApiYamlRenderer,
    OpenApiYamlRenderer2,
)
from drf_spectacular.utils import extend_schema, extend_schema_view
from drf_spectacular.views import SpectacularAPIView
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter

from crawlhub import tokens
from crawlhub.models import ApiToken
from crawlhub.web import serializers as api_fields
from crawlhub.web.api_errors import JSONErrors

# --- Authentication ---------------------------------------------------------------------------


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "crawlhub.web.drf.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema) -> dict:
        return {"type": "http", "scheme": "bearer", "description": "A token from /account/tokens/"}


# --- Tokens -----------------------------------------------------------------------------------


class TokenSerializer(api_fields.ModelSerializer):
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at", "active"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; only a hash is kept.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


@extend_schema_view(
    list=extend_schema(summary="Your API tokens"),
    create=extend_schema(
        summary="Create a token (the response is the only time it is shown)",
        request=TokenSerializer,
        responses={201: NewTokenSerializer},
    ),
    destroy=extend_schema(summary="Revoke a token"),
)
class TokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = TokenSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = TokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, raw = tokens.token_create(user=request.user, name=body.validated_data["name"])
        data = NewTokenSerializer(token).data
        data["token"] = raw
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        tokens.token_revoke(token=instance)


NEW_TOKEN_KEY = "crawlhub.new_token"


def token_page(request: HttpRequest) -> HttpResponse:
    """Create and revoke your API tokens. A new token is shown once, on the page its creation
    redirects to (POST, redirect, GET: reloading that page makes no second token)."""
    errors = {}
    if request.method == "POST":
        try:
            token, raw = tokens.token_create(user=request.user, name=request.POST.get("name", ""))
        except DjangoValidationError as exc:
            errors = exc.message_dict
        else:
            request.session[NEW_TOKEN_KEY] = {"id": token.pk, "token": raw}
            return redirect("api_tokens")
    new = request.session.pop(NEW_TOKEN_KEY, None) if request.method == "GET" else None
    return render(
        request,
        "crawlhub/tokens.html",
        {
            "nav": "tokens",
            "tokens": ApiToken.objects.filter(user=request.user),
            "new_token": new["token"] if new else None,
            "new_token_id": new["id"] if new else None,
            "errors": errors,
            "name": request.POST.get("name", ""),
        },
        status=400 if errors else 200,
    )


@require_POST
def token_revoke_page(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if tokens.token_revoke(token=token):
        messages.success(request, f"Token “{token.name}” revoked; it no longer works.")
    return redirect("api_tokens")


# --- Routes -----------------------------------------------------------------------------------


class Router(DefaultRouter):
    # JSON only (exports choose with ?format=): no ".json" twins of every route, and suffix
    # routes like /crawls/1/cancel.json would pass a `format` argument the actions do not take,
    # a 500.
    include_format_suffixes = False

    def register_routes(self, routes: str) -> None:
        """Register an app's routes, given by the dotted name of its list of (prefix, viewset,
        basename), as include() takes an app's urls by name."""
        for prefix, viewset, basename in import_string(routes):
            self.register(prefix, viewset, basename=basename)


# One router, so that the API root lists every app's endpoints, in this order.
router = Router()
router.register_routes("crawls.api.urls.routes")
router.register_routes("proxies.api_urls.routes")
router.register("tokens", TokenViewSet, basename="api-token")


class SchemaView(JSONErrors, SpectacularAPIView):
    # YAML by default, as clients expect; ?format=json as application/json, which a browser
    # shows rather than downloads (the docs page links to it).
    renderer_classes = [
        OpenApiYamlRenderer,
        OpenApiYamlRenderer2,
        OpenApiJsonRenderer2,
        OpenApiJsonRenderer,
    ]


def api_docs_page(request: HttpRequest) -> HttpResponse:
    """The API's documentation: Swagger UI (drf-spectacular-sidecar's files, served from here)
    reading the schema; started by a static script, as the Content-Security-Policy wants."""
    return render(request, "crawlhub/api_docs.html", {"nav": "api"})


urlpatterns = [
    path("", include("proxies.api_urls")),  # pool/health/
    # Signed-in users only (the default permission): the schema describes the whole API.
    path("schema/", SchemaView.as_view(), name="api-schema"),
    path("", include(router.urls)),
]
