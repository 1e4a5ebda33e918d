"""The subprocess adapter: drive an implementation in any language through the JSON Lines protocol of
specs/protocol.md (``--adapter "COMMAND ..."``).

The harness must outlive whatever the adapter does, so every way the channel can break ends in one `AdapterError`
subclass whose message says which way, where, and (but for a ``failure``, which says it in its own words) what the
adapter last said on stderr: the process exited
(`AdapterCrashed`, with its exit code, even when a process it started still holds its stdout), did not answer in
time (`AdapterTimedOut`, then it is killed), wrote a line that is not JSON within the codec's limits
(`AdapterGarbage`: `codec.decode_line`, the reader every trace goes through), wrote JSON that breaks the protocol
(`ProtocolViolation`: schema, seq echo, lifecycle), or said it could not execute a request (`AdapterFailed`, the
protocol's ``failure`` response). After any of them but the last the system is dead (``broken``): the process group is
killed and every later call raises the same error. A ``failure`` ends the run, not the adapter: the next ``init``
starts a fresh one, as the protocol says, so a system that throws on some input is not restarted for every run.

The harness owns the adapter's whole process tree: the adapter runs under a keeper (`keeper`, in a new session),
which on Linux is a child subreaper, so that everything the adapter starts stays below it — daemons that call
setsid() and double-fork included — and is killed with the adapter on every way out: the adapter's exit, `close`
after a normal end, any break, and the harness's own exit (an ``atexit`` hook; ``kpurgatory`` turns SIGTERM and
SIGINT into an orderly exit that runs it; a harness killed outright closes the keeper's control socket all the
same). Without a subreaper (macOS) the keeper kills the adapter's process group: a descendant that starts a session
of its own leaves it and is beyond reach.

Stdout is read line by line by a thread that hands each response to the request whose seq it echoes, so a
per-request timeout is a bounded ``queue.get`` and several threads may wait at once: an adapter whose hello lists the
``concurrent`` feature is called from many threads (`kpurgatory check --threads`). A line that answers no outstanding
request goes to the oldest one, whose decoding then says what is wrong with it. stderr is drained by another thread
into a tail of at most `STDERR_TAIL_BYTES` (read in chunks, never by line: one endless line must not grow memory),
so a chatty adapter can never block on a full pipe.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Callable, ClassVar

import orjson

from kpurgatory.conformance.adapters.gates import GateSpec
from kpurgatory.conformance.adapters.sut import Hello, Played, play_each
from kpurgatory.conformance.traces.codec import (MAX_LINE_BYTES, command_to_json, declarations_from_json, decode_line,
                                                 observation_from_json, params_to_json, validate)
from kpurgatory.model import vocabulary as v

PROTOCOL_VERSION = 1
STDERR_TAIL_LINES = 20
STDERR_TAIL_BYTES = 8192
#: how long a process that closed stdout, or was asked to stop, gets to exit before it is killed
EXIT_GRACE_S = 2.0
#: how often a waiting request looks whether the adapter is still alive
POLL_S = 0.05
#: how long the keeper gets to start the adapter, and to kill its tree once asked; it is killed after that
KEEPER_GRACE_S = 30.0
#: the least time the first request (hello) gets: its answer waits for the adapter's start-up too (an interpreter or
#: a JVM, on a loaded machine), which --timeout, a bound on one request, is not meant to cover
STARTUP_S = 30.0
KEEPER = Path(__file__).with_name("keeper.py")

#: every adapter process still running, killed with its group if the harness exits without closing it
LIVE: weakref.WeakSet[SubprocessSystem] = weakref.WeakSet()


class AdapterError(Exception):
    """The adapter could not be driven; ``kind`` names how, and the message starts with it."""

    kind: ClassVar[str] = "adapter error"

    def __init__(self, detail: str, stderr_tail: str = ""):
        self.detail, self.stderr_tail = detail, stderr_tail
        message = f"{self.kind}: {detail}"
        if stderr_tail:
            message += "\n--- adapter stderr (tail) ---\n" + stderr_tail
        super().__init__(message)


class AdapterCrashed(AdapterError):
    kind = "adapter crashed"


class SystemCrashed(AdapterCrashed):
    """An in-process system's own process ended before it answered (a segfault, ``os._exit``)."""

    kind = "system crashed"


class AdapterTimedOut(AdapterError):
    kind = "adapter timed out"


class SystemTimedOut(AdapterTimedOut):
    """An in-process system did not answer within its time limit: a hang, as an adapter's, with no adapter."""

    kind = "system timed out"


class AdapterGarbage(AdapterError):
    kind = "adapter wrote garbage"


class ProtocolViolation(AdapterError):
    kind = "protocol violation"


class AdapterFailed(AdapterError):
    kind = "adapter reported a failure"


class AdapterStopped(AdapterTimedOut):
    """The adapter stopped a call that would not end and said so (a ``hung`` answer): a hang, found at once, that
    leaves the adapter usable for the next run."""

    kind = "adapter stopped a call that would not end"


#: a scheduler line: a key no response has (inside a JSON string a quote is escaped, so this is a key)
SCHEDULER_LINE = re.compile(rb'"sched"\s*:')


def echoed_seq(line: bytes) -> object:
    """The seq a response line echoes, if it is a JSON object with one (the line is validated later, in full)."""
    try:
        document = decode_line(line.removesuffix(b"\n").removesuffix(b"\r"))
    except ValueError:
        return None
    seq = document.get("seq") if isinstance(document, dict) else None
    return seq if type(seq) is int else None


def shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


class SubprocessSystem:
    """`SystemUnderTest` over a child process speaking the protocol on stdin/stdout (``command`` is split with
    shlex and run without a shell)."""

    def __init__(self, command: str, timeout: float = 10.0):
        self.command, self.timeout = command, timeout
        self.features: tuple[str, ...] = ()
        self.next_seq = 0
        self.broken: AdapterError | None = None
        #: seq -> where its response line goes (None: the adapter closed its stdout); writing takes ``sending``,
        #: the reader only ``routing``, so a full stdin pipe can never stop responses from being read
        self.waiting: dict[int, queue.Queue[bytes | None]] = {}
        #: the seqs of scheduled requests in flight: their scheduler lines go to ``waiting`` too, before the answer
        self.scheduled: set[int] = set()
        self.sending, self.routing = threading.Lock(), threading.Lock()
        self.stderr_tail = b""
        self.control, keeper_end = socket.socketpair()  # closing it, or the harness exiting, stops the keeper
        try:
            self.process = subprocess.Popen([sys.executable, "-I", "-S", str(KEEPER), str(keeper_end.fileno()),
                                             *shlex.split(command)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            start_new_session=True, pass_fds=[keeper_end.fileno()])
        except (OSError, ValueError) as error:
            self.control.close()
            raise AdapterCrashed(f"cannot start {command!r}: {error}") from None
        finally:
            keeper_end.close()
        LIVE.add(self)
        self.control.settimeout(KEEPER_GRACE_S)
        try:
            started = self.control.recv(4096).decode(errors="replace").strip()  # empty once the adapter runs
        except TimeoutError:
            started = f"its keeper did not start it within {KEEPER_GRACE_S:g} s"
        if started:
            self._kill()
            raise AdapterCrashed(f"cannot start {command!r}: {started}")
        self.readers = [threading.Thread(target=self._read_stdout, daemon=True),
                        threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self.readers:
            reader.start()

    # --- SystemUnderTest --------------------------------------------------------------------------------------

    def hello(self) -> Hello:
        result = self._lifecycle("hello", {"protocol_version": PROTOCOL_VERSION})
        try:
            validate("hello_result", result)
        except ValueError as error:
            raise self._break(ProtocolViolation(f"hello result: {error}")) from None
        self.features = tuple(result.get("features", ()))
        return Hello(result["implementation"], result["profiles"], result.get("features", ()),
                     result["protocol_version"], declarations_from_json(result.get("declarations", {})),
                     result.get("unsupported_commands", ()))

    def init(self, profile: str, params: v.Params) -> None:
        result = self._lifecycle("init", {"profile": profile, "params": params_to_json(params)})
        if result is not None:
            raise self._break(ProtocolViolation(f"init result must be null, got {shorten(repr(result))}"))

    def step(self, command: v.Command) -> v.Observation:
        return observation_from_json(self.request(command.name, command_to_json(command)["args"]))

    def play(self, profile: str, params: v.Params, commands: list[v.Command]) -> Played:
        """The run as one ``batch`` request where the adapter takes batches (specs/protocol.md §3.3), else one request
        at a time. A batch the adapter could not answer at all leaves it broken, as any request would."""
        if "batch" not in self.features:
            return play_each(self, profile, params, commands)
        requests = [{"cmd": "init", "args": {"profile": profile, "params": params_to_json(params)}},
                    *map(command_to_json, commands)]
        try:
            answers = self.request("batch", {"requests": requests})["result"]
        except AdapterError as error:
            return Played(init_error=error, batched=True, unanswered=True)
        what = "response to request 'batch'"
        if not isinstance(answers, list) or len(answers) != len(requests):
            return Played(init_error=self._break(ProtocolViolation(
                f"{what}: expected {len(requests)} answers, got {shorten(json.dumps(answers))}")), batched=True)
        observed = []
        for index, (request, answer) in enumerate(zip(requests, answers)):
            where = f"{what}, answer {index} ({request['cmd']})"
            try:
                validate("batch_answer", answer)
                failed = (AdapterFailed(f"{where}: {answer['failure']}") if "failure" in answer else
                          AdapterStopped(f"{where}: {answer['hung']}") if "hung" in answer else None)
                if "skipped" in answer:
                    raise ValueError("skipped, though nothing before it failed")
                if index == 0 and failed is None and (answer["result"] is not None or answer["events"]):
                    raise ValueError("init must answer null with no events")
            except ValueError as error:
                failed = self._break(ProtocolViolation(f"{where}: {error}"))
            if index == 0 and failed is not None:
                return Played(init_error=failed, batched=True)
            if failed is not None:
                return Played(tuple(observed), failed, batched=True)
            if index:
                observed.append(observation_from_json(answer))
        return Played(tuple(observed), batched=True)

    # --- concurrent runs (features concurrent, barrier, gates) ------------------------------------------------

    def call(self, command: v.Command, barrier: tuple[str, int] | None = None,
             gate: GateSpec | None = None) -> tuple[v.Observation, tuple[int, int] | None]:
        """`step` as one party of start barrier ``(id, parties)`` and/or carrying ``gate``; also returns the
        adapter's ``exec_ns`` (None if it reports none)."""
        routing = {}
        if barrier is not None:
            routing["barrier"] = {"id": barrier[0], "parties": barrier[1]}
        if gate is not None:
            routing["gate"] = gate.to_json()
        response = self.request(command.name, command_to_json(command)["args"], routing)
        exec_ns = response.get("exec_ns")
        return observation_from_json(response), None if exec_ns is None else tuple(exec_ns)

    @property
    def controllable(self) -> bool:
        """The adapter runs requests under the harness's scheduler (feature ``scheduler``; after `hello`)."""
        return "scheduler" in self.features

    def call_scheduled(self, command: v.Command, stand_in: Callable[[dict], bool | None]
                       ) -> tuple[v.Observation, tuple[int, int] | None]:
        """`call` of a request the adapter runs under the harness's scheduler (specs/protocol.md §3.4): each
        scheduler line the adapter writes for it before its answer goes to ``stand_in``; when that returns a bool,
        the request's thread is told to go on (True: it is deadlocked, and must fail)."""
        if self.broken is not None:
            raise self.broken
        lines: queue.Queue[bytes | None] = queue.Queue()
        what = f"request {command.name!r}"
        with self.sending:
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            with self.routing:
                self.waiting[seq] = lines
                self.scheduled.add(seq)
            request = {"seq": seq, "cmd": command.name, "args": command_to_json(command)["args"], "scheduled": True}
            sent = self._send(request)
        if not sent:
            raise self._crashed(what)
        while True:
            line = self._await(lines, what, self.timeout)
            if line is None:
                raise self._crashed(what)
            if not SCHEDULER_LINE.search(line):
                response = self._decode(line, seq, what)
                exec_ns = response.get("exec_ns")
                return observation_from_json(response), None if exec_ns is None else tuple(exec_ns)
            try:
                message = decode_line(line.removesuffix(b"\n").removesuffix(b"\r"))
                validate("scheduler_line", message)
            except ValueError as error:
                raise self._break(ProtocolViolation(f"scheduler line for {what}: {error}: "
                                                    f"{shorten(line.decode(errors='replace'))}")) from None
            go = stand_in(message)
            if go is not None:
                with self.sending:
                    sent = self._send({"go": seq, "deadlock": go})
                if not sent:
                    raise self._crashed(what)

    def _send(self, document: dict) -> bool:
        """Write one line to the adapter (the caller holds ``sending``); False if its stdin is closed."""
        try:
            self.process.stdin.write(orjson.dumps(document) + b"\n")
            self.process.stdin.flush()
            return True
        except OSError:
            return False

    def await_gate(self, gate_id: str) -> bool:
        """True once the request carrying the gate waits at it, False if it finished without reaching it."""
        return self._gate_control("await_gate", gate_id) is True

    def open_gate(self, gate_id: str) -> None:
        self._gate_control("open_gate", gate_id)

    def _gate_control(self, cmd: str, gate_id: str) -> v.Json:
        response = self.request(cmd, {"gate": gate_id})
        if response.get("events") or "error" in response:
            raise self._break(ProtocolViolation(f"{cmd} must answer with no events and no error, got "
                                                f"{shorten(json.dumps(response))}"))
        return response["result"]

    def close(self) -> None:
        """End of input asks the adapter to exit; one that does not within the grace period is killed. Whatever it
        started is killed with it, whether it exited or not."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(EXIT_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        for reader in self.readers:
            reader.join(EXIT_GRACE_S)

    # --- the channel ------------------------------------------------------------------------------------------

    def _lifecycle(self, cmd: str, args: dict) -> v.Json:
        """hello and init answer with a result and nothing else."""
        response = self.request(cmd, args)
        if response.get("events") or "error" in response:
            raise self._break(ProtocolViolation(f"{cmd} must answer with no events and no error, got "
                                                f"{shorten(json.dumps(response))}"))
        return response["result"]

    def request(self, cmd: str, args: dict, routing: dict | None = None) -> dict:
        """Send one request (with the ``routing`` fields ``barrier`` and ``gate``, if given) and return its validated
        response document (thread-safe)."""
        if self.broken is not None:
            raise self.broken
        answer: queue.Queue[bytes | None] = queue.Queue(maxsize=1)
        with self.sending:
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            with self.routing:
                self.waiting[seq] = answer
            what = f"request {cmd!r}"  # not its seq: which one it was depends on what the adapter did before
            sent = self._send({"seq": seq, "cmd": cmd, "args": args, **(routing or {})})
        if not sent:
            raise self._crashed(what)
        line = self._await(answer, what, self.timeout if seq else max(self.timeout, STARTUP_S))
        if line is None:
            raise self._crashed(what)
        return self._decode(line, seq, what)

    def _await(self, answer: queue.Queue[bytes | None], what: str, timeout: float) -> bytes | None:
        """The response line; None when the adapter exited without giving it (even if a process it started still
        holds its stdout open, so no end of file comes)."""
        deadline = time.monotonic() + timeout
        exited_at = None
        while (left := deadline - time.monotonic()) > 0:
            try:
                return answer.get(timeout=min(POLL_S, left))
            except queue.Empty:
                pass
            if self.broken is not None:
                raise self.broken
            if self.process.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > EXIT_GRACE_S / 4:  # what it wrote before exiting has been read
                    return None
        killed = self._kill()
        self.readers[1].join(EXIT_GRACE_S / 4)  # the whole tail, not what was drained by chance before the kill
        raise self._break(AdapterTimedOut(f"no response to {what} within {timeout:g} s; "
                                          + ("killed it and all it started" if killed else "it had already exited"),
                                          self._stderr()))

    def _decode(self, line: bytes, seq: int, what: str) -> dict:
        text = line.decode("utf-8", errors="replace").rstrip("\r\n")
        try:
            response = decode_line(line.removesuffix(b"\n").removesuffix(b"\r"))
        except ValueError as error:
            raise self._break(AdapterGarbage(f"in answer to {what}, {error}: {shorten(text)!r}",
                                             self._stderr())) from None
        try:
            validate("response", response)
        except ValueError as error:
            raise self._break(ProtocolViolation(f"response to {what}: {error}: {shorten(text)}")) from None
        if response["seq"] != seq:
            raise self._break(ProtocolViolation(f"response seq {response['seq']} to {what}: responses must echo "
                                                f"their request's seq"))
        if "hung" in response:
            raise AdapterStopped(f"{what}: {response['hung']}")
        if "failure" in response:
            # the adapter's own words only: what its stderr drain has read by now depends on the machine's speed, and
            # a seeded check writes the same counterexample on any machine
            raise AdapterFailed(f"{what}: {response['failure']}")
        return response

    def _crashed(self, what: str) -> AdapterError:
        if self.broken is not None:
            return self.broken
        try:
            code = self.process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return self._break(ProtocolViolation(f"closed its stdout before answering {what} but kept running",
                                                 self._stderr()))
        self.readers[1].join(EXIT_GRACE_S / 4)  # let the stderr tail catch up with the exit
        return self._break(AdapterCrashed(f"exited with code {code} before answering {what}", self._stderr()))

    def _break(self, error: AdapterError) -> AdapterError:
        """The first break is the one every caller sees: later ones are its consequences."""
        if self.broken is None:
            self.broken = error
        self._kill()
        return self.broken

    def _kill(self) -> bool:
        """Kill the adapter and whatever it started; whether the adapter was still running."""
        running = self.process.poll() is None
        if self in LIVE:  # once
            LIVE.discard(self)
            self.control.close()  # the keeper kills the tree, then exits
            try:
                self.process.wait(KEEPER_GRACE_S)
            except subprocess.TimeoutExpired:  # a keeper that cannot run: its group, at least
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return running

    def _stderr(self) -> str:
        lines = self.stderr_tail.decode("utf-8", errors="replace").splitlines()[-STDERR_TAIL_LINES:]
        return "\n".join(line.rstrip() for line in lines)

    def _read_stdout(self) -> None:
        while line := self.process.stdout.readline(MAX_LINE_BYTES + 2):  # the line, \r and \n
            with self.routing:
                seq = echoed_seq(line)
                if seq in self.scheduled and SCHEDULER_LINE.search(line):
                    answer = self.waiting[seq]  # a scheduler line: the answer is still to come
                else:
                    self.scheduled.discard(seq)
                    if seq not in self.waiting and self.waiting:
                        seq = min(self.waiting)
                    answer = self.waiting.pop(seq, None)
            if answer is None:
                self._break(ProtocolViolation(f"a line that answers no request: {shorten(repr(line))}",
                                              self._stderr()))
                continue
            answer.put(line)
        with self.routing:
            waiting, self.waiting = list(self.waiting.values()), {}
        for answer in waiting:
            answer.put(None)

    def _read_stderr(self) -> None:
        while chunk := self.process.stderr.read1(STDERR_TAIL_BYTES):
            self.stderr_tail = (self.stderr_tail + chunk)[-STDERR_TAIL_BYTES:]


@atexit.register
def kill_live_adapters() -> None:
    """The harness is exiting: no adapter, nor anything it started, outlives it."""
    for system in list(LIVE):
        system._kill()
