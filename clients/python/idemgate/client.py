"""The client: one gateway, one principal's token, an optional journal."""

import functools
import inspect
import json as _json
import ssl
import threading
import urllib.parse
from typing import Any, Callable, Dict, Optional, TypeVar, Union

from . import journal as jr
from .action import CONTROL, Heartbeats, Operation, problem_error
from .agent import AgentMixin, Policy
from .canonical import canonical
from .errors import Error, Unavailable
from .keys import Keys, keys_for
from .transport import Transport, TransportError

F = TypeVar("F", bound=Callable[..., Any])


def check_run(run: str) -> None:
    """A run the gateway receives as written in Idempotency-Run (agent.CheckRun):
    1 to 255 bytes of printable UTF-8, no surrounding spaces."""
    if not run or len(run.encode("utf-8", "surrogatepass")) > 255:
        raise Error("invalid_run", "want 1 to 255 bytes")
    if run != run.strip() or not run.isprintable():
        raise Error("invalid_run", "%r starts or ends with a space, or has a non-printing character" % run)


class Client(AgentMixin):
    """A client of one idemgate gateway, as the principal ``token`` names.

    ``journal`` is the path of the agent journal that ``request(...,
    intent=...)`` keeps its keys in (the Go client's and ``idemgate call``'s
    file format; default: $IDEMGATE_JOURNAL, else the CLI's
    ~/.local/state/idemgate/journal.db, opened on first use). ``timeout``
    bounds each HTTP request; ``wait`` is how long ``action()`` waits for
    an in-flight duplicate (another process holding the same key) before
    raising ``InProgress``; ``policy`` bounds the retries of "not now"
    answers and lost ones. ``run`` names the agent run in every request
    (Idempotency-Run, which the audit log records); default, one made per
    client.

    ``request()`` derives each new intent's key from the agent's secret
    and name, as ``idemgate call`` does (see keys.py): ``secret`` (str or
    bytes), else the file ``secret_file``, else $IDEMGATE_AGENT_SECRET_FILE,
    $IDEMGATE_AGENT_SECRET, or ~/.config/idemgate/agent-secret, made on
    first use; ``agent`` (default $IDEMGATE_AGENT, else none) names the
    agent among those sharing a secret. They are read on the first
    ``request()``, never by ``action()``.

    Thread-safe: each thread keeps its own keep-alive connection.
    """

    def __init__(self, url: str, token: str, journal: Optional[str] = None, timeout: float = 30.0,
                 wait: float = 30.0, policy: Optional[Policy] = None, run: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, secret: Union[str, bytes, None] = None,
                 secret_file: Optional[str] = None, agent: Optional[str] = None) -> None:
        if not token:
            raise Error("unauthorized", "no token: the gateway needs a principal's bearer token")
        if run is not None:
            check_run(run)
        self.url = url
        self.token = token
        self.timeout = timeout
        self.wait = wait
        self.policy = policy or Policy()
        self.run = run or "run_" + jr.new_ulid()
        self._transport = Transport(url, timeout=timeout, ssl_context=ssl_context)
        self._journal_path = journal
        self._journal_obj: Optional[jr.Journal] = None
        self._journal_lock = threading.Lock()
        self._heartbeats = Heartbeats()
        self._key_config = (secret, secret_file, agent)
        self._keys_obj: Optional[Keys] = None

    def _journal(self) -> jr.Journal:
        with self._journal_lock:
            if self._journal_obj is None:
                self._journal_obj = jr.Journal(self._journal_path or jr.default_path())
            return self._journal_obj

    def _keys(self) -> Keys:
        with self._journal_lock:
            if self._keys_obj is None:
                self._keys_obj = keys_for(*self._key_config)
            return self._keys_obj

    def _auth(self) -> dict:
        return {"Authorization": "Bearer " + self.token, "Idempotency-Run": self.run}

    def close(self) -> None:
        """Stops the heartbeats, closes the connections and the journal."""
        self._heartbeats.close()
        self._transport.close()
        with self._journal_lock:
            if self._journal_obj is not None:
                self._journal_obj.close()
                self._journal_obj = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def action(self, name: str, key: str, command: Any = None, wait: Optional[float] = None) -> Operation:
        """An effect this process performs itself, registered under ``key``
        (the caller's stable key, built from non-sensitive identifiers:
        workflow, action, object, version, destination). Use it as a
        context manager; see Operation. ``command`` (JSON) is fingerprinted
        with the key: the same key with another command is refused (422
        fingerprint_mismatch), whatever the state. ``wait`` overrides the
        client's wait for an in-flight duplicate."""
        return Operation(self, name, key, command, wait)

    def idempotent(self, action: str, key: Callable[..., str], wait: Optional[float] = None) -> Callable[[F], F]:
        """Makes a function an action: its arguments by parameter name
        (defaults applied) are the command, ``key(*args, **kwargs)`` the
        key, and its return value (JSON) the recorded result. A later call
        with the same key returns the recorded result without running the
        function; both return the result as JSON reads it back (a tuple
        comes back a list), so that the first call and a replay agree.

        The function raising records ``unknown`` (NotPerformed: a release),
        and the exception reaches the caller. A replay of an operation
        recorded failed (by another caller's ``op.fail``) raises
        Error("action_failed") with the recorded result as ``result``."""
        def decorate(fn: F) -> F:
            sig = inspect.signature(fn)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                command = dict(bound.arguments)
                with self.action(action, key=key(*args, **kwargs), command=command, wait=wait) as op:
                    if op.replayed:
                        return _replayed_result(op)
                    result = _json.loads(canonical(fn(*args, **kwargs), "invalid_result"))
                    op.succeed(result)
                    return result
            return wrapper  # type: ignore[return-value]
        return decorate


    def approve(self, approval_id: str, fingerprint: str, note: str = "") -> Dict[str, Any]:
        """Approves ``approval_id`` as this client's principal, echoing
        ``fingerprint``, the request it was shown (``ApprovalRequired``
        carries both): a decision is never for another request. Returns
        the approval as the gateway now holds it. The principal must hold
        an approver role of the approval's tenant and not be its
        requester; a refusal raises Error (403 ``forbidden``, 409
        ``approval_mismatch``: another request waits, 409
        ``approval_closed``: decided, expired or used already)."""
        return self._decide(approval_id, "approve", fingerprint, note)

    def deny(self, approval_id: str, fingerprint: str, note: str = "") -> Dict[str, Any]:
        """Denies ``approval_id``, as ``approve`` approves it: the
        operation is then ``failed`` for good."""
        return self._decide(approval_id, "deny", fingerprint, note)

    def _decide(self, approval_id: str, verb: str, fingerprint: str, note: str) -> Dict[str, Any]:
        path = "%s/approvals/%s/%s" % (CONTROL, urllib.parse.quote(approval_id, safe=""), verb)
        h = self._auth()
        h["Content-Type"] = "application/json"
        body = canonical({"fingerprint": fingerprint, "note": note}, "invalid_command")
        try:
            resp = self._transport.request("POST", path, body, h)
        except TransportError as t:
            raise Unavailable("gateway_unreachable", "%s: %s" % (verb, t.cause))
        if resp.status != 200:
            raise problem_error(resp)
        return resp.json() or {}


def _replayed_result(op: Operation) -> Any:
    if op.state == "failed":
        err = Error("action_failed", "operation %s was recorded failed" % op.operation_id,
                    operation_id=op.operation_id, state="failed")
        err.result = op.result  # type: ignore[attr-defined]
        raise err
    return op.result
