#!/usr/bin/env python3
"""A stand-in for a LeechCore `rawtcp://` server, for leechio's tests.

Serves an image file over LeechCore's rawtcp protocol on 127.0.0.1, on a
port the system picks, and prints `port N` once it listens. It exits when
its standard input closes (the test that started it is gone).

The protocol (LeechCore-plugins, leechcore_device_rawtcp): every message
starts with a 24-byte header, little-endian: u32 command, 4 bytes of
padding, u64 address, u64 length. Commands: 0 status, 1 read, 2 write.
- status: the answer is a status header with length 1, then one byte,
  nonzero when the device is ready;
- read: the answer is a read header whose length says how many bytes
  follow (here: what the image holds from the address on, at most the
  length asked; 0 past its end);
- write: the header is followed by `length` bytes of data; the answer is
  a write header.

Modes, to test a client against a remote end that misbehaves:
  --silent       accept connections, never answer (not even the status)
  --stall-at A   answer until a read or write touches address A, then
                 print `stalled A` and never answer on that connection
  --no-accept    a listening socket whose queue is full: a connect gets
                 no answer at all (the SYN is dropped)
  --slow S       send each read's answer in 16 pieces spread over S
                 seconds: slow, but never silent for long
  --writable     write requests change the image file (else they are
                 answered and dropped)
"""

import argparse
import os
import socket
import struct
import sys
import threading
import time

HEADER = struct.Struct("<IIQQ")
STATUS, READ, WRITE = 0, 1, 2


def receive(conn, n):
    """Exactly n bytes, or None when the other end closed."""
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def stall(conn):
    """Keeps the connection open and never answers again."""
    threading.Event().wait()


def serve(conn, args, image, lock):
    size = os.fstat(image.fileno()).st_size
    with conn:
        if args.silent:
            stall(conn)
        while True:
            header = receive(conn, HEADER.size)
            if header is None:
                return
            command, _, addr, length = HEADER.unpack(header)
            data = b""
            if command == WRITE:
                data = receive(conn, length)
                if data is None:
                    return
            if args.stall_at is not None and command in (READ, WRITE):
                if addr <= args.stall_at < addr + length:
                    print(f"stalled {args.stall_at:#x}", flush=True)
                    stall(conn)
            if command == STATUS:
                conn.sendall(HEADER.pack(STATUS, 0, 0, 1) + b"\x01")
            elif command == READ:
                n = max(0, min(length, size - addr))
                with lock:
                    payload = os.pread(image.fileno(), n, addr) if n else b""
                answer = HEADER.pack(READ, 0, addr, len(payload)) + payload
                if args.slow:
                    step = -(-len(answer) // 16)
                    for at in range(0, len(answer), step):
                        time.sleep(args.slow / 16)
                        conn.sendall(answer[at:at + step])
                else:
                    conn.sendall(answer)
            elif command == WRITE:
                if args.writable and addr + len(data) <= size:
                    with lock:
                        os.pwrite(image.fileno(), data, addr)
                conn.sendall(HEADER.pack(WRITE, 0, addr, len(data)))
            else:
                return


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image")
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--stall-at", type=lambda v: int(v, 0))
    parser.add_argument("--no-accept", action="store_true")
    parser.add_argument("--writable", action="store_true")
    parser.add_argument("--slow", type=float)
    args = parser.parse_args()
    image = open(args.image, "r+b" if args.writable else "rb")
    lock = threading.Lock()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if args.no_accept:
        # A backlog of 0 queues one connection: this one fills the queue,
        # and the system drops every later connection's SYN.
        listener.listen(0)
        filler = socket.create_connection(("127.0.0.1", port))
    else:
        listener.listen(16)

    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn, args, image, lock), daemon=True).start()

    if not args.no_accept:
        threading.Thread(target=accept, daemon=True).start()
    print(f"port {port}", flush=True)
    # Exit when the test that started this server is gone.
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    main()
