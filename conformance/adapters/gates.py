"""Gates (protocol feature ``gates``, specs/protocol.md §3.2): stop one call's tryComplete until the harness opens it.

A race schedule needs one call held at a known point while others run. The one piece of a purgatory's code that a
harness controls is the op's tryComplete, so an adapter's op calls `Gates.at` at the two points a gate may name:
``entry`` (as soon as tryComplete is entered) and ``decision`` (after it evaluated its condition, before it acts on
it). The call waits there holding whatever its caller holds (in Kafka, the op's lock), so other calls meet that lock.

A gate belongs to one request: `Gates.armed` arms it for the calling thread while that request executes, counting
that thread's tryComplete calls; the N-th stops. The harness asks `reached` (did the request stop at the gate, or
finish without getting there) and `open`s it.
"""

from __future__ import annotations

import contextlib
import threading

import attrs

#: the points of tryComplete where a gate may stop it
POINTS = ("entry", "decision")


@attrs.frozen
class GateSpec:
    """The gate a request carries: stop its ``tries``-th tryComplete at ``at``, until gate ``id`` is opened."""

    id: str
    tries: int = 1
    at: str = attrs.field(default="decision", validator=attrs.validators.in_(POINTS))

    def to_json(self) -> dict:
        return {"id": self.id, "try": self.tries, **({"at": self.at} if self.at != "decision" else {})}

    @classmethod
    def from_json(cls, document: dict) -> GateSpec:
        return cls(document["id"], document["try"], document.get("at", "decision"))


@attrs.define
class Gate:
    spec: GateSpec
    calls: int = 0
    #: set when the call stopped at the gate, or when its request finished without reaching it
    settled: threading.Event = attrs.Factory(threading.Event)
    did_reach: bool = False
    opened: threading.Event = attrs.Factory(threading.Event)


class Gates:
    """The gates of one run (thread-safe). ``timeout`` bounds every wait, so a harness that goes away cannot leave a
    call stuck for ever."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self.gates: dict[str, Gate] = {}
        self.lock = threading.Lock()
        self.current = threading.local()

    def _gate(self, gate_id: str) -> Gate:
        with self.lock:
            gate = self.gates.get(gate_id)
            if gate is None:  # open or await may arrive before the gated request: the gate is made by the first
                gate = self.gates[gate_id] = Gate(GateSpec(gate_id))
            return gate

    @contextlib.contextmanager
    def armed(self, spec: GateSpec | None):
        """While the current thread executes a request carrying ``spec`` (None: no gate)."""
        if spec is None:
            yield
            return
        gate = self._gate(spec.id)
        gate.spec = spec
        self.current.gate = gate
        try:
            yield
        finally:
            self.current.gate = None
            gate.settled.set()

    def at(self, point: str) -> None:
        """Called by an op's tryComplete at ``point``: stop here if this is the armed gate's call and point."""
        gate = getattr(self.current, "gate", None)
        if gate is None:
            return
        if point == "entry":
            gate.calls += 1
        if gate.calls == gate.spec.tries and point == gate.spec.at:
            gate.did_reach = True
            gate.settled.set()
            gate.opened.wait(self.timeout)

    def reached(self, gate_id: str) -> bool:
        """Wait until the request carrying the gate stopped at it (True) or finished without reaching it (False)."""
        gate = self._gate(gate_id)
        gate.settled.wait(self.timeout)
        return gate.did_reach

    def open(self, gate_id: str) -> None:
        self._gate(gate_id).opened.set()

    def reset(self) -> None:
        """A new run: gates of the previous one are forgotten (any call still waiting is released)."""
        with self.lock:
            gates, self.gates = list(self.gates.values()), {}
        for gate in gates:
            gate.opened.set()
