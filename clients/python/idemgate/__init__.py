"""idemgate: make writes safe to retry, from Python.

Standard library only. See docs/design.md, "The Python client".
"""

from .canonical import canonical, fingerprint
from .errors import (ApprovalDenied, ApprovalRequired, Error, FingerprintMismatch, InProgress, InvalidJSON,
                     LeaseLost, NotPerformed, OutcomeUnknown, Unavailable)

__version__ = "0.1.0"
