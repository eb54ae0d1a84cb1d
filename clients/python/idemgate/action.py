"""Actions: effects the caller performs itself, with the gateway as registry.

``client.action(name, key=..., command=...)`` reserves the key before the
effect (``POST /_idem/v1/actions/{name}``); the process that gets 201 owns
the effect under a lease, kept alive by a background heartbeat while the
block runs, and records its result (``complete``) when the block ends. A
caller that meets a finished operation gets its recorded result instead
(``replayed``), and one that meets it in flight waits for it.
"""

import heapq
import itertools
import re
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .canonical import canonical
from .errors import ApprovalRequired, Error, LeaseLost, NotPerformed, Unavailable, error_for
from .times import parse as parse_time
from .transport import Response, TransportError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}\Z")
CONTROL = "/_idem/v1"
# Answers that mean "not now, nothing changed": the same request later is safe.
_TRANSIENT_CODES = ("store_unavailable", "rate_limited", "concurrency_locked", "upstream_unavailable")


def check_key(key: str) -> None:
    """A key the gateway reads exactly as written: 1 to 255 printable ASCII
    characters, not starting with '"' (which the gateway unquotes as a
    Structured-Field string) nor with or ending in a space (which HTTP drops)."""
    if not isinstance(key, str) or not 1 <= len(key) <= 255:
        raise Error("invalid_key", "a key is 1 to 255 characters")
    if any(not 0x20 <= ord(c) <= 0x7E for c in key):
        raise Error("invalid_key", "a key is printable ASCII")
    if key[0] == '"' or key != key.strip(" "):
        raise Error("invalid_key", "a key may not start with '\"', nor start or end with a space")


def transient(resp: Response) -> bool:
    """Nothing changed and the same request later is safe: the store or
    a limit said "not now", or something in front of the gateway failed."""
    code = resp.code()
    return code in _TRANSIENT_CODES or (not code and resp.status in (429, 502, 503, 504))


def problem_error(resp: Response, operation_id: Optional[str] = None) -> Error:
    """The family's error for a refusal; ``operation_id``, the operation
    the caller knows it asked about, names it when the answer does not."""
    p = resp.problem() or {}
    code = str(p.get("code") or "http_%d" % resp.status)
    return error_for(code, str(p.get("detail") or ""), status=resp.status,
                     operation_id=p.get("operation_id") or resp.header("idempotency-operation") or operation_id or None,
                     state=p.get("state"), status_url=p.get("status_url"), retry_after=resp.retry_after() or None,
                     problem=p)


class Operation:
    """One action under one key: a context manager that reserves it on
    entry and records what became of it on exit.

    After entry: ``replayed`` says the operation was done before (then
    ``result`` is what was recorded and ``state`` says succeeded or failed)
    or this process owns it (``fence`` is its fencing token). Call
    ``succeed(result)`` or ``fail(result)`` once the effect is done; a block
    that ends normally without either records succeeded with a null
    result. A block that raises records ``unknown`` (the effect may have
    begun), naming only the exception's type, never its message (it may
    hold a recipient, a token, a payload); ``NotPerformed`` records a
    release instead. Either exception is re-raised.
    """

    def __init__(self, client: "Client", name: str, key: str, command: Any, wait: Optional[float]) -> None:
        if not isinstance(name, str) or not NAME.match(name):
            raise Error("invalid_action", "action name %r: want [a-z0-9][a-z0-9._-]{0,127}" % (name,))
        check_key(key)
        self.name, self.key, self.command = name, key, command
        self._body = canonical(command, "invalid_command")  # refused before anything is sent
        self._client = client
        self._wait = client.wait if wait is None else wait
        self.replayed = False
        self.result: Any = None
        self.operation: Dict[str, Any] = {}
        self.duplicate_of: Optional[str] = None
        self.fence: Optional[int] = None
        self.lease_until = ""
        self._token = ""
        self._lease = 0.0          # the action's lease, in seconds
        self._ended = False        # an owner step ended the lease (complete, release, unknown)
        self._lost: Optional[LeaseLost] = None
        self._owner = threading.Lock()  # one owner step at a time: heartbeats and the rest
        self._heart_stopped = False  # no heartbeat may be sent any more
        self._beat: Optional[threading.Thread] = None  # the last heartbeat's thread
        self._entered = False

    # -- what the caller reads

    @property
    def operation_id(self) -> str:
        return str(self.operation.get("id") or "")

    @property
    def state(self) -> str:
        return str(self.operation.get("state") or "")

    @property
    def lost(self) -> bool:
        """A heartbeat or a step was answered lease_lost: this process no
        longer owns the effect."""
        return self._lost is not None

    # -- entry: reserve

    def __enter__(self) -> "Operation":
        if self._entered:
            raise Error("already_entered", "an Operation is entered once; call client.action again")
        self._entered = True
        self._reserve()
        return self

    def _reserve(self) -> None:
        c = self._client
        path = CONTROL + "/actions/" + urllib.parse.quote(self.name, safe="")
        started = time.monotonic()
        wait_until = started + max(0.0, self._wait)
        prefer, n = 0, 1
        while True:
            h = c._auth()
            h["Idempotency-Key"] = self.key
            h["Content-Type"] = "application/json"
            if prefer:
                h["Prefer"] = "wait=%d" % prefer
            sent_at = time.monotonic()
            try:
                resp = c._transport.request("POST", path, self._body, h)
            except TransportError as t:
                # A reserve changes nothing in the world, so it is resent
                # with the same key; if the lost one did reserve, the resend
                # meets it in progress and waits.
                n = self._pause(n, started, 0.0, Unavailable("gateway_unreachable", t.cause))
                continue
            if resp.status == 201:
                return self._own(resp)
            if resp.status == 200:
                return self._replay(resp)
            if resp.status == 202:
                raise _approval_required(resp)
            if resp.code() == "in_progress":
                # Wait for the owner: the gateway holds the next request
                # (Prefer: wait) until the operation ends. One it answered
                # at once although asked to wait (a lapsed lease the sweep
                # has not turned unknown yet) is sent again after a pause,
                # never in a spin.
                if prefer and time.monotonic() - sent_at < 1:
                    time.sleep(min(max(resp.retry_after(), 0.2), max(0.0, wait_until - time.monotonic())))
                prefer = _wait_for(wait_until, c._transport.timeout)
                if not prefer:
                    raise problem_error(resp)
                continue
            if transient(resp):
                n = self._pause(n, started, resp.retry_after(), problem_error(resp))
                continue
            raise problem_error(resp)

    def _pause(self, n: int, started: float, retry_after: float, err: Error) -> int:
        """Sleeps before retry n+1 within the client's policy, or raises err."""
        p = self._client.policy
        delay = max(p.backoff(n), retry_after)
        if n >= p.max_attempts or time.monotonic() + delay - started > p.max_elapsed:
            raise err
        time.sleep(delay)
        return n + 1

    def _own(self, resp: Response) -> None:
        body = resp.json() or {}
        lease = body.get("lease") or {}
        self.operation = body.get("operation") or {}
        self._token, self.fence = str(lease.get("token") or ""), lease.get("fence")
        self.lease_until = str(lease.get("until") or "")
        if not self._token or self.fence is None:
            raise Error("bad_answer", "the gateway's 201 carried no lease", status=201,
                        operation_id=self.operation_id or None)
        self._lease = _lease_seconds(self.operation, self.lease_until)
        self._client._heartbeats.start(self)

    def _replay(self, resp: Response) -> None:
        body = resp.json() or {}
        self.replayed = True
        self.operation = body.get("operation") or {}
        self.result = body.get("result")
        self.duplicate_of = resp.header("idempotency-duplicate-of") or None

    # -- owner steps

    def succeed(self, result: Any = None, result_ref: Optional[str] = None) -> None:
        """Records the effect as done, with its result (JSON; refused before
        sending if it is not) and the effect's reference in the world."""
        body: Dict[str, Any] = {"state": "succeeded", "result": result}
        if result_ref is not None:
            body["result_ref"] = result_ref
        self._complete(body, result)

    def fail(self, result: Any = None) -> None:
        """Records a definite failure (nothing happened, and retrying will
        not change it): every later call with the key gets it replayed."""
        self._complete({"state": "failed", "result": result}, result)

    def _complete(self, body: Dict[str, Any], result: Any) -> None:
        canonical(result, "invalid_result")  # refused before sending, the lease still held
        self._end("complete", body)
        self.result = result

    def _end(self, step: str, body: Dict[str, Any]) -> None:
        """An owner step that ends the lease: the heartbeat stops once it
        is recorded (not before: a refused completion keeps the lease)."""
        if not self._token:
            why = "it was replayed" if self.replayed else "it is not reserved: use client.action(...) in a with block"
            raise Error("not_owner", "this process does not own operation %s: %s" % (self.operation_id, why))
        if self._ended:
            raise Error("already_ended", "operation %s was already completed, released or marked unknown here"
                        % self.operation_id)
        with self._owner:
            if self._lost is not None:
                raise self._lost
            self._step(step, body)
            self._ended = True
        self._stop_heart()

    def _step(self, step: str, extra: Dict[str, Any], attempts: Optional[int] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        """One fenced step, retried on a lost answer or a "not now": the
        gateway takes a step repeated with the same token and fence as the
        one already done. The caller holds the owner lock."""
        c = self._client
        payload = dict(extra, token=self._token, fence=self.fence)
        data = canonical(payload, "invalid_result")
        path = CONTROL + "/operations/" + urllib.parse.quote(self.operation_id, safe="") + "/" + step
        started, n = time.monotonic(), 1
        while True:
            h = c._auth()
            h["Content-Type"] = "application/json"
            try:
                resp = c._transport.request("POST", path, data, h, timeout=timeout)
            except TransportError as t:
                err: Error = Unavailable("gateway_unreachable", "%s: %s" % (step, t.cause),
                                         operation_id=self.operation_id)
                n = self._step_pause(n, started, 0.0, err, attempts)
                continue
            if resp.status == 200:
                answer = resp.json() or {}
                self.operation = answer.get("operation") or self.operation
                return answer
            if resp.code() == "lease_lost":
                self._lost = problem_error(resp, self.operation_id)  # type: ignore[assignment]
                raise self._lost  # type: ignore[misc]
            if transient(resp):
                n = self._step_pause(n, started, resp.retry_after(), problem_error(resp, self.operation_id), attempts)
                continue
            raise problem_error(resp, self.operation_id)

    def _step_pause(self, n: int, started: float, retry_after: float, err: Error, attempts: Optional[int]) -> int:
        if attempts is not None and n >= attempts:
            raise err
        return self._pause(n, started, retry_after, err)

    def _stop_heart(self) -> None:
        Heartbeats.stop(self)

    # -- exit

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        try:
            if self.replayed or self._ended or not self._token:
                return False
            if exc is None:
                if self._lost is not None:
                    raise self._lost
                self._end("complete", {"state": "succeeded", "result": None})
                return False
            if isinstance(exc, LeaseLost) or self._lost is not None:
                return False  # nothing more to record: the gateway's sweep makes it unknown
            if isinstance(exc, NotPerformed):
                self._quietly("release", {"reason": _note(exc.reason)})
            else:
                self._quietly("unknown", {"reason": "the block raised " + _type_name(exc_type)})
            return False
        finally:
            self._stop_heart()

    def _quietly(self, step: str, body: Dict[str, Any]) -> None:
        """An owner step on the way out of a block that raised: the block's
        exception is what the caller must see, so this step's own failure
        is kept on the operation (``exit_error``), not raised over it."""
        try:
            self._end(step, body)
        except Error as e:
            self.exit_error = e

    exit_error: Optional[Error] = None


# The gateway's bound on a step's reason (control.MaxNote), in characters.
MAX_NOTE = 2000


def _note(reason: str) -> str:
    """A release's reason within the gateway's bound: a longer one would be
    refused, and the release with it, leaving the lease to lapse into
    unknown for an effect known not to have happened."""
    reason = str(reason or "not performed")
    return reason if len(reason) <= MAX_NOTE else reason[:MAX_NOTE - 1] + "\u2026"


def _type_name(t: Any) -> str:
    """An exception's type, with its module unless it is a builtin: never
    the message, which may hold a recipient, a token or a payload."""
    mod = getattr(t, "__module__", "") or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", "exception")
    return name if mod in ("builtins", "") else mod + "." + name


def _wait_for(until: float, timeout: float) -> int:
    """The Prefer: wait of the next request that waits for an in-flight
    duplicate: what is left of the budget, at most half the client's
    timeout (so that the answer comes before the timeout) and the gateway's
    cap of 60 s; 0 once less than a second is left."""
    left = until - time.monotonic()
    cap = min(60.0, timeout / 2) if timeout and timeout > 0 else 60.0
    return int(min(left, cap)) if left >= 1 else 0


def _lease_seconds(view: Dict[str, Any], until: str) -> float:
    """The action's lease, from the gateway's own clock where it can
    (the lease's end less the reservation's time), so that a skewed local
    clock does not shorten the heartbeat's period."""
    end = parse_time(until)
    start = parse_time(view.get("updated_at")) or parse_time(view.get("created_at"))
    if end and start and end > start:
        return end - start
    if end:
        return max(0.3, end - time.time())
    return 1.0


def _approval_required(resp: Response) -> ApprovalRequired:
    b = resp.json() or {}
    code = str(b.get("code") or "approval_required")
    return ApprovalRequired(code, str(b.get("detail") or ""), approval=b.get("approval") or {}, status=202,
                            operation_id=b.get("operation_id") or None, state=b.get("state"),
                            status_url=b.get("status_url"), problem=b)


class Heartbeats:
    """Keeps the leases of a client's owned operations: each is extended
    about every third of its lease while its block runs.

    One scheduler thread per client, started on first use, knows when each
    heartbeat is due; a heartbeat is sent on a thread of its own only when
    it is due, so an action shorter than a third of its lease (the common
    case) costs no thread at all, and a slow heartbeat never delays
    another's. A heartbeat answered lease_lost marks the operation lost
    (its block's exit raises it); one that failed otherwise is tried again
    sooner, while the lease may still hold. Heartbeats and owner steps take
    the operation's owner lock, so none is sent once the block has ended
    its lease, and the block waits for one in flight (``stop``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: List[Tuple[float, int, Operation]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def start(self, op: Operation) -> None:
        self._schedule(op, max(op._lease / 3, 0.05))

    def _schedule(self, op: Operation, delay: float) -> None:
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._seq), op))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="idemgate-heartbeats", daemon=True)
                self._thread.start()
            elif self._due[0][2] is op:
                self._cond.notify()  # the new one is the next due

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._due:
                    self._cond.wait()
                    continue
                due, _, op = self._due[0]
                if op._heart_stopped or op._ended:
                    heapq.heappop(self._due)
                    continue
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._due)
                op._beat = threading.Thread(target=self._beat, args=(op,), name="idemgate-heartbeat", daemon=True)
                op._beat.start()

    def _beat(self, op: Operation) -> None:
        period = max(op._lease / 3, 0.05)
        with op._owner:
            if op._heart_stopped or op._ended:
                return
            try:
                answer = op._step("heartbeat", {}, attempts=1, timeout=max(op._lease, 1.0))
            except LeaseLost:
                return  # the operation is marked lost
            except Error:
                self._schedule(op, max(op._lease / 10, 0.05))  # try again soon, while the lease may hold
                return
            op.lease_until = str((answer.get("lease") or {}).get("until") or op.lease_until)
            self._schedule(op, period)

    @staticmethod
    def stop(op: Operation) -> None:
        """No heartbeat of op is sent after this returns: it waits for one
        in flight, and the scheduler forgets op."""
        op._heart_stopped = True
        beat = op._beat
        if beat is not None and beat is not threading.current_thread():
            beat.join()

    def close(self) -> None:
        """Stops the scheduler (the client is closing)."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
