"""What a request's bearer token turned out to be, for API views of any app.

accounts.authentication.BearerTokenMiddleware looks the token up (tokens are accounts'
rows) and leaves its finding on the request as ``api_token``; views read it here, so an
app's API needs nothing of accounts.
"""

from __future__ import annotations

from django.http import HttpRequest

# Tokens authenticate API requests only; pages keep to sessions.
API_PREFIX = "/api/"


def bearer_token_state(request: HttpRequest) -> str:
    """ "valid", "invalid" (a bearer header whose token is unknown or revoked) or "none"."""
    if not hasattr(request, "api_token"):
        return "none"
    return "valid" if request.api_token is not None else "invalid"
