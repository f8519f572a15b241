"""OAuth2 rules of the platform, on top of django-oauth-toolkit.

DOT runs the flows (client credentials, authorization code + PKCE) and stores
the tokens. Two things are ours: a client gets only the scopes its tenant
allowed it, and an interactive token is only issued to a member of the
client's tenant. Bearer tokens are checked here too, once for every binding.
"""

from oauth2_provider.models import AccessToken
from oauth2_provider.oauth2_backends import get_oauthlib_core
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749.errors import AccessDeniedError

from tenants.models import Membership


class TenantOAuth2Validator(OAuth2Validator):
    def validate_scopes(self, client_id, scopes, client, request, *args, **kwargs):
        # The settings list every scope the platform knows; the client may ask only for its own.
        allowed = super().validate_scopes(client_id, scopes, client, request, *args, **kwargs)
        return allowed and set(scopes) <= client.scope_set

    def get_default_scopes(self, client_id, request, *args, **kwargs):
        # A token request without `scope` gets everything the client is allowed.
        return sorted(request.client.scope_set)

    def validate_bearer_token(self, token, scopes, request):
        # A token that acts for a person holds only while that person may sign in: a
        # deactivated account's tokens stop at once, on every binding and the API.
        valid = super().validate_bearer_token(token, scopes, request)
        return valid and _active(getattr(request, "user", None))

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        # ...and cannot be renewed either.
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        return valid and _active(getattr(request, "user", None))

    def save_authorization_code(self, client_id, code, request, *args, **kwargs):
        user = getattr(request, "user", None)
        if (
            user is None
            or not Membership.objects.filter(user=user, tenant_id=request.client.tenant_id).exists()
        ):
            # A person outside the tenant must not hold a token that acts for it.
            raise AccessDeniedError(
                description="You are not a member of this client's tenant", request=request
            )
        return super().save_authorization_code(client_id, code, request, *args, **kwargs)


def _active(user) -> bool:
    """A token's person may act: there is none (a client's own token), or the account is active."""
    return user is None or user.is_active


def bearer_token_verify(authorization: str, uri: str) -> AccessToken | None:
    """The valid access token an `Authorization` value carries, or None.

    Valid means: known, not expired, and its client not revoked (DOT checks
    `Application.is_usable`). Tenant and scope checks are the caller's job,
    because they decide between "invalid token" and "insufficient scope".
    Takes the header's value rather than a Django request, so that every
    binding (HTTP, and gRPC's `authorization` metadata) checks tokens the same
    way; `uri` is what a resource-restricted token is checked against (RFC 8707).
    """
    server = get_oauthlib_core().server
    headers = {"Authorization": authorization}
    try:
        valid, oauth_request = server.verify_request(uri, "POST", None, headers, scopes=[])
    except ValueError:
        return None  # a URI oauthlib cannot read (its query): nothing is verified against it
    return oauth_request.access_token if valid else None


def is_bearer(authorization: str) -> bool:
    return authorization.lower().startswith("bearer ")
