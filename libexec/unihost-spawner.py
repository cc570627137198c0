#!/usr/bin/python3
"""unihost's process spawner: starts VMMs with posix_spawn for the daemon.

A forked process pays for copying its parent's page tables: `child_process.spawn`
from the daemon (libuv forks) costs 8-18 ms on the machines unihost was measured
on, and blocks the daemon's event loop for that long. glibc's posix_spawn
(clone with CLONE_VM|CLONE_VFORK) costs about 0.5 ms. The daemon keeps one of
these processes and asks it to start each VMM (src/machines/qemu/spawner.ts).

Protocol: one JSON object per line.
  stdin   {"n": 1, "argv": [...], "stderr": "/path", "fd3": "/path" | null}
  stdout  {"n": 1, "pid": 123} or {"n": 1, "error": "..."}
          {"exit": 123, "code": 0 | null, "signal": "SIGKILL" | null}   when a child ends
Each child gets /dev/null as stdin and stdout, the file `stderr` (created or
truncated) as stderr, `fd3` opened read-only as fd 3 when given, a session of
its own, default signal dispositions and an empty signal mask. The spawner
ends when its stdin closes (the daemon is gone); its children live on and the
next daemon adopts them.
"""
import json
import os
import selectors
import signal
import sys

SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def send(obj):
    try:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        sys.exit(0)  # the daemon is gone


def start(req):
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    if req.get("fd3"):
        actions.append((os.POSIX_SPAWN_OPEN, 3, req["fd3"], os.O_RDONLY, 0))
    argv = req["argv"]
    return os.posix_spawnp(
        argv[0], argv, os.environ, file_actions=actions, setsid=True, setsigdef=SIGNALS, setsigmask=[]
    )


def main():
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.buffer, selectors.EVENT_READ, None)
    buf = b""
    while True:
        for key, _ in sel.select():
            if key.data is None:
                chunk = os.read(sys.stdin.fileno(), 65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    req = json.loads(line)
                    try:
                        pid = start(req)
                    except OSError as e:
                        send({"n": req["n"], "error": f"{req['argv'][0]}: {e.strerror or e}"})
                        continue
                    fd = os.pidfd_open(pid)
                    sel.register(fd, selectors.EVENT_READ, pid)
                    send({"n": req["n"], "pid": pid})
            else:
                pid = key.data
                sel.unregister(key.fileobj)
                os.close(key.fileobj)
                _, status = os.waitpid(pid, 0)
                if os.WIFSIGNALED(status):
                    send({"exit": pid, "code": None, "signal": signal.Signals(os.WTERMSIG(status)).name})
                else:
                    send({"exit": pid, "code": os.WEXITSTATUS(status), "signal": None})


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's Ctrl-C is for the daemon: it ends us by closing stdin
    main()
