"""The adapter side of the protocol for a Python system under test: serve it on stdin/stdout.

    python -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.reference:factory

turns any in-process `SystemUnderTest` into a subprocess adapter, so the subprocess path can be checked end to end
against a known-good system, and a Python implementation can be driven exactly as one in another language would be.
`handle` is the per-request part, for adapters that want their own loop.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from kpurgatory.conformance.sut import SystemUnderTest
from kpurgatory.conformance.trace import command_from_json, observation_to_json, validate
from kpurgatory.model import vocabulary as v


def handle(system: SystemUnderTest, request: dict) -> dict:
    """One request -> its response; anything the system raises becomes the protocol's ``failure``."""
    seq = request.get("seq", 0)
    try:
        validate("request", request)
        cmd, args = request["cmd"], request["args"]
        if cmd == "hello":
            hello = system.hello()
            return {"seq": seq, "events": [], "result": {
                "protocol_version": hello.protocol_version, "implementation": hello.implementation,
                "profiles": list(hello.profiles), "features": list(hello.features)}}
        if cmd == "init":
            system.init(args["profile"], v.Params(**args["params"]))
            return {"seq": seq, "result": None, "events": []}
        return {"seq": seq, **observation_to_json(system.step(command_from_json(cmd, args)))}
    except Exception as error:  # the protocol's answer to "cannot execute": report it, keep serving
        return {"seq": seq, "failure": f"{type(error).__name__}: {error}"}


def serve(system: SystemUnderTest, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
    """Answer requests until end of input, then close the system."""
    try:
        for line in stdin:
            stdout.write(json.dumps(handle(system, json.loads(line))) + "\n")
            stdout.flush()
    finally:
        system.close()


def main(argv: list[str] | None = None) -> None:
    from kpurgatory.conformance.adapters import load_factory

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m kpurgatory.conformance.adapters.stdio MODULE:FACTORY")
    serve(load_factory(argv[0])())


if __name__ == "__main__":
    main()
