"""Runs COMMAND as the adapter after starting a daemon that leaves the adapter's process group and session:

    python escaping_adapter.py PIDFILE COMMAND ARG...

A child calls setsid() and forks a grandchild that closes its stdio and sleeps; the child exits, orphaning the
grandchild as a daemon's double fork does. The adapter's and the grandchild's pids are appended to PIDFILE before
COMMAND replaces this process."""

import os
import sys
import time

pidfile, command = sys.argv[1], sys.argv[2:]
child = os.fork()
if child == 0:
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(3600)
        os._exit(0)
    with open(pidfile, "a") as pids:
        pids.write(f"{os.getppid()} {grandchild}\n")
    os._exit(0)
os.waitpid(child, 0)
os.execvp(command[0], command)
