"""Writes through the gateway, keyed by intents kept in the journal.

This is the Go agent (agent.Client.Do) in Python, rule for rule, so that
an intent begun by ``idemgate call`` is resumed here, or the other way
round, and both make the same decisions: an intent maps to a key made once
(derived from the agent's secret, see keys.py, so that a lost journal
makes the same key again) and written to the journal before the first
request leaves; each error
family gets the workflow article's retry; an answer lost after sending is
reconciled with the gateway (a lookup by key), never re-sent blind; and an
``unknown`` outcome is never retried.
"""

import json as _json
import random
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import journal as jr
from .canonical import PREFIX, canonical, fingerprint
from .errors import Error
from .keys import Keys
from .times import format_utc, parse as parse_time
from .transport import Response, Transport, TransportError

# The outcome kinds (agent.Kind).
CREATED = "created"              # performed now
REPLAYED = "replayed"            # performed before; this is the stored answer
IN_PROGRESS = "in_progress"      # still executing when the budget ran out
NEEDS_APPROVAL = "needs_approval"  # waiting for a human (202)
CONFLICT = "conflict"            # the key was used with another request (422)
REJECTED = "rejected"            # validation or business refusal: fix the request
UNAUTHORIZED = "unauthorized"    # bad token, wrong role or tenant
UNKNOWN = "unknown"              # may have happened: reconcile, do not retry
FAILED = "failed"                # a definite failure, or transient errors past the budget

MODES = ("resume", "repeat", "revise")
CONTROL = "/_idem/v1"
# A request that waits for a human's decision asks the gateway to hold it
# at most this long (the gateway's own cap, by default).
MAX_APPROVAL_WAIT = 60.0


def is_final(kind: str) -> bool:
    """The intent is settled: nothing it sent can still take effect on its
    own, so a repeat or a revise may follow."""
    return kind in jr.FINAL_KINDS


@dataclass
class Policy:
    """Bounds the retries of one call (agent.Policy, same defaults)."""
    max_attempts: int = 5
    max_elapsed: float = 120.0
    base_delay: float = 0.2
    max_delay: float = 10.0
    # Sent as Prefer: wait=N on a retry that meets its own operation in
    # flight, so that it waits for its answer.
    wait: float = 10.0
    # How long a call waits for a human's decision (0: it returns
    # needs_approval at once); such waiting requests are not counted
    # against max_attempts or max_elapsed.
    approval_wait: float = 0.0
    # How long the gateway keeps an operation after its last change: past
    # it, "no such operation" may mean "done and purged".
    gateway_retention: float = 24 * 3600.0

    def backoff(self, n: int) -> float:
        """Exponential with full jitter: uniform in [0, min(max, base*2^(n-1)))."""
        ceiling = min(self.base_delay * (2 ** min(n - 1, 30)), self.max_delay)
        return random.random() * ceiling


@dataclass
class ApprovalInfo:
    """The human decision an operation waits for, as the gateway named it."""
    id: str
    status: str
    summary: str = ""
    expires_at: str = ""  # RFC 3339, "" if the gateway did not say
    url: str = ""

    def lapsed(self, now: float) -> bool:
        """It can no longer be decided or used: the next identical request
        opens a new one (ledger.ApprovalRef.Lapsed)."""
        exp = parse_time(self.expires_at)
        if self.status == "expired":
            return True
        if not exp:
            return False
        return self.status in ("pending", "approved", "used") and now > exp

    def what(self) -> str:
        if self.summary:
            return "%s (approval %s)" % (_json.dumps(self.summary), self.id)
        return "this operation (approval %s)" % self.id

    def by(self) -> str:
        exp = parse_time(self.expires_at)
        return " before " + format_utc(exp) if exp else ""

    def waiting(self) -> str:
        return ("a human must approve " + self.what() + self.by() + "; nothing was sent to the API. Resuming "
                "this intent (the same key) runs it once approved, and never twice")

    def lapsed_note(self) -> str:
        s = "its approval " + self.id
        if self.summary:
            s += " for " + _json.dumps(self.summary)
        s += " lapsed"
        exp = parse_time(self.expires_at)
        if exp:
            s += " at " + format_utc(exp)
        return s + " before it ran; sending it again (the same key) opens a new one for the same operation"


def _approval(v: Any, url: bool = False) -> Optional[ApprovalInfo]:
    if not isinstance(v, dict) or not v.get("id"):
        return None
    return ApprovalInfo(id=str(v["id"]), status=str(v.get("status") or ""), summary=str(v.get("summary") or ""),
                        expires_at=str(v.get("expires_at") or ""), url=str(v.get("url") or "") if url else "")


@dataclass
class Outcome:
    """What became of a request (agent.Outcome): ``kind`` and, in words,
    ``reason``; ``sent`` says whether anything reached the gateway ("no"
    means nothing can have happened); ``unfinished`` that the retry budget
    ran out or the gateway could not be asked, so resuming may change it."""
    kind: str
    intent: str
    version: int
    key: str
    operation_id: str = ""
    status: int = 0
    body: bytes = b""
    headers: Dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    sent: str = jr.SENT_NO
    reason: str = ""
    unfinished: bool = False
    expired: bool = False
    approval: Optional[ApprovalInfo] = None

    def json(self) -> Any:
        """The answer's body as JSON (None if empty or not JSON)."""
        try:
            return _json.loads(self.body.decode("utf-8")) if self.body else None
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def final(self) -> bool:
        return is_final(self.kind)

    @property
    def ok(self) -> bool:
        """The write happened, exactly once (now or before)."""
        return self.kind in (CREATED, REPLAYED)

    @property
    def next_step(self) -> str:
        """What to do now, in words, for the case at hand."""
        return _next_step(self)

    def _fill(self, a: "_Attempt", kind: str, num: int, reached: bool) -> None:
        self.kind, self.reason, self.expired, self.approval = kind, a.reason(), a.expired, a.approval
        if reached and num > 0:
            self.status, self.body, self.headers = a.status, a.body, a.headers
        if num > 0:
            self.attempts = num
        op = a.headers.get("idempotency-operation", "")
        if op:
            self.operation_id = op

    def _adopt(self, e: jr.Entry) -> None:
        """Makes the outcome the journal's word, which can say more than
        this call saw (another process's answer, an earlier attempt that
        may have been applied)."""
        if e.last_kind != self.kind:
            self.body, self.headers, self.approval = b"", {}, None
            if e.last_kind == UNKNOWN:
                self.reason += "; an earlier attempt may have reached the gateway, and its answer was never recorded"
            else:
                self.reason += "; an earlier answer already said %s" % e.last_kind
        self.kind, self.status, self.operation_id, self.sent = e.last_kind, e.last_status, e.operation_id, e.sent


def _next_step(o: Outcome) -> str:
    resume = ("Call request() again later with the same intent, method, path and body (mode resume): it is "
              "never performed twice.")
    if o.kind in (CREATED, REPLAYED):
        return ('Done: the write happened exactly once. Do not send it again; to do it once more on purpose, '
                'use mode="repeat".')
    if o.kind == IN_PROGRESS:
        return ("Still running: call status() with this intent later, or request() again with the same intent "
                "(it will not run twice).")
    if o.kind == NEEDS_APPROVAL:
        if o.approval and o.approval.lapsed(time.time()):
            return ("The approval request expired undecided and nothing was sent. Call request() again with the "
                    "same intent and body: it opens a new approval for the same action.")
        return ("A human must approve it first; nothing is sent until then. Call request() again with the same "
                "intent and body (or pass approval_wait) to run it once approved, never twice. Do not make a new "
                "intent or change the body.")
    if o.kind == CONFLICT:
        return ('The key was first used with a different request. If the parameters changed on purpose, '
                'use mode="revise".')
    if o.kind == REJECTED:
        return ('Refused: the request is invalid or the API declined it. Fix it and use mode="revise"; '
                'unchanged, it fails the same way.')
    if o.kind == UNAUTHORIZED:
        return "Not allowed with this token. Do not retry; fix the credentials or the principal's roles."
    if o.kind == UNKNOWN:
        if o.expired:
            return ("Unknown, and the gateway no longer holds it: do not send it again; check the API by hand, and "
                    "only if still needed do it under a new intent.")
        return ("Unknown: it may have taken effect. Do not retry and do not make a new intent; call status() "
                "later, or have an operator reconcile it.")
    if o.kind == FAILED:
        if not o.unfinished:
            return ('Failed, and resuming will not change that; to try once more on purpose use mode="repeat", '
                    'or "revise" to change the parameters.')
        if o.sent == jr.SENT_NO:
            return "Nothing reached the gateway, so nothing happened. " + resume
        return "Not applied for now. " + resume
    if o.sent == jr.SENT_MAYBE:
        return ("A request of this intent may have left with no answer recorded. Call request() again with the "
                "same intent (mode resume): it asks the gateway first, and never performs it twice.")
    return "Not sent yet: call request() with this intent to perform it."


# What the policy makes of an attempt (agent.step).
DONE, RETRY, RECONCILE, WAIT_STATUS, ASK, WAIT_APPROVAL = range(6)


class _Attempt:
    """What one request (or one lookup) came back with."""

    def __init__(self) -> None:
        self.status = 0
        self.code = ""
        self.headers: Dict[str, str] = {}
        self.body = b""
        self.err = ""             # a transport error, in words
        self.sent = False         # the request may have reached the gateway
        self.note = ""            # what reconciliation found, in words
        self.asked = False        # the gateway answered a lookup by key
        self.found = False        # and it holds an operation under the key
        self.lookup_err = ""      # the lookup failed: the gateway could not say
        self.expired = False      # it no longer holds it, or may have purged it
        self.retry_after = 0.0
        self.approval: Optional[ApprovalInfo] = None
        self.accepted = ""        # a 202's code: approval_required or approval_expired

    def replayed(self) -> bool:
        return not self.err and self.headers.get("idempotent-replayed") == "true"

    def delivery(self) -> str:
        if self.found:
            return jr.SENT_YES
        if self.asked:
            return jr.SENT_NO  # the gateway holds nothing under the key
        if self.err and not self.sent:
            return jr.SENT_NO
        if self.err or self.status == 0:
            return jr.SENT_MAYBE
        return jr.SENT_YES

    def transient(self) -> bool:
        """"Not now", nothing applied: a rate limit, a store or upstream
        unavailable, a concurrency group held, an upstream's 408/409/425/429
        the gateway released. It says nothing of an operation an earlier
        attempt may have started."""
        if self.err:
            return not self.sent
        if self.code in ("store_unavailable", "upstream_unavailable", "rate_limited", "concurrency_locked"):
            return True
        if self.code or self.replayed():
            return False
        return self.status in (429, 408, 409, 425)

    def answer(self) -> str:
        detail = ""
        if self.code:
            try:
                p = _json.loads(self.body.decode("utf-8"))
                detail = str(p.get("detail") or "") if isinstance(p, dict) else ""
            except (ValueError, UnicodeDecodeError):
                pass
        s = "answered %d" % self.status
        if self.replayed():
            s = "the gateway replayed the stored answer, %d" % self.status
        if self.code:
            s += " " + self.code
        if detail:
            s += ": " + detail
        if self.retry_after > 0:
            s += " (retry after %gs)" % self.retry_after
        return s

    def reason(self) -> str:
        first = ""
        if self.err and self.sent:
            first = "the answer was lost (" + self.err + ")"
        elif self.err:
            return "gateway unreachable: " + self.err
        elif self.status == 202 and self.approval and not self.note and not self.lookup_err:
            return _accepted_reason(self.status, self.accepted, self.approval)
        elif self.status > 0 and not self.note and not self.lookup_err:
            return self.answer()
        elif self.status > 0:
            first = self.answer()
        if self.lookup_err:
            return _join(first, "the gateway could not be asked what became of it (" + self.lookup_err + ")")
        return _join(first, self.note)


def _accepted_reason(status: int, code: str, a: ApprovalInfo) -> str:
    s = "answered %d" % status
    if code:
        s += " " + code
    if code == "approval_expired":
        s += (": the earlier approval request expired undecided, and a new one was opened for the same "
              "operation;")
    else:
        s += ":"
    return s + " " + a.waiting()


def _join(a: str, b: str) -> str:
    if not a or not b:
        return a + b
    return a + "; " + b


def decide(a: _Attempt) -> Tuple[int, str]:
    """The workflow article's table of error families (agent.decide)."""
    if a.err and not a.sent:
        return RETRY, FAILED  # connection refused: nothing reached the gateway
    if a.err:
        return RECONCILE, UNKNOWN  # timeout or reset after sending: never blind
    if a.transient():
        return RETRY, FAILED  # "not now", nothing applied: the same key makes the retry safe
    if a.code == "in_progress":
        return WAIT_STATUS, IN_PROGRESS
    if a.code == "outcome_unknown":
        return DONE, UNKNOWN
    if a.code == "fingerprint_mismatch":
        return DONE, CONFLICT
    if a.code == "approval_denied":
        return DONE, FAILED
    if a.status in (401, 403):
        return DONE, UNAUTHORIZED
    if a.status == 202 and a.approval is not None:
        return DONE, NEEDS_APPROVAL  # the gateway's own 202; an upstream's 202 is its answer
    if 200 <= a.status < 300:
        return DONE, (REPLAYED if a.replayed() else CREATED)
    if 400 <= a.status < 500:
        return DONE, REJECTED
    if a.replayed():
        return DONE, FAILED  # a stored 5xx the route declares final
    return RECONCILE, UNKNOWN  # any other 5xx: ask before sending again


def judge(v: Dict[str, Any], a: _Attempt, now: float) -> Tuple[int, str]:
    """What the gateway's view of an operation it holds means (agent.judge):
    sent again when not applied, or when final (the resend is answered from
    its record, which is how the stored answer is fetched)."""
    ap = a.approval = _approval(v.get("approval"))
    state = v.get("state")
    if state == "prepared" and ap is None:
        a.note = "the gateway holds it not applied (released)"
        return RETRY, FAILED
    if state == "prepared" and ap is not None and ap.lapsed(now):
        a.note = ap.lapsed_note()
        return RETRY, NEEDS_APPROVAL
    if state == "prepared" and ap is not None and ap.status == "pending":
        a.note = "it waits for a human's approval at the gateway: " + ap.waiting()
        return DONE, NEEDS_APPROVAL
    if state == "prepared":
        a.note = ("the gateway holds it not applied, and its approval is %s: sending it again (the same key) "
                  "runs it" % (ap.status if ap else ""))
        return RETRY, FAILED
    if state == "succeeded":
        a.note = "the gateway says it succeeded"
        return RETRY, REPLAYED
    if state == "failed":
        a.note = "the gateway says it failed"
        return RETRY, FAILED
    if state == "executing":
        a.note = "it is still executing at the gateway"
        return WAIT_STATUS, IN_PROGRESS
    a.note = "the gateway holds it %s: it may have been applied" % state
    return DONE, UNKNOWN


def expired(known: Outcome, a: _Attempt) -> Tuple[int, str]:
    """An operation the gateway no longer holds (its retention passed):
    nothing is sent, since the gateway would perform it anew."""
    a.expired = True
    if known.kind in (CREATED, REPLAYED):
        a.note = ("done; the gateway no longer holds operation %s (its retention has passed), so its answer "
                  "cannot be replayed; use repeat for a new, identical action" % known.operation_id)
        return DONE, known.kind
    if is_final(known.kind):
        a.note = ("the gateway no longer holds operation %s (its retention has passed) and this journal last saw "
                  "it %s: it is not sent again; a new action needs repeat or revise" % (known.operation_id, known.kind))
        return DONE, known.kind
    a.note = ("the gateway no longer holds operation %s (its retention has passed) and this journal last saw it "
              "%s: it is not sent again. Check the upstream by hand; if the action is still needed, name a new "
              "intent" % (known.operation_id, known.kind))
    return DONE, UNKNOWN


_NO_BODY = object()


class AgentMixin:
    """Client.request and Client.status: the Go agent's Do and Status."""

    _transport: Transport
    token: str
    policy: Policy
    run: Optional[str]

    def _journal(self) -> jr.Journal:  # provided by Client
        raise NotImplementedError

    def _keys(self) -> Keys:  # provided by Client
        raise NotImplementedError

    def request(self, method: str, path: str, json: Any = _NO_BODY, *, intent: str, mode: str = "resume",
                approval_wait: Optional[float] = None) -> Outcome:
        """Performs one write through the gateway under ``intent``, the
        caller's name for one logical action: its key is found in the
        journal or made and written there before anything is sent, then the
        request is sent with the policy's retries, every attempt recorded.

        ``mode``: "resume" (the default) is the same intent again, same key;
        "repeat" a deliberate new, identical action ("<intent>#<n>", new
        key); "revise" changed parameters (a new version, new key). A
        resume whose method, path or body differs from the intent's raises
        Error("payload_changed") before anything is sent; a repeat or revise
        while the intent may still take effect raises Error("not_settled").
        Everything the gateway says is the returned Outcome, never an
        exception.
        """
        body = None if json is _NO_BODY or json is None else canonical(json)
        e = self._entry(intent, method, path, body, mode)
        policy = self.policy if approval_wait is None else _with(self.policy, approval_wait=approval_wait)
        return _Run(self, e, body, policy).go()

    def status(self, intent: str) -> Outcome:
        """What the journal and the gateway know of the intent's latest
        version, in an Outcome's terms (agent.Status.Outcome): nothing is
        sent but a lookup; body is the gateway's view of the operation."""
        e = self._journal().latest(intent)
        if e is None:
            raise Error("no_intent", "intent %r: no such intent in the journal" % intent)
        return _status(self, e)

    def pending(self) -> List[jr.Entry]:
        """The journal's intents still open, oldest first."""
        return self._journal().pending()

    # -- the journal entry an action runs under (agent.Client.entry)

    def _entry(self, intent: str, method: str, path: str, body: Optional[bytes], mode: str) -> jr.Entry:
        if not intent:
            raise Error("invalid_action", "an intent names the action")
        if mode not in MODES:
            raise Error("invalid_action", "mode %r (want resume, repeat or revise)" % mode)
        if not method or not path.startswith("/"):
            raise Error("invalid_action", "want a method and a path starting with /")
        method = method.upper()
        command = None if body is None else _json.loads(body)
        fp = fingerprint(method, path, "agent", command)
        j = self._journal()
        latest = j.latest(intent)
        if latest is None and mode != "revise":
            return self._created(j, intent, 1, method, path, fp, self._keys())
        if latest is None:
            raise Error("no_intent", "intent %r: no such intent in the journal" % intent)
        if mode == "resume":
            if latest.fingerprint != fp and latest.fingerprint != _legacy_fingerprint(method, path, command):
                raise Error("payload_changed", "intent %r: the request differs from the one this intent was created "
                            "with; use revise for changed parameters" % intent)
            return latest
        if latest.attempts > 0 and not is_final(latest.last_kind):
            raise Error("not_settled", "intent %r is %s: reconcile it before a new action (status(), or an "
                        "operator's resolution)" % (latest.intent, latest.last_kind))
        if mode == "repeat":
            if latest.fingerprint != fp:
                raise Error("payload_changed", "intent %r: repeat means an identical action, use revise" % intent)
            try:
                return j.create_repeat(intent, method, path, fp, self._keys().key)
            except jr.NotSettled as ns:
                raise Error("not_settled", "%s: reconcile it before a new action" % ns) from None
        if latest.fingerprint == fp:
            raise Error("invalid_action", "revise of intent %r changes nothing; resume it, or repeat it" % intent)
        return self._created(j, intent, latest.version + 1, method, path, fp, self._keys())

    @staticmethod
    def _created(j: jr.Journal, intent: str, version: int, method: str, path: str, fp: str, keys: Keys) -> jr.Entry:
        e = j.create(intent, version, method, path, fp, keys.key)
        if e.fingerprint != fp or e.method != method or e.path != path:
            raise Error("payload_changed", "intent %r was just created by another caller with another request" % intent)
        return e

    # -- the wire

    def _headers(self) -> Dict[str, str]:
        return {"Authorization": "Bearer " + self.token, "Idempotency-Run": self.run or self._journal().run}

    def _send(self, e: jr.Entry, body: Optional[bytes], wait: float) -> _Attempt:
        a = _Attempt()
        h = self._headers()
        h["Idempotency-Key"] = e.key
        if wait >= 1:
            h["Prefer"] = "wait=%d" % int(wait)
        if body:
            h["Content-Type"] = "application/json"
        try:
            resp = self._transport.request(e.method, e.path, body, h)
        except TransportError as t:
            a.err, a.sent = t.cause, t.sent
            return a
        a.sent = True
        a.status, a.headers, a.body = resp.status, resp.headers, resp.body
        a.retry_after = resp.retry_after()
        a.code = resp.code()
        if a.status == 202:
            v = resp.json()
            if isinstance(v, dict):
                a.approval, a.accepted = _approval(v.get("approval"), url=True), str(v.get("code") or "")
        return a

    def _lookup(self, key: str) -> Tuple[Optional[Dict[str, Any]], str]:
        """The gateway's view of the operation under key (None: it holds
        none, a not_found problem), or the reason it could not say. Any
        answer but not_found is an error, never taken for "not applied"."""
        h = self._headers()
        h["Accept"] = "application/json"
        try:
            path = CONTROL + "/operations?key=" + urllib.parse.quote(key, safe="")
            resp = self._transport.request("GET", path, None, h)
        except TransportError as t:
            return None, t.cause
        p = resp.problem()
        if p is not None and p.get("code") == "not_found" and resp.status == 404:
            return None, ""
        if resp.status // 100 != 2:
            return None, _lookup_refusal(resp, p)
        v = resp.json()
        if not isinstance(v, dict) or not v.get("state"):
            return None, "its lookup answered %d with no operation" % resp.status
        return v, ""

    def _reconcile(self, key: str, known: Outcome, stale: bool, a: _Attempt) -> Tuple[int, str]:
        """Asks the gateway about the operation under key, after an answer
        lost once sent, or before resuming an intent sent before
        (agent.Client.reconcile). It sends again only when the gateway says
        the operation was not applied (none, or prepared) or is final."""
        v, err = self._lookup(key)
        a.note, a.asked, a.lookup_err = "", not err, err
        if err:
            if is_final(known.kind) and not a.sent:
                return DONE, known.kind  # a resume of a settled intent: the journal's word stands
            return ASK, UNKNOWN  # ask again later; never resend unasked
        a.found = v is not None
        if v is not None:
            a.headers = {"idempotency-operation": str(v.get("id") or "")}
            s, k = judge(v, a, time.time())
            self._journal().settle(key, jr.SENT_YES)
            return s, k
        if known.operation_id:
            return expired(known, a)
        if stale:
            a.expired = True
            a.note = ("sent more than the gateway's retention ago with no answer recorded, and the gateway holds "
                      "nothing now: it may have been performed and purged, so it is not sent again. Check the "
                      "upstream by hand; if the action is still needed, name a new intent")
            return DONE, UNKNOWN
        a.note = "the gateway holds nothing under this key: it was not applied"
        self._journal().settle(key, jr.SENT_NO)
        return RETRY, FAILED

    def _clamp_wait(self, w: float) -> float:
        """Keeps Prefer: wait under half the client's timeout, so that a
        wait ends in an answer, not a timeout."""
        t = self._transport.timeout
        return min(w, t / 2) if t and t > 0 else w


def _lookup_refusal(resp: Response, p: Optional[Dict[str, Any]]) -> str:
    s = "its lookup answered %d" % resp.status
    if p and p.get("code"):
        s += " " + str(p["code"])
        if p.get("detail"):
            s += ": " + str(p["detail"])
    return s


def _with(p: Policy, **changes: Any) -> Policy:
    q = Policy(**p.__dict__)
    for k, v in changes.items():
        setattr(q, k, v)
    return q


def _legacy_fingerprint(method: str, path: str, command: Any) -> str:
    """The fingerprint journals written before it covered params and query
    hold (sha256 of the canonical {"method","route","tenant","command"}),
    so that such an intent resumes instead of looking changed."""
    import hashlib
    doc = {"method": method, "route": path, "tenant": "agent", "command": command}
    return PREFIX + hashlib.sha256(canonical(doc)).hexdigest()


class _Run:
    """One request() call: what it sends, what the gateway last said of
    the operation, and what the policy does next (agent.runState)."""

    def __init__(self, c: AgentMixin, e: jr.Entry, body: Optional[bytes], p: Policy) -> None:
        self.c, self.e, self.body, self.p = c, e, body, _with(p)
        self.p.wait = c._clamp_wait(p.wait)
        self.s = RETRY
        self.stale = False
        self.informed = e.last_kind   # the last thing the gateway said of the operation
        self.why = ""                 # and its reason, in words
        self.kind = ""
        self.num = 0
        self.approval: Optional[ApprovalInfo] = None
        self.out = Outcome(kind=e.last_kind, intent=e.intent, version=e.version, key=e.key,
                           operation_id=e.operation_id, attempts=e.attempts, status=e.last_status, sent=e.sent)
        self.approval_by = 0.0
        self.next_wait = 0.0
        self.wait_sent = False
        self.polls = 0
        self.waited = 0.0
        if e.attempts > 0:  # a resume first asks the gateway what became of it
            self.s = ASK
            last = c._journal().last_sent_attempt(e.key)
            self.stale = bool(last) and time.time() - last >= self.p.gateway_retention

    def go(self) -> Outcome:
        start = time.monotonic()
        n = 1
        while True:
            began = time.monotonic()
            a = self.try_once()
            self.settle(a)
            if self.s == DONE:
                return self.out
            if self.s == WAIT_APPROVAL:  # its own budget: a human's time is not the retry policy's
                pause = self.approval_pause(began, a)
                if pause is None:
                    self.out.reason += "; no decision within the approval wait (%gs)" % self.p.approval_wait
                    return self.out
                self.waited += time.monotonic() - began + pause
                if pause > 0:
                    time.sleep(pause)
                continue
            delay = max(self.p.backoff(n), a.retry_after)
            if n >= self.p.max_attempts or time.monotonic() + delay - start - self.waited > self.p.max_elapsed:
                self.out.reason += "; gave up after %d %s (the retry budget)" % (n, "try" if n == 1 else "tries")
                return self.out
            time.sleep(delay)
            n += 1

    def try_once(self) -> _Attempt:
        a = _Attempt()
        self.kind, self.num = self.informed, 0
        if self.s == ASK:
            self.s, self.kind = self.c._reconcile(self.e.key, self.out, self.stale, a)
        self.wait_sent = False
        if self.s in (RETRY, WAIT_STATUS, WAIT_APPROVAL):
            # Prefer: wait only to wait: the gateway holds any request that
            # meets a pending approval for its decision.
            wait = 0.0
            if self.s == WAIT_STATUS:
                wait = self.p.wait
            elif self.s == WAIT_APPROVAL:
                wait, self.wait_sent = self.next_wait, True
            self.num = self.c._journal().begin_attempt(self.e.key)  # written before it is sent
            a = self.c._send(self.e, self.body, wait)
            self.stale = False
            self.s, self.kind = decide(a)
            if self.s == RECONCILE:
                self.s, self.kind = self.c._reconcile(self.e.key, self.out, False, a)
        if self.s == DONE and self.kind == NEEDS_APPROVAL and self.p.approval_wait > 0:
            self.s = WAIT_APPROVAL
        return a

    def settle(self, a: _Attempt) -> None:
        """Records what the try came to, and makes the outcome the
        journal's word."""
        reached = (self.num > 0 and not a.transient()) or (self.num == 0 and a.asked)
        self.out._fill(a, self.kind, self.num, reached)
        if a.code == "approval_denied" and self.approval is not None:
            self.out.reason = _join(self.out.reason, "the approval it waited for was " + self.approval.what())
        if reached:
            self.informed, self.why, self.approval = self.kind, self.out.reason, self.out.approval
        elif self.informed:
            self.out.kind, self.out.approval = self.informed, self.approval
            before = "the journal last recorded " + self.informed
            if self.why:
                before = "before that, " + self.why
            self.out.reason = _join(self.out.reason, before)
        e = self.c._journal().record(self.e.key, self.num, self.out.kind, self.out.status, self.out.operation_id,
                                     reached, a.delivery())
        self.out._adopt(e)
        self.out.unfinished = self.s != DONE or bool(a.lookup_err)

    def approval_pause(self, began: float, a: _Attempt) -> Optional[float]:
        """The pause before the next request that waits for the human's
        decision (None once approval_wait is spent); no pause after a
        request the gateway held, a growing one after one it answered at
        once, so that the client never spins."""
        now = time.monotonic()
        if not self.approval_by:
            self.approval_by = now + self.p.approval_wait
        pause = 0.0
        if self.wait_sent and now - began < 1:
            self.polls += 1
            pause = max(self.p.backoff(self.polls), a.retry_after)
        else:
            self.polls = 0
        w = float(int(self.c._clamp_wait(min(self.approval_by - (now + pause), MAX_APPROVAL_WAIT))))
        if w < 1:
            return None
        self.next_wait = w
        return pause


def _status(c: AgentMixin, e: jr.Entry) -> Outcome:
    """agent.Client.statusOf, then Status.Kind and Status.Outcome."""
    at = time.time()
    view, err = c._lookup(e.key)
    gone, unasked, problem = False, bool(err), ""
    if err:
        problem = "the gateway could not be asked: " + err
    elif view is None and e.operation_id:
        gone, problem = True, "the gateway no longer holds operation %s: its retention has passed" % e.operation_id
    elif view is None:
        last = c._journal().last_sent_attempt(e.key)
        if last and at - last >= c.policy.gateway_retention:
            gone, problem = True, ("the gateway holds nothing under this intent's key, and its last send is older "
                                   "than the gateway's retention: it may have been performed and purged")
        else:
            problem = "the gateway has no operation under this intent's key: it was never reserved"
    state = (view or {}).get("state", "")
    ap = _approval((view or {}).get("approval"))
    awaits = state == "prepared" and ap is not None and ap.status == "pending" and not ap.lapsed(at)
    o = Outcome(kind=_status_kind(e, state, ap, awaits, gone, unasked, view is not None, at), intent=e.intent,
                version=e.version, key=e.key, operation_id=e.operation_id, status=e.last_status,
                body=_json.dumps(view).encode() if view is not None else b"", attempts=e.attempts, sent=e.sent,
                reason=problem, expired=gone)
    if state:
        o.reason, o.approval = "the gateway holds it " + state, ap
        if awaits and ap is not None:
            o.reason += ", waiting for a human's approval: " + ap.waiting()
        elif state == "prepared" and ap is not None and ap.lapsed(at):
            o.reason += "; " + ap.lapsed_note()
        elif state == "prepared" and ap is not None:
            o.reason += ", and its approval is %s: resuming this intent (the same key) runs it" % ap.status
    if unasked and e.last_kind:
        o.reason += "; the journal last recorded " + e.last_kind
    o.unfinished = unasked or (not gone and (view is None or state == "prepared" and not awaits))
    return o


def _status_kind(e: jr.Entry, state: str, ap: Optional[ApprovalInfo], awaits: bool, gone: bool, unasked: bool,
                 found: bool, at: float) -> str:
    last = e.last_kind
    if state == "executing":
        return IN_PROGRESS
    if state == "unknown":
        return UNKNOWN
    if state == "prepared":
        return NEEDS_APPROVAL if awaits or (ap is not None and ap.lapsed(at)) else FAILED
    if state == "succeeded":
        return last if last in (CREATED, REPLAYED) else REPLAYED
    if state == "failed":
        return last if last == REJECTED else FAILED
    if gone and not is_final(last):
        return UNKNOWN
    if not found and not gone and not unasked and last and not is_final(last):
        return FAILED  # never reserved, as a crash left it: not applied, and a resume sends it
    return last
