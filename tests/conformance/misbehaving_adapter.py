"""A subprocess adapter over the reference model that misbehaves, in the way MODE names, on the request at position AT
of every run (0 is hello, 1 is init, 2 the run's first command), alone or in a batch:

    python misbehaving_adapter.py MODE AT [MARKER]

crash: exit 3 after a line on stderr; hang: never answer; garbage: a line that is not JSON; wrong-seq: echo another
seq; bad-event: an event the protocol does not know; failure: the protocol's failure response; hung: the
answer of a call the adapter stopped because it would not end; ignore-eof: behave,
but keep running after end of input; deep: a reply of 100,000 nested arrays; stderr-flood: one endless stderr line
(no newline) and no answer; fork-crash: fork a child that sleeps holding stdout, then exit 4; fork: fork such a
child and go on behaving; fork-hang: fork such a child and hang. MARKER (ignored) lets a test find the adapter's processes in /proc.
"""

import json
import os
import sys
import time

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.adapters.stdio import handle

mode, at = sys.argv[1], int(sys.argv[2])
system = ModelSystem()
position = -1


def counted(cmd: str) -> bool:
    """Whether the request with ``cmd`` (alone or in a batch) is the one at position AT of its run."""
    global position
    position = {"hello": 0, "init": 1}.get(cmd, position + 1)
    return position == at


for line in sys.stdin:
    request = json.loads(line)
    response = handle(system, request)
    answers = response.get("result") if request["cmd"] == "batch" else None
    if answers is None:
        misbehaves, answer = counted(request["cmd"]), response
    else:  # the run's requests in one batch: the one at AT misbehaves in its answer, or the whole response breaks
        hits = [index for index, part in enumerate(request["args"]["requests"]) if counted(part["cmd"])]
        misbehaves, answer = bool(hits), answers[hits[0]] if hits else None
    if misbehaves:
        if mode == "crash":
            print("simulated crash: the implementation fell over", file=sys.stderr, flush=True)
            sys.exit(3)
        if mode == "hang":
            time.sleep(3600)
        if mode == "garbage":
            response = "this is not json"
        if mode == "wrong-seq":
            response["seq"] += 1
        if mode == "bad-event":
            answer["events"] = [{"event": "explode", "op": "o0"}]
        if mode in ("failure", "hung"):
            answer.clear()
            answer[mode] = "the implementation cannot do that" if mode == "failure" else "it would never end"
            if answers is None:
                answer["seq"] = request["seq"]
        if mode == "deep":
            response = "[" * 100_000 + "]" * 100_000
        if mode == "stderr-flood":
            while True:
                sys.stderr.write("x" * 65536)
        if mode.startswith("fork") and os.fork() == 0:
            time.sleep(3600)
        if mode == "fork-crash":
            os._exit(4)
        if mode == "fork-hang":
            time.sleep(3600)
    print(response if isinstance(response, str) else json.dumps(response), flush=True)
if mode == "ignore-eof":
    time.sleep(3600)
