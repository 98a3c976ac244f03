"""The driver side of Ray's token authentication (Ray >= 2.5x: ``RAY_AUTH_MODE=token``).

A cluster started with ``RAY_AUTH_MODE=token ray start --head`` refuses a driver that
does not present its token; Ray's driver only sends one when ``RAY_AUTH_MODE=token``
is set in its own environment, and otherwise fails with a bare "Failed to connect".
Ray reads the token from ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` or
``~/.ray/auth_token`` (what ``ray get-auth-token --generate`` writes). See docs/cluster.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, MutableMapping


def token_source(environ: Mapping[str, str], home: Path | None = None) -> str | None:
    """Where this driver's token would come from (an env var name or a file), or None if there is none."""
    if environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = environ.get("RAY_AUTH_TOKEN_PATH")
    if path and Path(path).is_file():
        return path
    default = (home or Path.home()) / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def enable_driver_token_auth(address: str | None, environ: MutableMapping[str, str] = os.environ,
                             home: Path | None = None) -> str | None:
    """Before ``ray.init(address=...)`` to an existing cluster: turn token mode on when a token is at hand.

    Leaves an explicit ``RAY_AUTH_MODE`` alone (``disabled`` included) and does nothing for a
    cluster this process starts itself. Returns the token's source when it turned token mode on.
    """
    if not address or "RAY_AUTH_MODE" in environ:
        return None
    source = token_source(environ, home)
    if source is not None:
        environ["RAY_AUTH_MODE"] = "token"
        if environ is os.environ:
            _refresh_ray_config()
    return source


def _refresh_ray_config() -> None:
    """Ray caches its config (auth mode included) when imported; re-read it, as Ray's own
    ``authentication_token_setup._enable_token_auth`` does."""
    try:
        from ray._raylet import Config
    except ImportError:  # pragma: no cover - another Ray layout: the env var alone must do
        return
    Config.initialize("")


def connection_hint(address: str, environ: Mapping[str, str] = os.environ, home: Path | None = None) -> str:
    """What to check when the driver cannot connect to ``address``."""
    mode = environ.get("RAY_AUTH_MODE", "unset")
    source = token_source(environ, home)
    return (f"could not connect to the Ray cluster at {address} (RAY_AUTH_MODE={mode}, token: "
            f"{source or 'none found'}). Check that `ray start --head` runs there and the port is reachable; "
            f"if the head was started with RAY_AUTH_MODE=token, copy its token (`ray get-auth-token` on the head) "
            f"into RAY_AUTH_TOKEN or ~/.ray/auth_token here and set RAY_AUTH_MODE=token (docs/cluster.md)")
