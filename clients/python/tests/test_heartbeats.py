"""The heartbeat scheduler on its own: no gateway, a stand-in operation."""

import threading
import unittest
from typing import Any, Dict, List
from unittest import mock

from idemgate import action


class _Op:
    """What Heartbeats reads and writes of an operation."""

    def __init__(self, lease: float) -> None:
        self._lease = lease
        self._heart_stopped = False
        self._ended = False
        self._beat: Any = None
        self._beat_lock = threading.Lock()
        self._owner = threading.Lock()
        self.lease_until = ""
        self.beats = threading.Semaphore(0)

    def _step(self, step: str, body: Dict[str, Any], attempts: int, timeout: float) -> Dict[str, Any]:
        self.beats.release()
        return {}


class HeartbeatsTest(unittest.TestCase):
    def test_a_heartbeat_thread_is_started_before_stop_can_see_it(self) -> None:
        # stop() joins op._beat; a thread published there before its start()
        # makes a concurrent stop() raise "cannot join thread before it is
        # started" (a fresh clone's CI failed on it, in the storm test).
        op = _Op(lease=0.03)
        published_unstarted: List[str] = []
        real = threading.Thread

        class Recording(real):  # type: ignore[misc,valid-type]
            def start(self) -> None:
                if op._beat is self:
                    published_unstarted.append(self.name)
                super().start()

        beats = action.Heartbeats()
        with mock.patch.object(action.threading, "Thread", Recording):
            beats.start(op)  # type: ignore[arg-type]
            for _ in range(2):  # two heartbeats: one published, the next started
                self.assertTrue(op.beats.acquire(timeout=30), "no heartbeat was sent")
            action.Heartbeats.stop(op)  # type: ignore[arg-type]
        beats.close()
        self.assertEqual(published_unstarted, [])


if __name__ == "__main__":
    unittest.main()
