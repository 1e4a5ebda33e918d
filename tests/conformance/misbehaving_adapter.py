"""A subprocess adapter over the reference model that misbehaves, in the way MODE names, on the request whose seq is
AT (0 is hello, 1 is init, 2 the first command):

    python misbehaving_adapter.py MODE AT

crash: exit 3 after a line on stderr; hang: never answer; garbage: a line that is not JSON; wrong-seq: echo another
seq; bad-event: an event the protocol does not know; failure: the protocol's failure response; ignore-eof: behave,
but keep running after end of input.
"""

import json
import sys
import time

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.adapters.stdio import handle

mode, at = sys.argv[1], int(sys.argv[2])
system = ModelSystem()
for line in sys.stdin:
    request = json.loads(line)
    response = handle(system, request)
    if request["seq"] == at:
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
            response["events"] = [{"event": "explode", "op": "o0"}]
        if mode == "failure":
            response = {"seq": request["seq"], "failure": "the implementation cannot do that"}
    print(response if isinstance(response, str) else json.dumps(response), flush=True)
if mode == "ignore-eof":
    time.sleep(3600)
