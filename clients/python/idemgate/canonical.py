"""RFC 8785 canonical JSON and request fingerprints, as the Go side makes them.

A fingerprint binds a key to one exact command, so the client and the
gateway (and ``idemgate call``, which shares the journal) must build the
same bytes from the same value: members sorted by UTF-16 code units,
numbers as ECMAScript prints them, minimal string escaping, no spaces.
Values a double would silently change (an integer beyond 2**53 that does
not survive the round trip, NaN) are refused, as the Go parser refuses
them, rather than fingerprinted as another amount.
"""

import decimal
import hashlib
import json
import math
from typing import Any, Dict, List, Optional

from .errors import InvalidJSON

# The Go side's nesting bound (fingerprint.DefaultMaxDepth).
MAX_DEPTH = 64
# Up to 2**53 every integer is a double that prints in full.
_MAX_EXACT = 1 << 53
PREFIX = "sha256:"

_encode_string = json.encoder.encode_basestring  # type: ignore[attr-defined]


def canonical(value: Any, code: str = "invalid_command") -> bytes:
    """The canonical JSON of value (dicts with str keys, lists, tuples,
    str, int, float, bool, None); anything else raises InvalidJSON with
    ``code`` and the JSON Pointer of the offending value."""
    out: List[str] = []
    _write(value, out, [], code)
    return "".join(out).encode("utf-8")


def fingerprint(method: str, route: str, tenant: str, command: Any,
                params: Optional[Dict[str, str]] = None,
                query: Optional[Dict[str, List[str]]] = None) -> str:
    """fingerprint.Of: sha256 of the canonical
    {"method","route","params","query","tenant","command"}."""
    doc = {"method": method.upper(), "route": route, "params": dict(params or {}),
           "query": {k: list(v) for k, v in (query or {}).items() if v}, "tenant": tenant,
           "command": command}
    return PREFIX + hashlib.sha256(canonical(doc)).hexdigest()


def number(f: float) -> str:
    """f as ECMAScript's Number.prototype.toString prints it (RFC 8785)."""
    if f == 0:
        return "0"  # -0 as well
    sign = "-" if f < 0 else ""
    mantissa, _, exp = repr(abs(f)).partition("e")  # repr: the shortest round trip
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    raw = whole + frac
    digits = raw.lstrip("0")
    point = len(whole) + int(exp or 0) - (len(raw) - len(digits))  # value = 0.digits * 10**point
    digits = digits.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return sign + head + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def _pointer(path: List[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path) or "/"


def _fail(path: List[str], detail: str, code: str) -> InvalidJSON:
    return InvalidJSON(code, "%s (path %s)" % (detail, _pointer(path)))


def _write(v: Any, out: List[str], path: List[str], code: str) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_string(v, path, code))
    elif isinstance(v, int):
        out.append(_integer(v, path, code))
    elif isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise _fail(path, "number out of range: %r" % v, code)
        out.append(number(v))
    elif isinstance(v, dict):
        _nested(path, code)
        _object(v, out, path, code)
    elif isinstance(v, (list, tuple)):
        _nested(path, code)
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(item, out, path + [str(i)], code)
        out.append("]")
    else:
        raise _fail(path, "not JSON: a %s" % type(v).__name__, code)


def _nested(path: List[str], code: str) -> None:
    if len(path) >= MAX_DEPTH:
        raise _fail(path, "nesting too deep: limit %d" % MAX_DEPTH, code)


def _object(m: Dict[Any, Any], out: List[str], path: List[str], code: str) -> None:
    folded: Dict[str, str] = {}
    for k in m:
        if not isinstance(k, str):
            raise _fail(path, "member name %r is a %s, not a string" % (k, type(k).__name__), code)
        # Two names a case-insensitive decoder takes for one are refused,
        # as the gateway's (and the Go client's) canonicaliser does: full
        # case folding ("ß" is "ss", "Environment" is "environment"), so
        # that both clients' journals agree on what they accept.
        other = folded.setdefault(k.casefold(), k)
        if other != k:
            raise _fail(path, "%s and %s are one name to a case-insensitive decoder"
                        % (json.dumps(k, ensure_ascii=False), json.dumps(other, ensure_ascii=False)), code)
    keys = sorted(m, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    out.append("{")
    for i, k in enumerate(keys):
        if i:
            out.append(",")
        out.append(_string(k, path, code))
        out.append(":")
        _write(m[k], out, path + [k], code)
    out.append("}")


def _string(s: str, path: List[str], code: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(path, "invalid UTF-8: a lone surrogate in a string", code) from None
    return _encode_string(s)


def _integer(n: int, path: List[str], code: str) -> str:
    """n as its nearest double prints, if that text denotes n exactly;
    otherwise two different amounts would share one fingerprint (2**60
    prints as 1152921504606847000), and n is refused. 10**21 prints as
    1e+21, which is exact, and passes."""
    if -_MAX_EXACT <= n <= _MAX_EXACT:
        return str(n)
    try:
        canon = number(float(n))
    except OverflowError:
        raise _fail(path, "number out of range: %d" % n, code) from None
    if decimal.Decimal(canon) != n:
        raise _fail(path, "number cannot be represented exactly: %d would become %s" % (n, canon), code)
    return canon
