"""What the integration scripts share: free loopback ports, and waiting on a condition.

Imported by the scripts next to it (Python puts a script's own directory on sys.path).
"""
import socket
import time


def free_ports(n):
    """n TCP ports free on 127.0.0.1 at the time of the call."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def poll(cond, what, deadline_s, interval):
    """cond()'s first true value, asked every `interval` s; AssertionError naming `what`
    once `deadline_s` passed. Tests wait on events this way, never on a bare sleep."""
    end = time.time() + deadline_s
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for: " + what)
