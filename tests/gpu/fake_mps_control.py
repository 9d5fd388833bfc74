#!/usr/bin/python3
"""Stands in for nvidia-cuda-mps-control in tests (no GPU needed).

`fake_mps_control.py -d` daemonizes a process that listens on $CUDA_MPS_PIPE_DIRECTORY/control,
as the real control daemon does; run without arguments it reads commands on stdin, and `quit`
stops that daemon and removes its socket. Every invocation appends a line to $FAKE_MPS_RECORD
(when set) so a test can check what the supervisor ran and with which environment.
"""
import os
import signal
import socket
import sys

PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
LOG = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "")
RECORD = os.environ.get("FAKE_MPS_RECORD", "")


def note(line):
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def daemon():
    note(f"start pipe={PIPE} log={LOG}")
    if os.fork() > 0:
        return 0  # the real binary's foreground half also returns at once
    os.setsid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(PIPE, "control")
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    listener.listen(16)
    with open(os.path.join(PIPE, "fake-daemon.pid"), "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        connection, _ = listener.accept()
        connection.close()


def command():
    text = sys.stdin.read().strip()
    note(f"command {text} pipe={PIPE}")
    if text != "quit":
        return 0
    try:
        with open(os.path.join(PIPE, "fake-daemon.pid"), encoding="utf-8") as f:
            os.kill(int(f.read()), signal.SIGTERM)
    except (OSError, ValueError) as error:
        print(f"no daemon to stop: {error}", file=sys.stderr)
        return 1
    for name in ("control", "fake-daemon.pid"):
        try:
            os.unlink(os.path.join(PIPE, name))
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(daemon() if sys.argv[1:] == ["-d"] else command())
