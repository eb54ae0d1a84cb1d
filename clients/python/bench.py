"""Per-action overhead of client.action against the same two calls made bare.

Not a test: a measurement. One action is a reserve (POST
/_idem/v1/actions/{name}) and a completion (POST .../complete). The bare
side makes exactly those two requests with http.client on one keep-alive
connection per thread (TCP_NODELAY set, as the client sets it), encoding
and decoding the same JSON; the client side
is ``with client.action(...) as op: op.succeed(...)``, which adds what the
client is for: checking the key and name, the canonical command, the
heartbeat thread started and stopped, the answers read into an Operation.
Both run against the same gateway in the same process, in alternating
rounds so that drift (the store's file growing, the machine's load) falls
on both alike, sequentially and then with a few threads. Each prints the
median per action and the ratio client / bare (the target: at most 1.2).

    python3 clients/python/bench.py                   # builds and starts its own gateway
    python3 clients/python/bench.py -n 2000 -t 4
    python3 clients/python/bench.py --url http://127.0.0.1:8080 --token T --action bench.noop
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse
from typing import Callable, List, Optional, Tuple

import idemgate

HERE = os.path.dirname(os.path.abspath(__file__))


def bare_action(conn: http.client.HTTPConnection, prefix: str, token: str, action: str, key: str) -> None:
    """The two calls, by hand: what any caller of the actions API must do."""
    h = {"Authorization": "Bearer " + token, "Idempotency-Key": key, "Content-Type": "application/json"}
    conn.request("POST", prefix + "/_idem/v1/actions/" + action, body=json.dumps({"n": key}).encode(), headers=h)
    resp = conn.getresponse()
    grant = json.loads(resp.read())
    if resp.status != 201:
        raise RuntimeError("reserve: %d %s" % (resp.status, grant))
    lease = grant["lease"]
    body = {"token": lease["token"], "fence": lease["fence"], "state": "succeeded", "result": {"ok": True}}
    conn.request("POST", "%s/_idem/v1/operations/%s/complete" % (prefix, grant["operation"]["id"]),
                 body=json.dumps(body).encode(), headers={"Authorization": "Bearer " + token,
                                                          "Content-Type": "application/json"})
    resp = conn.getresponse()
    done = json.loads(resp.read())
    if resp.status != 200:
        raise RuntimeError("complete: %d %s" % (resp.status, done))


def client_action(client: idemgate.Client, action: str, key: str) -> None:
    with client.action(action, key=key, command={"n": key}) as op:
        op.succeed({"ok": True})


class Bench:
    def __init__(self, url: str, token: str, action: str) -> None:
        self.url, self.token, self.action = url, token, action
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.prefix = u.hostname, u.port or 80, u.path.rstrip("/")
        self.client = idemgate.Client(url, token=token)
        self.nonce = "%x" % time.time_ns()
        self.next = 0  # every action's key is new
        self._local = threading.local()

    def conn(self) -> http.client.HTTPConnection:
        """This thread's keep-alive connection, with TCP_NODELAY as the
        client's, so that both sides pay the same transport."""
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def one(self, mode: str, i: int) -> float:
        key = "bench:%s:%s:%d" % (self.nonce, mode, i)
        t = time.perf_counter()
        if mode == "bare":
            bare_action(self.conn(), self.prefix, self.token, self.action, key)
        else:
            client_action(self.client, self.action, key)
        return time.perf_counter() - t

    def batch(self, mode: str, start: int, n: int, threads: int) -> List[float]:
        """n actions of mode, on threads threads; each one's duration."""
        times: List[float] = []
        errors: List[BaseException] = []
        lock = threading.Lock()

        def work(first: int, count: int) -> None:
            try:
                mine = [self.one(mode, first + j) for j in range(count)]
            except BaseException as e:  # raised below, in the caller's thread
                with lock:
                    errors.append(e)
                return
            with lock:
                times.extend(mine)
        share = n // threads
        ts = [threading.Thread(target=work, args=(start + k * share, share)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        return times

    def run(self, n: int, threads: int, rounds: int) -> Tuple[float, float, float, float]:
        """Alternating rounds of both modes: medians per action, and
        actions a second, of each."""
        per_round = max(threads, n // rounds // threads * threads)
        samples = {"bare": [], "client": []}  # type: dict
        wall = {"bare": 0.0, "client": 0.0}
        for r in range(rounds):
            for mode in (("bare", "client") if r % 2 == 0 else ("client", "bare")):
                t = time.perf_counter()
                samples[mode] += self.batch(mode, self.next, per_round, threads)
                wall[mode] += time.perf_counter() - t
                self.next += per_round
        count = per_round * rounds
        return (statistics.median(samples["bare"]), statistics.median(samples["client"]),
                count / wall["bare"], count / wall["client"])


def own_gateway() -> Tuple[Callable[[], None], str, str, str]:
    """A gateway of the tests' harness (built from this repository), with
    one action whose lease is long enough that no heartbeat is due."""
    sys.path.insert(0, HERE)
    from tests import harness
    gw = harness.Gateway(actions="actions:\n  - {name: bench.noop, lease: 30s}\n")
    return gw.close, gw.url, "agent-token", "bench.noop"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="actions per mode and per phase (default 1000)")
    ap.add_argument("-t", "--threads", type=int, default=4, help="threads of the concurrent phase (default 4)")
    ap.add_argument("--rounds", type=int, default=10, help="alternating rounds per phase (default 10)")
    ap.add_argument("--url", help="an idemgate gateway already running (default: start one)")
    ap.add_argument("--token", default="agent-token")
    ap.add_argument("--action", default="bench.noop", help="an action of that gateway, with a lease over a second")
    args = ap.parse_args(argv)
    close: Callable[[], None] = lambda: None
    if args.url:
        url, token, action = args.url, args.token, args.action
    else:
        close, url, token, action = own_gateway()
    try:
        b = Bench(url, token, action)
        b.run(40, 1, 2)  # warm up: connections, the store's pages, the interpreter's caches
        print("per action: reserve + complete; median of each action's own time; same gateway, alternating rounds")
        print("%-22s %12s %12s %8s %14s %14s" % ("phase", "bare", "client", "ratio", "bare/s", "client/s"))
        for label, threads in (("sequential", 1), ("%d threads" % args.threads, args.threads)):
            bare, client, bare_rate, client_rate = b.run(args.n, threads, args.rounds)
            print("%-22s %10.3fms %10.3fms %7.2fx %14.0f %14.0f" % (label, bare * 1e3, client * 1e3, client / bare,
                                                                 bare_rate, client_rate))
        b.client.close()
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
