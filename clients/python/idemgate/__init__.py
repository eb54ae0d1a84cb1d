"""idemgate: make writes safe to retry, from Python.

Standard library only. See clients/python/README.md and docs/design.md,
"The Python client".
"""

from .action import Operation
from .agent import ApprovalInfo, Outcome, Policy
from .canonical import canonical, fingerprint
from .client import Client
from .errors import (ApprovalDenied, ApprovalRequired, Error, FingerprintMismatch, InProgress, InvalidJSON,
                     LeaseLost, NotPerformed, OutcomeUnknown, Unavailable)
from .journal import Journal, JournalError

__version__ = "0.1.0"

__all__ = [
    "ApprovalDenied", "ApprovalInfo", "ApprovalRequired", "Client", "Error", "FingerprintMismatch", "InProgress",
    "InvalidJSON", "Journal", "JournalError", "LeaseLost", "NotPerformed", "Operation", "Outcome", "OutcomeUnknown",
    "Policy", "Unavailable", "canonical", "fingerprint",
]
