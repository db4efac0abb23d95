"""Where a server may bind and with which key: checked before any heavy import or bind."""

import ipaddress
import os

from omegaconf import DictConfig

from components.errors import BadInputError

API_KEY_ENV = "KNOWLEDGE_API_KEY"


class ServeError(BadInputError):
    """A server that must not or cannot start (CLI exit status 2)."""


def resolve_api_key(cfg: DictConfig) -> str | None:
    """The API key: `KNOWLEDGE_API_KEY`, else `serve.api_key`; None when neither is set."""
    key = os.environ.get(API_KEY_ENV) or cfg.serve.api_key
    return key or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond loopback without an API key."""
    if not is_loopback(host) and not api_key:
        raise ServeError(
            f"refusing to serve on {host} without an API key: set {API_KEY_ENV} or serve.api_key, or bind to 127.0.0.1"
        )
