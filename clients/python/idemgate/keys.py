"""Keys derived from the agent's secret (agent/keys.go and agent/secret.go,
rule for rule): the workflow article's stable, deterministic key, so that
a journal lost (a new machine, a deleted file) makes the same key again and
the gateway replays instead of performing the write twice.

The key of an intent's version is ``ik1.`` and the URL-safe base64
(unpadded) of HMAC-SHA256, under the secret, of the RFC 8785 form of
``{"agent", "intent", "use": "idempotency-key", "version"}``: the Go client
and ``idemgate call`` make the same one.

The secret is configuration, never the journal's: a file the caller names
(``secret_file=``, or $IDEMGATE_AGENT_SECRET_FILE), which must exist; else
$IDEMGATE_AGENT_SECRET; else $XDG_CONFIG_HOME/idemgate/agent-secret (or
~/.config/…), made with 32 random bytes, mode 0600, on first use.
"""

import base64
import hashlib
import hmac
import os
import secrets
import tempfile
from typing import Optional, Union

from .canonical import canonical
from .errors import Error

PREFIX = "ik1."
MIN_SECRET = 16
_MAX_AGENT = 128


class Keys:
    """The keys of one agent (``agent``: its name, "" when the secret alone
    names it) under its secret; the secret is never shown."""

    def __init__(self, secret: bytes, agent: str = "") -> None:
        if len(secret) < MIN_SECRET:
            raise Error("weak_secret", "agent secret: want at least %d bytes" % MIN_SECRET)
        if len(agent.encode("utf-8", "surrogatepass")) > _MAX_AGENT or not agent.isprintable():
            raise Error("invalid_agent", "agent name %r: want up to %d printable characters" % (agent, _MAX_AGENT))
        self._secret = bytes(secret)
        self.agent = agent

    def key(self, intent: str, version: int) -> str:
        """The key of the intent's version (agent.Keys.Key)."""
        doc = {"agent": self.agent, "intent": intent, "use": "idempotency-key", "version": version}
        mac = hmac.new(self._secret, canonical(doc), hashlib.sha256).digest()
        return PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return "Keys(agent=%r, secret hidden)" % self.agent

    __str__ = __repr__


def default_secret_file() -> str:
    """$XDG_CONFIG_HOME/idemgate/agent-secret, else ~/.config/idemgate/agent-secret."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):
        config = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "idemgate", "agent-secret")


def load_secret(secret_file: Optional[str]) -> bytes:
    """The agent's secret, found as the module's docstring says."""
    path = secret_file or os.environ.get("IDEMGATE_AGENT_SECRET_FILE", "")
    if path:
        return read_secret(path)
    env = os.environ.get("IDEMGATE_AGENT_SECRET", "")
    if env:
        return env.encode("utf-8")
    return ensure_secret(default_secret_file())


def read_secret(path: str) -> bytes:
    """The secret a file holds, surrounding white space left out."""
    try:
        with open(path, "rb") as f:
            return f.read().strip()
    except OSError as e:
        raise Error("no_secret", "agent secret: %s" % e) from None


def ensure_secret(path: str) -> bytes:
    """The secret at path, made there first if there is none; two
    processes making it at once keep the first one linked into place."""
    if os.path.exists(path):
        return read_secret(path)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".agent-secret-", dir=os.path.dirname(path))  # 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii") + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            os.remove(tmp)
    except OSError as e:
        raise Error("no_secret", "agent secret: %s" % e) from None
    return read_secret(path)


def keys_for(secret: Union[str, bytes, None], secret_file: Optional[str], agent: Optional[str]) -> Keys:
    """A client's keys: its ``secret`` if given, else load_secret; its
    ``agent`` if given, else $IDEMGATE_AGENT."""
    if secret is None:
        raw = load_secret(secret_file)
    else:
        raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return Keys(raw, os.environ.get("IDEMGATE_AGENT", "") if agent is None else agent)
