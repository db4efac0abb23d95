"""MilvusAuth: Haystack's envelope and back, secrets resolved only for the client, never shown."""

import pytest
import yaml
from haystack.core.serialization import default_from_dict
from haystack.utils import Secret

from components.stores.milvus_auth import MilvusAuth, env_secret

TOKEN = "tok-4f1c9e"  # not secrets: throwaway values this test looks for
USER = "user-7b2d"
PASSWORD = "pw-90ae31"


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    monkeypatch.setenv("MILVUS_USER", USER)
    monkeypatch.setenv("MILVUS_PASSWORD", PASSWORD)


def from_env(**fields) -> MilvusAuth:
    return MilvusAuth(token=env_secret("token"), user=env_secret("user"), password=env_secret("password"), **fields)


@pytest.mark.usefixtures("credentials")
def test_round_trips_in_the_envelope_with_env_var_secrets():
    auth = from_env(secure=True, server_pem_path="/certs/milvus.pem")
    data = auth.to_dict()
    assert data == {
        "type": "components.stores.milvus_auth.MilvusAuth",
        "init_parameters": {
            "token": {"type": "env_var", "env_vars": ["MILVUS_TOKEN"], "strict": False},
            "user": {"type": "env_var", "env_vars": ["MILVUS_USER"], "strict": False},
            "password": {"type": "env_var", "env_vars": ["MILVUS_PASSWORD"], "strict": False},
            "secure": True,
            "server_pem_path": "/certs/milvus.pem",
        },
    }
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # plain types only
    for restored in (MilvusAuth.from_dict(data), default_from_dict(MilvusAuth, data)):
        assert restored == auth and restored.to_dict() == data
    assert MilvusAuth.from_dict(data).connect_args()["token"] == TOKEN
    for secret in (TOKEN, USER, PASSWORD):
        assert secret not in str(data)


def test_the_default_round_trips():
    assert MilvusAuth.from_dict(MilvusAuth().to_dict()) == MilvusAuth()


def test_a_token_secret_is_never_serialized():
    with pytest.raises(ValueError, match="Cannot serialize token-based secret"):
        MilvusAuth(token=Secret.from_token(TOKEN)).to_dict()


@pytest.mark.usefixtures("credentials")
def test_repr_shows_where_secrets_come_from_never_their_values():
    shown = [
        repr(from_env()),
        str(from_env()),
        repr(MilvusAuth(user=Secret.from_token(USER), password=Secret.from_token(PASSWORD))),
    ]
    for text in shown:
        for secret in (TOKEN, USER, PASSWORD):
            assert secret not in text
    assert shown[0] == (
        "MilvusAuth(token=env:MILVUS_TOKEN, user=env:MILVUS_USER, password=env:MILVUS_PASSWORD, "
        "secure=False, server_pem_path=None)"
    )
    assert "user=***, password=***" in shown[2] and "token=None" in shown[2]


@pytest.mark.usefixtures("credentials")
def test_connect_args_resolve_the_secrets():
    assert from_env(secure=True, server_pem_path="/certs/milvus.pem").connect_args() == {
        "token": TOKEN,
        "user": USER,
        "password": PASSWORD,
        "secure": True,
        "server_pem_path": "/certs/milvus.pem",
    }


def test_connect_args_leave_unset_ones_out(monkeypatch):
    for name in ("MILVUS_TOKEN", "MILVUS_USER", "MILVUS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    assert MilvusAuth().connect_args() == {}
    assert from_env().connect_args() == {}  # unset environment variables: no credential, no error
    monkeypatch.setenv("MILVUS_USER", "")
    assert from_env().connect_args() == {}  # an empty one neither
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    assert from_env(secure=False, server_pem_path="").connect_args() == {"token": TOKEN}
    assert MilvusAuth(user=Secret.from_token(USER), password=Secret.from_token(PASSWORD)).connect_args() == {
        "user": USER,
        "password": PASSWORD,
    }
