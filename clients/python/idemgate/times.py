"""Times as the Go side writes them: the journal's fixed-width UTC text,
and the gateway's RFC 3339 (with up to nanoseconds, which
datetime.fromisoformat reads only from Python 3.11)."""

import calendar
import re
import time
from typing import Optional

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


def journal_now(ns: Optional[int] = None) -> str:
    """The journal's time format, "2006-01-02T15:04:05.000000000Z" (UTC,
    nanoseconds, fixed width so that times compare as text)."""
    ns = time.time_ns() if ns is None else ns
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%09dZ" % frac


def parse(text: Optional[str]) -> float:
    """An RFC 3339 time (the journal's or the gateway's) as a Unix
    timestamp; 0.0 when absent or unreadable, which callers read as "the
    gateway did not say"."""
    m = _RFC3339.match(text or "")
    if not m:
        return 0.0
    y, mo, d, h, mi, s, frac, zone = m.groups()
    t = float(calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0)))
    if frac:
        t += int(frac[:9].ljust(9, "0")) / 1e9
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        t -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return t


def format_utc(ts: float) -> str:
    """A Unix timestamp as RFC 3339 in UTC, to the second (as the Go side
    prints an approval's expiry in words)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
