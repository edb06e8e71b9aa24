"""Bearer tokens for `mlms serve`.

Two tokens, both optional, both from :class:`~mlmodelscope.server.state.ServeSettings`:

- the **read token** guards every read (API and dashboard); without one, reads are open (the CLI
  allows that only on a loopback address);
- the **write token** guards ``POST /api/v1/runs``, launching and cancelling launches, and
  also allows reads; without one, writes
  are refused (403) with a message saying how to enable them.

Tokens are compared with :func:`hmac.compare_digest`. A missing or unknown token is 401 with
``WWW-Authenticate: Bearer``; a valid token without the right (the read token on a write) is
403. Routes declare :func:`require_read` or :func:`require_write` as dependencies.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Final, Literal

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mlmodelscope.server.state import settings_of

COOKIE: Final = "mlms_token"
"""The dashboard keeps the token a browser logged in with here (HttpOnly, SameSite=Lax). It
counts for reads only (so the run page's link to its JSON works in that browser); writes take
the Authorization header alone, so no page elsewhere can make a browser write."""
ENABLE_WRITES: Final = (
    "writes are disabled on this server: start `mlms serve` with --write-token-file FILE "
    "or $MLMS_SERVE_WRITE_TOKEN to enable POST /api/v1/runs and launches"
)

bearer = HTTPBearer(
    auto_error=False,
    description="The read token (reads) or the write token (reads and writes) of `mlms serve`.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _matches(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _unauthorized(message: str, error: str | None = None) -> HTTPException:
    challenge = 'Bearer realm="mlms serve"'
    if error is not None:
        challenge += f', error="{error}"'
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": challenge}
    )


def token_role(request: Request, credentials: Credentials) -> Literal["write", "read"] | None:
    """Which token the request carries: ``write``, ``read``, or None (no token); 401 for a
    token that is neither."""
    if credentials is None:
        return None
    settings = settings_of(request)
    if _matches(credentials.credentials, settings.write_token):
        return "write"
    if _matches(credentials.credentials, settings.read_token):
        return "read"
    raise _unauthorized("unknown bearer token", "invalid_token")


Role = Annotated[Literal["write", "read"] | None, Depends(token_role)]


def require_read(request: Request, role: Role) -> None:
    """Reads: the read token or the write token (header, or the dashboard's cookie), or nothing
    when no read token is set."""
    if role is None and settings_of(request).read_token is not None:
        cookie = request.cookies.get(COOKIE)
        settings = settings_of(request)
        if cookie and (
            _matches(cookie, settings.read_token) or _matches(cookie, settings.write_token)
        ):
            return
        raise _unauthorized("this server needs a bearer token: Authorization: Bearer <token>")


def require_write(request: Request, role: Role) -> None:
    """Writes: the write token; 403 when the server has none or the token only reads."""
    if settings_of(request).write_token is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=ENABLE_WRITES)
    if role is None:
        raise _unauthorized("writing needs the write token: Authorization: Bearer <token>")
    if role != "write":
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail="this token may only read: writing needs the server's write token",
        )
