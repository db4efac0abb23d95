"""
The Milvus server credentials and TLS settings, as one serializable value (`MilvusAuth`).

The components that open Milvus clients take one `auth` init parameter instead of five. It
serializes in Haystack's own envelope, its secrets as `Secret.to_dict()` (the environment variable's
name, never a value), so a pipeline file loads it back with `default_from_dict`.
"""

from dataclasses import dataclass
from typing import Any

from haystack.core.serialization import default_from_dict, default_to_dict
from haystack.utils import Secret
from haystack.utils.auth import SecretType

# The environment variables of the Milvus credentials, read when the config leaves them empty.
CREDENTIAL_ENV = {"token": "MILVUS_TOKEN", "user": "MILVUS_USER", "password": "MILVUS_PASSWORD"}


def env_secret(name: str) -> Secret:
    """The credential `name` ("token", "user", "password") from its environment variable, if set."""
    return Secret.from_env_var(CREDENTIAL_ENV[name], strict=False)


@dataclass(frozen=True, repr=False)
class MilvusAuth:
    """
    Credentials and TLS for a Milvus server: a token, or a user and password, as Haystack `Secret`s,
    and whether to use TLS (with the server's certificate when it is self-signed). Milvus Lite
    ignores them. The secret values never show in `repr`, logs or the serialized form.

    Usage example:

    ```python
    auth = MilvusAuth(token=Secret.from_env_var("MILVUS_TOKEN", strict=False), secure=True)
    writer = MilvusChunkWriter(uri="https://milvus.example:19530", collection="knowledge", auth=auth)
    auth.to_dict()  # {"type": "components.stores.milvus_auth.MilvusAuth", "init_parameters": {...}}
    MilvusClient(uri=..., **auth.connect_args())  # the resolved values: never log them
    ```
    """

    token: Secret | None = None
    user: Secret | None = None
    password: Secret | None = None
    secure: bool = False
    server_pem_path: str | None = None

    def connect_args(self) -> dict[str, Any]:
        """
        The credential and TLS arguments of MilvusClient (and milvus-haystack's `connection_args`),
        with secrets resolved; unset ones are left out. The result holds secrets: never log it.
        """
        args: dict[str, Any] = {}
        for name, secret in (("token", self.token), ("user", self.user), ("password", self.password)):
            value = secret.resolve_value() if secret is not None else None
            if value:
                args[name] = value
        if self.secure:
            args["secure"] = True
        if self.server_pem_path:
            args["server_pem_path"] = self.server_pem_path
        return args

    def to_dict(self) -> dict[str, Any]:
        """Haystack's `{"type", "init_parameters"}` envelope; a token Secret refuses to serialize (ValueError)."""
        return default_to_dict(
            self,
            token=self.token,
            user=self.user,
            password=self.password,
            secure=self.secure,
            server_pem_path=self.server_pem_path,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MilvusAuth":
        """The value `to_dict` wrote, its Secret dicts deserialized."""
        return default_from_dict(cls, data)

    def __repr__(self) -> str:
        secrets = ", ".join(
            f"{name}={_describe(secret)}"
            for name, secret in (("token", self.token), ("user", self.user), ("password", self.password))
        )
        return f"MilvusAuth({secrets}, secure={self.secure}, server_pem_path={self.server_pem_path!r})"


def _describe(secret: Secret | None) -> str:
    """Where a secret comes from, never its value: `env:NAME`, `***` for a token, or None."""
    if secret is None:
        return "None"
    if secret.type is SecretType.ENV_VAR:
        return "env:" + "|".join(secret.to_dict()["env_vars"])
    return "***"
