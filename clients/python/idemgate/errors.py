"""The one error family of the client.

Every refusal the gateway answers is an RFC 9457 problem with a ``code``
(docs/design.md, "The HTTP contract"); the client raises it as
:class:`Error` with the same ``code``, so a caller branches on one field
whatever the call. Refusals the client makes itself, before anything is
sent (a changed payload under a used intent, a value that is not JSON),
are the same family with codes of their own.
"""

from typing import Any, Dict, Optional


class Error(Exception):
    """A refusal, by the gateway or by the client before sending.

    ``code`` is the problem code (``outcome_unknown``, ``fingerprint_mismatch``,
    ``payload_changed``, ...), ``status`` the HTTP status (``None`` when the
    gateway was never asked), ``operation_id`` the operation it names, if
    any, ``detail`` the gateway's words, ``problem`` the whole problem body.
    """

    def __init__(self, code: str, detail: str = "", status: Optional[int] = None,
                 operation_id: Optional[str] = None, state: Optional[str] = None,
                 status_url: Optional[str] = None, retry_after: Optional[float] = None,
                 problem: Optional[Dict[str, Any]] = None) -> None:
        self.code = code
        self.detail = detail
        self.status = status
        self.operation_id = operation_id
        self.state = state
        self.status_url = status_url
        self.retry_after = retry_after
        self.problem = problem or {}
        super().__init__(self._message())

    def _message(self) -> str:
        text = self.code
        if self.status:
            text += " (%d)" % self.status
        if self.detail:
            text += ": " + self.detail
        if self.operation_id:
            text += " [operation %s]" % self.operation_id
        return text


class OutcomeUnknown(Error):
    """The effect may have happened and nobody knows: never retried blind.

    Reconcile it (the operation's status resource, an operator's
    resolution); a new key for the same effect could perform it twice.
    """


class InProgress(Error):
    """Another owner still holds the operation after the client's wait."""


class FingerprintMismatch(Error):
    """The key was used before with another command (422): nothing ran."""


class LeaseLost(Error):
    """The lease no longer holds: another owner has it, or it lapsed.

    The step that got it changed nothing. A lease that lapsed makes the
    operation ``unknown`` at the gateway, which an operator reconciles.
    """


class ApprovalRequired(Error):
    """The operation waits for a human decision (202); nothing ran.

    ``approval_id``, ``approval_url``, ``summary`` and ``expires_at`` say
    what the human is asked and where; ``fingerprint`` is the request
    waiting, which a decision echoes (``Client.approve``). The same call
    with the same key runs it once approved, and never twice.
    """

    def __init__(self, code: str, detail: str = "", approval: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        approval = approval or {}
        self.approval = approval
        self.approval_id = approval.get("id", "")
        self.approval_url = approval.get("url", "")
        self.approval_status = approval.get("status", "")
        self.summary = approval.get("summary", "")
        self.expires_at = approval.get("expires_at", "")
        self.fingerprint = approval.get("fingerprint", "")
        super().__init__(code, detail, **kwargs)

    def _message(self) -> str:
        text = super()._message()
        if self.summary:
            text += " (approve %r: approval %s)" % (self.summary, self.approval_id)
        elif self.approval_id:
            text += " (approval %s)" % self.approval_id
        return text


class ApprovalDenied(Error):
    """A human denied the operation (403): it is ``failed`` for good."""


class Unavailable(Error):
    """Not now, and nothing applied: the gateway unreachable before sending,
    its store unavailable, a rate limit, a concurrency group held, past the
    client's retry budget. The same call with the same key is safe later."""


class InvalidJSON(Error, ValueError):
    """A command or a result that is not JSON as idemgate fingerprints it
    (a set, NaN, an integer a double would round, a lone surrogate...);
    refused before anything is sent."""


class NotPerformed(Exception):
    """Raise inside an ``action`` block when the effect was definitely not
    performed: the operation is released (back to ``prepared``), and the
    next call with the same key runs it again.

    ``reason`` is recorded at the gateway (and in its audit log): keep it
    free of secrets. The exception is re-raised after the release, so that
    code after the block never mistakes "not done" for "done".
    """

    def __init__(self, reason: str = "not performed") -> None:
        self.reason = reason
        super().__init__(reason)


# The classes of the gateway's problem codes; any other code is an Error.
_BY_CODE = {
    "outcome_unknown": OutcomeUnknown,
    "in_progress": InProgress,
    "fingerprint_mismatch": FingerprintMismatch,
    "lease_lost": LeaseLost,
    "approval_denied": ApprovalDenied,
    "store_unavailable": Unavailable,
    "rate_limited": Unavailable,
    "concurrency_locked": Unavailable,
    "upstream_unavailable": Unavailable,
    "gateway_unreachable": Unavailable,
}


def error_for(code: str, detail: str = "", **kwargs: Any) -> Error:
    """The error of the family for a problem code."""
    return _BY_CODE.get(code, Error)(code, detail, **kwargs)
