"""Runs an adapter so that nothing it starts outlives it: ``python -I -S keeper.py CONTROL_FD COMMAND ARG...``.

The harness talks to the adapter itself (the adapter inherits stdin, stdout and stderr); the keeper only starts it,
says so on CONTROL_FD (an empty line, or why it could not), and waits. On Linux the keeper is a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), so a descendant whose parent exits — a daemon that called setsid() and double-forked
— is handed to the keeper instead of init, and the adapter's whole tree stays the keeper's descendants whatever
sessions and process groups it makes. That tree is killed when the adapter exits, when the harness closes its end
of CONTROL_FD (to stop the adapter, or by dying, even by SIGKILL), or on SIGTERM, SIGHUP or SIGINT; then the keeper
exits as the adapter did, so the harness sees the adapter's exit status. Elsewhere (macOS) there is no subreaper:
the keeper kills the adapter's process group, which a descendant that starts a session of its own leaves.

Standard library only, run without site-packages: it starts before, and must outlive, anything the adapter imports.
"""

import ctypes
import os
import signal
import sys
import threading

PR_SET_CHILD_SUBREAPER = 36
STOPPING = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stop(Exception):
    pass


def stop(signum, frame):
    raise Stop


def descendants(root: int) -> list[int]:
    """Every process below ``root``, from the parent pid in each /proc/PID/stat (no /proc/PID/task/*/children:
    kernels without CONFIG_PROC_CHILDREN lack it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parent = int(stat.read().rpartition(b")")[2].split()[1])  # the name may hold ") "
            except (OSError, ValueError, IndexError):
                continue  # it exited meanwhile
            children.setdefault(parent, []).append(int(entry))
    found, below = [], [root]
    while below:
        under = children.get(below.pop(), [])
        found += under
        below += under
    return found


def kill_tree(adapter: int, subreaper: bool) -> None:
    """SIGKILL everything below the keeper until nothing is left (whatever a killed process orphans comes here
    and is found on the next round), reaping as it goes."""
    if not subreaper:
        try:
            os.killpg(adapter, signal.SIGKILL)
        except OSError:  # the group is empty
            pass
    while True:
        for pid in descendants(os.getpid()) if subreaper else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.wait()
        except ChildProcessError:
            return


def main() -> None:
    control, command = int(sys.argv[1]), sys.argv[2:]
    os.set_inheritable(control, False)
    for signum in STOPPING:
        signal.signal(signum, stop)
    subreaper = sys.platform == "linux" and ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        adapter = os.posix_spawnp(command[0], command, os.environ, setpgroup=0)
    except (OSError, ValueError, IndexError) as error:
        os.write(control, f"{error}\n".encode())
        sys.exit(127)
    os.write(control, b"\n")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the harness sees the end of the adapter's output, not of the keeper's copy
        os.dup2(devnull, fd)

    def harness_gone() -> None:
        while os.read(control, 1):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)  # the watcher inherits the mask: signals interrupt wait()
    threading.Thread(target=harness_gone, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)
    status = None
    try:
        while status is None:
            pid, exited = os.wait()  # the adapter, or an orphan handed here
            if pid == adapter:
                status = exited
    except Stop:
        pass
    for signum in STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    kill_tree(adapter, subreaper)
    code = 1 if status is None else os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: so is the keeper
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL's cannot be set, and is the default
            pass
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


if __name__ == "__main__":
    main()
