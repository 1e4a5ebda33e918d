"""The adapter side of the protocol for a Python system under test: serve it on stdin/stdout.

    python -m kpurgatory.conformance.adapters.stdio [--concurrent] kpurgatory.conformance.adapters.reference:factory

turns any in-process `SystemUnderTest` into a subprocess adapter, so the subprocess path can be checked end to end
against a known-good system, and a Python implementation can be driven exactly as one in another language would be.
With ``--concurrent`` (for a thread-safe system) it declares the protocol's ``concurrent`` feature and executes the
commands of a run on a pool of threads, answering each when it is done, so that `kpurgatory check --threads` reaches
the system from several threads through the protocol. `handle` is the per-request part, for adapters that want their
own loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.traces.codec import (command_from_json, declarations_to_json, observation_to_json,
                                                 validate)
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA


#: requests sent alone: the run they start or end must not overlap any other command
ALONE = ("hello", "init", "shutdown")
#: the concurrent server's worker threads (more than the harness's --threads, so none waits for a worker)
WORKERS = 64


def handle(system: SystemUnderTest, request: dict, features: tuple[str, ...] = ()) -> dict:
    """One request -> its response; anything the system raises becomes the protocol's ``failure``."""
    seq = request.get("seq", 0)
    try:
        validate("request", request)
        cmd, args = request["cmd"], request["args"]
        if cmd == "hello":
            hello = system.hello()
            result = {"protocol_version": hello.protocol_version, "implementation": hello.implementation,
                      "profiles": list(hello.profiles), "features": [*hello.features, *features]}
            if hello.declarations != KAFKA:
                result["declarations"] = declarations_to_json(hello.declarations)
            return {"seq": seq, "events": [], "result": result}
        if cmd == "init":
            system.init(args["profile"], v.Params(**args["params"]))
            return {"seq": seq, "result": None, "events": []}
        return {"seq": seq, **observation_to_json(system.step(command_from_json(cmd, args)))}
    except Exception as error:  # the protocol's answer to "cannot execute": report it, keep serving
        return {"seq": seq, "failure": f"{type(error).__name__}: {error}"}


def serve(system: SystemUnderTest, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
          concurrent: bool = False) -> None:
    """Answer requests until end of input, then close the system. ``concurrent``: run commands on a thread pool and
    answer in the order they finish; hello, init and shutdown wait until every command before them is answered."""
    writing = threading.Lock()
    features = ("concurrent",) if concurrent else ()

    def answer(request: dict) -> None:
        response = json.dumps(handle(system, request, features)) + "\n"
        with writing:
            stdout.write(response)
            stdout.flush()

    try:
        with ThreadPoolExecutor(WORKERS if concurrent else 1) as pool:
            in_flight = []
            for line in stdin:
                request = json.loads(line)
                if not concurrent or not isinstance(request, dict) or request.get("cmd") in ALONE:
                    for future in in_flight:
                        future.result()
                    in_flight = []
                    answer(request)
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
