"""A test client of the peer protocol (rpc/frame.h, rpc/rpc.h): it dials a node's peer port,
says Hello as a node of the cluster, and sends frames, well-formed or not.

Imported by the integration scripts next to it. The frame checksums need Debian's
python3-xxhash (deploy/install-deps.sh installs it).
"""
import hashlib
import hmac
import os
import re
import socket
import struct

import xxhash

FRAME_MAGIC = 0x53545250
FRAME_VERSION = 1
FRAME_HELLO, FRAME_MESSAGE, FRAME_REQUEST, FRAME_RESPONSE, FRAME_ERROR = 1, 2, 3, 4, 5
FRAME_PROOF = 6
PROTOCOL_VERSION = 1
CLUSTER_ID = "strata"  # the cluster name when --cluster-name is not given
# Message types of cluster/router_cluster.c.
MSG_RAFT, MSG_META_PROPOSE, MSG_PART_WRITE = 1, 3, 5


def strata_code(name):
    """The value of `name` in storage/base/err.h's strata_code (ERR_NONE = 0, then in
    order)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "storage",
                        "base", "err.h")
    with open(path) as f:
        text = f.read()
    body = text[text.index("typedef enum {"):text.index("} strata_code;")]
    return re.findall(r"^\s+(ERR_\w+)", body, re.M).index(name)


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def frame(ftype, msg_type, corr, payload, version=FRAME_VERSION):
    """One frame: the 32-byte header, its checksum over the header and the payload."""
    head = struct.pack(">IBBHIQI", FRAME_MAGIC, version, ftype, 0, msg_type, corr,
                       len(payload))
    return head + struct.pack(">Q", xxhash.xxh3_64_intdigest(head + payload)) + payload


def hello(cluster_id=CLUSTER_ID, node_id=99, protocol=PROTOCOL_VERSION, nonce=None):
    """A strata.Hello (proto/strata.proto), encoded by hand; `nonce`: its auth_nonce."""
    cid = cluster_id.encode()
    out = (b"\x0a" + varint(len(cid)) + cid + b"\x10" + varint(node_id) + b"\x18" +
           varint(protocol))
    if nonce is not None:
        out += b"\x22" + varint(len(nonce)) + nonce
    return out


def read_varint(data, i):
    """(value, next index) of the varint at data[i]."""
    v, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def parse_hello(payload):
    """{field number: value} of a strata.Hello: 1 cluster id (bytes), 2 node id, 3 protocol
    version, 4 auth nonce (bytes)."""
    out, i = {}, 0
    while i < len(payload):
        key, i = read_varint(payload, i)
        if key & 7 == 0:
            out[key >> 3], i = read_varint(payload, i)
        else:
            n, i = read_varint(payload, i)
            out[key >> 3], i = payload[i:i + n], i + n
    return out


def proof(secret, role, prover, verifier, dial_nonce, accept_nonce, cluster_id=CLUSTER_ID):
    """The proof of the peer secret (rpc/rpc.c, proof_compute) that the side in `role`
    ("D" dialler, "A" acceptor), node `prover`, sends to node `verifier`."""
    cid = cluster_id.encode()
    msg = (b"strata peer proof v1\0" + role.encode() + bytes([len(cid)]) + cid +
           struct.pack(">QQ", prover, verifier) + dial_nonce + accept_nonce)
    return hmac.new(secret, msg, hashlib.sha256).digest()


class Peer:
    """A connection to the peer port `pport`; `greet` sends this Hello first (None: none)."""

    def __init__(self, pport, greet=hello(), timeout=30):
        self.s = socket.create_connection(("127.0.0.1", pport), timeout=timeout)
        self.corr = 0
        if greet is not None:
            self.send(frame(FRAME_HELLO, 0, 0, greet))

    def send(self, data):
        self.s.sendall(data)

    def read_exact(self, n):
        """n bytes, or None once the node closed the connection."""
        data = b""
        while len(data) < n:
            chunk = self.s.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def read_frame(self):
        """(type, message type, correlation id, payload), checked; None once closed."""
        head = self.read_exact(32)
        if head is None:
            return None
        magic, _, ftype, _, msg_type, corr, length, sum_ = struct.unpack(">IBBHIQIQ", head)
        payload = self.read_exact(length)
        assert payload is not None, "the node closed the connection inside a frame"
        assert magic == FRAME_MAGIC, "bad magic"
        assert sum_ == xxhash.xxh3_64_intdigest(head[:24] + payload), "bad checksum"
        return ftype, msg_type, corr, payload

    def closed(self):
        """Whether the node closes the connection, reading (and dropping) what it sends
        before."""
        try:
            while self.read_frame() is not None:
                pass
            return True
        except ConnectionResetError:
            return True

    def send_request(self, msg_type, payload):
        """Sends a request without waiting for its answer."""
        self.corr += 1
        self.send(frame(FRAME_REQUEST, msg_type, self.corr, payload))

    def request(self, msg_type, payload):
        """Sends a request and waits for its answer: (frame type, payload); None if the
        node closed the connection first."""
        self.send_request(msg_type, payload)
        while True:
            f = self.read_frame()
            if f is None:
                return None
            if f[2] == self.corr and f[0] in (FRAME_RESPONSE, FRAME_ERROR):
                return f[0], f[3]

    def greeted(self):
        """Reads the node's Hello; whether it came."""
        f = self.read_frame()
        return f is not None and f[0] == FRAME_HELLO

    def close(self):
        self.s.close()


def error_of(answer):
    """(code, message) of an ERROR answer."""
    ftype, payload = answer
    assert ftype == FRAME_ERROR, "not an error: frame type %d" % ftype
    return struct.unpack(">I", payload[:4])[0], payload[4:].decode(errors="replace")


def part_write(pid, epoch, entry):
    """A MSG_PART_WRITE payload: partition, epoch, log entry."""
    return varint(pid) + varint(epoch) + entry
