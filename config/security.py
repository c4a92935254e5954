"""Start-up checks of the settings a public site depends on (run from settings.py)."""

from __future__ import annotations

# Django's own deploy check (security.W009) asks for at least 50 characters and 5 distinct
# ones; a key that fails it can be guessed or brute-forced, and every signed value (session,
# password-reset and verification links) with it.
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARACTERS = 5


def secret_key_problem(key: str, *, development_key: str) -> str | None:
    """Why ``key`` must not sign anything on a public site, or None if it may."""
    if not key or key == development_key or key.startswith("django-insecure"):
        return "SECRET_KEY is not set (the built-in development key is in use)"
    if len(key) < MIN_SECRET_KEY_LENGTH:
        return f"SECRET_KEY has {len(key)} characters; at least {MIN_SECRET_KEY_LENGTH} are needed"
    if len(set(key)) < MIN_SECRET_KEY_UNIQUE_CHARACTERS:
        return f"SECRET_KEY has fewer than {MIN_SECRET_KEY_UNIQUE_CHARACTERS} distinct characters"
    return None
