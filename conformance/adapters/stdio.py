"""The adapter side of the protocol for a Python system under test: serve it on stdin/stdout.

    python -m kpurgatory.conformance.adapters.stdio [--concurrent] kpurgatory.conformance.adapters.reference:factory

turns any in-process `SystemUnderTest` into a subprocess adapter, so the subprocess path can be checked end to end
against a known-good system, and a Python implementation can be driven exactly as one in another language would be.
With ``--concurrent`` (for a thread-safe system) it declares the protocol's ``concurrent`` and ``barrier`` features
and executes the commands of a run on a pool of threads, answering each when it is done with its execution interval
(``exec_ns``), so that `kpurgatory check --threads` reaches the system from several threads through the protocol:
the requests of one start barrier are held until all have arrived and then released together, and step aside at
random points while they run (`kpurgatory.conformance.adapters.interleave`), so that they interleave. A system with
``gates`` (`kpurgatory.conformance.adapters.gates`, as the built-in adapter has) also gets the ``gates`` feature, so
the race schedules can drive it. `handle` is the per-request part, for adapters that want their own loop.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import TextIO

import orjson

from kpurgatory.conformance.adapters.gates import Gates, GateSpec
from kpurgatory.conformance.adapters.interleave import preempted
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.traces.codec import (command_from_json, declarations_to_json, observation_to_json,
                                                 validate)
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA


#: requests sent alone: the run they start or end must not overlap any other command
ALONE = ("hello", "init", "shutdown", "batch")
#: requests that steer gates: answered while others are in flight, never held by a barrier
CONTROL = ("await_gate", "open_gate")
#: the concurrent server's worker threads (more than the harness's --threads, so none waits for a worker)
WORKERS = 64


def handle(system: SystemUnderTest, request: dict, features: tuple[str, ...] = ()) -> dict:
    """One request -> its response; anything the system raises becomes the protocol's ``failure``."""
    seq = request.get("seq", 0)
    try:
        validate("request", request)
        return {"seq": seq, **respond(system, request, features)}
    except Exception as error:  # the protocol's answer to "cannot execute": report it, keep serving
        return {"seq": seq, "failure": f"{type(error).__name__}: {error}"}


def respond(system: SystemUnderTest, request: dict, features: tuple[str, ...] = ()) -> dict:
    """The response to a valid request, without its seq; raises what the system raises."""
    cmd, args = request["cmd"], request["args"]
    if cmd == "hello":
        hello = system.hello()
        result = {"protocol_version": hello.protocol_version, "implementation": hello.implementation,
                  "profiles": list(hello.profiles), "features": [*hello.features, "batch", *features]}
        if hello.declarations != KAFKA:
            result["declarations"] = declarations_to_json(hello.declarations)
        if hello.unsupported:
            result["unsupported_commands"] = sorted(hello.unsupported)
        return {"events": [], "result": result}
    if cmd == "init":
        system.init(args["profile"], v.Params(**args["params"]))
        return {"result": None, "events": []}
    if cmd == "batch":
        return {"result": batch(system, args["requests"]), "events": []}
    gates = system_gates(system) if "gates" in features else None
    if cmd in CONTROL and gates is not None:
        return {"events": [], "result": gates.reached(args["gate"]) if cmd == "await_gate" else
                gates.open(args["gate"])}
    command = command_from_json(cmd, args)
    with gates.armed(GateSpec.from_json(request["gate"])) if "gate" in request and gates else nullcontext():
        with preempted() if "barrier" in request else nullcontext():
            started = time.monotonic_ns()
            observation = system.step(command)
            ended = time.monotonic_ns()
    response = observation_to_json(observation)
    if "concurrent" in features:
        response["exec_ns"] = [started, ended]
    return response


def batch(system: SystemUnderTest, requests: list[dict]) -> list[dict]:
    """The answers to a batch's requests (specs/protocol.md §3.3), validated with it: each as it would be answered
    alone, and after one that failed, ``skipped`` up to the next init."""
    answers, skipping = [], False
    for request in requests:
        skipping = skipping and request["cmd"] != "init"
        if skipping:
            answers.append({"skipped": True})
            continue
        try:
            answers.append(respond(system, request))
        except Exception as error:
            answers.append({"failure": f"{type(error).__name__}: {error}"})
            skipping = True
    return answers


def system_gates(system: SystemUnderTest) -> Gates | None:
    gates = getattr(system, "gates", None)
    return gates if isinstance(gates, Gates) else None


def serve(system: SystemUnderTest, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
          concurrent: bool = False) -> None:
    """Answer requests until end of input, then close the system. ``concurrent``: run commands on a thread pool and
    answer in the order they finish; hello, init and shutdown wait until every command before them is answered, and
    the requests of a start barrier wait until the last of them arrived, then start together."""
    writing = threading.Lock()
    features = (("concurrent", "barrier") + (("gates",) if system_gates(system) else ())) if concurrent else ()
    #: barrier id -> the requests of it that arrived so far
    gathering: dict[str, list[dict]] = defaultdict(list)

    def answer(request: dict, start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        response = orjson.dumps(handle(system, request, features)).decode() + "\n"
        with writing:
            stdout.write(response)
            stdout.flush()

    try:
        with ThreadPoolExecutor(WORKERS if concurrent else 1) as pool:
            in_flight = []
            for line in stdin:
                request = orjson.loads(line)
                if not concurrent or not isinstance(request, dict) or request.get("cmd") in ALONE:
                    for future in in_flight:
                        future.result()
                    in_flight = []
                    answer(request)
                elif isinstance(barrier := request.get("barrier"), dict) and request.get("cmd") not in CONTROL:
                    group = gathering[barrier.get("id")]
                    group.append(request)
                    if len(group) >= barrier.get("parties", 1):
                        del gathering[barrier.get("id")]
                        start = threading.Barrier(len(group))
                        in_flight.extend(pool.submit(answer, member, start) for member in group)
                else:
                    in_flight.append(pool.submit(answer, request))
    finally:
        system.close()


def main(argv: list[str] | None = None) -> None:
    from kpurgatory.conformance.adapters import load_factory

    parser = argparse.ArgumentParser(prog="python -m kpurgatory.conformance.adapters.stdio",
                                     description="Serve an in-process system over the JSON Lines protocol.")
    parser.add_argument("--concurrent", action="store_true",
                        help="execute the commands of a run on threads, answering each when done")
    parser.add_argument("factory", metavar="MODULE:FACTORY")
    options = parser.parse_args(argv)
    serve(load_factory(options.factory)(), concurrent=options.concurrent)


if __name__ == "__main__":
    main()
