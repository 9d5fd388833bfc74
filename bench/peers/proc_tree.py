"""CPU seconds and resident memory of a server's whole process tree, read from /proc (Linux):
the servers of the peer benchmark (issue 31) fork workers, Java, Ray's raylet and actors, stubs;
each measurement counts all of them. A process belongs to the tree when its parent chain reaches
a root pid or it shares a root's session (the harness starts every server in its own session)."""
from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return text[text.rindex(")") + 2:].split()


def tree(roots: list[int]) -> list[int]:
    """Live pids of the roots, their descendants and their sessions' members."""
    parents, sessions = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields:  # fields[0] is state; ppid is fields[1], session fields[3]
            parents[int(name)] = int(fields[1])
            sessions[int(name)] = int(fields[3])
    members = {pid for pid in roots if pid in parents}
    root_sessions = {sessions[pid] for pid in members if sessions[pid] > 1}
    members |= {pid for pid, sid in sessions.items() if sid in root_sessions}
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in members} - members
        members |= children
        grew = bool(children)
    return sorted(members)


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:  # utime, stime: fields 14 and 15 of stat, here 11 and 12
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * _PAGE / (1 << 20)
