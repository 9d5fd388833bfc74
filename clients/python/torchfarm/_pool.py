"""Which supervisor gets the next request, which one is presumed dead, when to probe it again.

The policy half of the multi-endpoint clients (docs/scale-out.md), shared by :class:`Client` and
:class:`AsyncClient` and a twin of the C++ ``torchfarm::EndpointPool``. Pure bookkeeping over
endpoint indexes and times passed in (seconds, any monotonic origin): no sockets, no clock, so it
is tested on simulated time.

States: live -> ejected when an endpoint owing a reply (requests outstanding, or a probe
unanswered) sends nothing for ``eject_after`` seconds; ejected -> probed after ``probe_backoff``
seconds, then at doubling intervals up to ``max_probe_backoff``; any message from the endpoint
(a result, an error, a probe answer) -> live again. A busy endpoint quiet for ``heartbeat``
seconds is probed, so a slow model never gets a supervisor that still answers probes ejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, List, Optional, Tuple

NONE_LIVE = -1    # pick(): every endpoint is ejected; wait for a probe to bring one back
ALL_REFUSED = -2  # pick(): every live endpoint already refused this request

# A probe is a request for the empty model name: the supervisor answers it at once from its main
# loop (INVALID_ARGUMENT or NOT_FOUND) without touching a model (protocol.md, "Liveness probe").
PROBE_MODEL = ""


@dataclass
class _Endpoint:
    live: bool = True
    outstanding: int = 0
    owing_since: Optional[float] = None
    last_probe: float = float("-inf")
    next_probe: float = 0.0
    backoff: float = 0.0
    cooldown_until: float = float("-inf")


class EndpointPool:
    def __init__(self, count: int, *, eject_after: float, heartbeat: Optional[float] = None,
                 probe_backoff: float = 0.25, max_probe_backoff: float = 4.0,
                 refusal_cooldown: float = 1.0) -> None:
        self.eject_after = eject_after
        self.heartbeat = heartbeat if heartbeat is not None else eject_after / 4
        self.probe_backoff = probe_backoff
        self.max_probe_backoff = max_probe_backoff
        self.refusal_cooldown = refusal_cooldown
        self._endpoints = [_Endpoint() for _ in range(count)]
        self._cursor = 0

    def pick(self, exclude: Collection[int], now: float) -> int:
        """A live endpoint not in `exclude` with the fewest outstanding requests (round-robin
        among equals; endpoints cooling down after a refusal last), or NONE_LIVE / ALL_REFUSED."""
        n = len(self._endpoints)
        best, best_key, any_live = -1, None, False
        for k in range(n):
            i = (self._cursor + k) % n
            e = self._endpoints[i]
            if not e.live:
                continue
            any_live = True
            if i in exclude:
                continue
            key = (now < e.cooldown_until, e.outstanding)
            if best < 0 or key < best_key:
                best, best_key = i, key
        if best < 0:
            return ALL_REFUSED if any_live else NONE_LIVE
        self._cursor = (best + 1) % n
        return best

    def on_sent(self, i: int, now: float) -> None:
        e = self._endpoints[i]
        e.outstanding += 1
        if e.owing_since is None:
            e.owing_since = now

    def on_done(self, i: int) -> None:
        e = self._endpoints[i]
        e.outstanding = max(0, e.outstanding - 1)
        if e.outstanding == 0 and e.live:
            e.owing_since = None

    def on_message(self, i: int, now: float) -> bool:
        """Any message from endpoint `i`: it is alive. True when that readmits it."""
        e = self._endpoints[i]
        readmitted = not e.live
        e.live = True
        e.backoff = 0.0
        e.owing_since = now if e.outstanding > 0 else None
        return readmitted

    def on_refused(self, i: int, now: float) -> None:
        self._endpoints[i].cooldown_until = now + self.refusal_cooldown

    def eject(self, i: int, now: float) -> bool:
        e = self._endpoints[i]
        if not e.live:
            return False
        e.live = False
        e.outstanding = 0  # the caller moves them elsewhere
        e.owing_since = None
        e.backoff = self.probe_backoff
        e.next_probe = now + e.backoff
        return True

    def tick(self, now: float) -> Tuple[List[int], List[int]]:
        """(newly ejected endpoints, endpoints to probe now)."""
        ejected, probe = [], []
        for i, e in enumerate(self._endpoints):
            if not e.live:
                if now >= e.next_probe:
                    probe.append(i)
                continue
            if e.owing_since is None:
                continue
            silent = now - e.owing_since
            if silent >= self.eject_after:
                self.eject(i, now)
                ejected.append(i)
            elif silent >= self.heartbeat and now - e.last_probe >= self.heartbeat:
                probe.append(i)
        return ejected, probe

    def on_probe_sent(self, i: int, now: float) -> None:
        e = self._endpoints[i]
        if not e.live:
            e.next_probe = now + e.backoff
            e.backoff = min(e.backoff * 2, self.max_probe_backoff)
            return
        e.last_probe = now
        if e.owing_since is None:
            e.owing_since = now

    def next_deadline(self) -> Optional[float]:
        times = []
        for e in self._endpoints:
            if not e.live:
                times.append(e.next_probe)
            elif e.owing_since is not None:
                times.append(e.owing_since + self.eject_after)
                times.append(max(e.owing_since + self.heartbeat, e.last_probe + self.heartbeat))
        return min(times) if times else None

    def live(self, i: int) -> bool:
        return self._endpoints[i].live

    def outstanding(self, i: int) -> int:
        return self._endpoints[i].outstanding

    def live_count(self) -> int:
        return sum(e.live for e in self._endpoints)
