#!/usr/bin/env python3
"""probe_flood.py -- blind the probes: fill a daemon's metrics port with
TLS handshakes that never finish, from many local source addresses, and
reconnect every connection the server cuts, so that its connection limits
stay full.

    probe_flood.py PORT [--addrs 64] [--per-addr 4] [--seconds 20]
                   [--probe-https CAFILE] [--probe-unix PATH] [--warmup 2]
                   [--interval 0.25] [--probes N]
                   [--unix-flood PATH] [--unix-procs 8] [--unix-per-proc 32]

Opens PER_ADDR connections from each of 127.0.0.1 .. 127.0.0.ADDRS (the
prober's own address 127.0.0.1 included) to 127.0.0.1:PORT, sends each the
first bytes of a TLS ClientHello whose record announces 512 bytes, and
never sends the rest. A connection the server closes is opened again at
once. Runs SECONDS seconds, then closes everything and prints one line:
"flood: N connections held at the end, C connects, K cut by the server".
PORT 0: no flood of the metrics port.

With --unix-flood PATH, the daemon's own group floods its probe socket
too (the socket's mode lets every process of the group in):
UNIX_PROCS processes (forked before anything else starts, so each is a
peer of its own and none is the prober) open UNIX_PER_PROC connections
each; half of them hold silently, half dribble a request that never ends
(a header, one byte every 50 ms), and every connection the daemon closes
is opened again at once. One line: "unix flood: P processes, C connects,
K cut by the daemon, R refused (backlog full)".

The prober: with --probe-https CAFILE (https://127.0.0.1:PORT, the server
certificate checked against CAFILE, no client certificate: what an
orchestrator can present) and/or --probe-unix PATH (plain HTTP on the
daemon's probe socket), once the flood has run WARMUP seconds, a probe
every INTERVAL seconds to each target (one thread per target), /healthz and /readyz in turn, each
counted as answered when a 200 arrives within 1 s of its start; with
--probes N, N probes per target and then the flood ends. One line
per target: "probes TARGET: A of N answered within 1 s (healthz a/n,
readyz b/m)".

Bounded: at most ADDRS x PER_ADDR (<= 1024) sockets at a time and
UNIX_PROCS x UNIX_PER_PROC (<= 1024) on the probe socket, loopback and
unix sockets only, and the time given. Uses only Python's standard library.
"""
import argparse
import os
import selectors
import signal
import socket
import ssl
import sys
import threading
import time

# A TLS 1.2 handshake record of 512 bytes, of which only the header and the
# start of the ClientHello are ever sent: the server waits for the rest.
PARTIAL_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]) + bytes(8)


PROBE_S = 1.0


def http_status(sock, path, deadline):
    """Sends GET path on sock and returns the status of the answer, or 0."""
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    sock.sendall(("GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" % path).encode())
    got = b""
    while b"\r\n" not in got and len(got) < 4096:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        part = sock.recv(4096)
        if not part:
            break
        got += part
    line = got.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else 0


def probe_once(target, port, ctx, path):
    """"" when path on target answered 200 within PROBE_S, else why not."""
    deadline = time.monotonic() + PROBE_S
    step = "connect"
    try:
        if target == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(PROBE_S)
            s.connect(ctx)
        else:
            raw = socket.create_connection(("127.0.0.1", port), timeout=PROBE_S)
            raw.settimeout(max(deadline - time.monotonic(), 0.001))
            step = "TLS handshake"
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        step = "request"
        with s:
            status = http_status(s, path, deadline)
        if status != 200:
            return "%s: status %d (0: closed without an answer)" % (path, status)
        if time.monotonic() > deadline:
            return "%s: answered after %.0f ms" % (path, 1000 * (time.monotonic() - deadline + PROBE_S))
        return ""
    except (OSError, ValueError) as err:
        return "%s: %s: %s" % (path, step, err)


def unix_flood_worker(path, n, end, wfd):
    """One flooding process: n connections to the probe socket at path,
    even ones silent, odd ones dribbling a request that never ends, each
    opened again as soon as the daemon closes it; at end writes "C K R"
    (connects, cuts, refused connects) to wfd."""
    sel = selectors.DefaultSelector()
    st = {"connects": 0, "cuts": 0, "refused": 0}
    down = list(range(n))  # connections to open
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    def open_one(i):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except OSError:  # EAGAIN: the backlog is full
            s.close()
            st["refused"] += 1
            return False
        if i % 2:
            try:
                s.send(b"GET /healthz HTTP/1.0\r\nX-Slow: ")
            except OSError:
                s.close()
                return False
        sel.register(s, selectors.EVENT_READ, i)
        st["connects"] += 1
        return True

    next_drip = time.monotonic()
    while time.monotonic() < end and not stop:
        for i in down[:]:
            if open_one(i):
                down.remove(i)
        if down:
            time.sleep(0.001)  # the backlog is full: do not spin
        for key, _ in sel.select(timeout=0.01):
            s = key.fileobj
            try:
                s.recv(4096)  # an answer (a 400) or the close: cut either way
            except BlockingIOError:
                continue
            except OSError:
                pass
            st["cuts"] += 1
            sel.unregister(s)
            s.close()
            down.append(key.data)
        if time.monotonic() >= next_drip:
            next_drip += 0.05
            for key in list(sel.get_map().values()):
                if key.data % 2:
                    try:
                        key.fileobj.send(b"a")
                    except OSError:
                        pass  # the read side sees the close
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    os.write(wfd, ("%d %d %d\n" % (st["connects"], st["cuts"], st["refused"])).encode())


def start_unix_flood(path, procs, per_proc, end):
    """Forks the flooding processes; returns [(pid, read end)]."""
    kids = []
    for _ in range(procs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                unix_flood_worker(path, per_proc, end, w)
            except BaseException:  # never return into the parent's code
                code = 1
            os._exit(code)
        os.close(w)
        kids.append((pid, r))
    return kids


def end_unix_flood(kids):
    """Stops the flooding processes and sums their counts."""
    tot = [0, 0, 0]
    for pid, _ in kids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid, r in kids:
        got = b""
        while True:
            part = os.read(r, 256)
            if not part:
                break
            got += part
        os.close(r)
        os.waitpid(pid, 0)
        for i, v in enumerate(got.split()[:3]):
            tot[i] += int(v)
    return tot


def prober(name, ctx, port, start, end, interval, r, count=0):
    """Probes one target until end (its own thread, so that a target whose
    probes time out does not slow the other's); r = [healthz ok, n, readyz
    ok, n, the first failure]."""
    time.sleep(max(start - time.monotonic(), 0))
    k = 0
    while time.monotonic() < end and (count == 0 or k < count):
        t0 = time.monotonic()
        i = 0 if k % 2 == 0 else 2
        why = probe_once(name, port, ctx, "/healthz" if i == 0 else "/readyz")
        r[i] += 0 if why else 1
        r[i + 1] += 1
        if why and not r[4]:
            r[4] = why
        k += 1
        time.sleep(max(interval - (time.monotonic() - t0), 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--addrs", type=int, default=64)
    ap.add_argument("--per-addr", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--probe-https", metavar="CAFILE")
    ap.add_argument("--probe-unix", metavar="PATH")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--probes", type=int, default=0)
    ap.add_argument("--unix-flood", metavar="PATH")
    ap.add_argument("--unix-procs", type=int, default=8)
    ap.add_argument("--unix-per-proc", type=int, default=32)
    a = ap.parse_args()
    if not (1 <= a.unix_procs <= 64 and 1 <= a.unix_per_proc and
            a.unix_procs * a.unix_per_proc <= 1024):
        sys.exit("probe_flood: --unix-procs 1..64 and at most 1024 unix sockets in all")
    if a.probes:  # a bound: the run ends once the probes are made
        a.seconds = a.warmup + a.probes * (a.interval + PROBE_S) + 5
    kids = []
    if a.unix_flood:
        kids = start_unix_flood(a.unix_flood, a.unix_procs, a.unix_per_proc,
                                time.monotonic() + a.seconds)
    if a.port != 0 and not (1 <= a.addrs <= 254 and 1 <= a.per_addr and
                            a.addrs * a.per_addr <= 1024):
        sys.exit("probe_flood: --addrs 1..254 and at most 1024 sockets in all")
    if not (0 < a.seconds <= 600):
        sys.exit("probe_flood: --seconds must be in (0, 600]")
    if a.port == 0:
        a.addrs = 0
    sel = selectors.DefaultSelector()
    stats = {"connects": 0, "cuts": 0}

    def open_one(src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect_ex(("127.0.0.1", a.port))
        except OSError:
            s.close()
            return False
        sel.register(s, selectors.EVENT_WRITE, [src, False])
        stats["connects"] += 1
        return True

    slots = [("127.0.0.%d" % (1 + i // a.per_addr)) for i in range(a.addrs * a.per_addr)]
    retry = []  # sources whose connect failed at once (try again next round)
    for src in slots:
        if not open_one(src):
            retry.append(src)
    end = time.monotonic() + a.seconds
    targets = []
    if a.probe_https:
        ctx = ssl.create_default_context(cafile=a.probe_https)
        targets.append(("https", ctx))
    if a.probe_unix:
        targets.append(("unix", a.probe_unix))
    results = {name: [0, 0, 0, 0, ""] for name, _ in targets}
    threads = [threading.Thread(target=prober, daemon=True,
                                args=(name, ctx, a.port, time.monotonic() + a.warmup,
                                      end - PROBE_S, a.interval, results[name], a.probes))
               for name, ctx in targets]
    for th in threads:
        th.start()

    def running():
        if time.monotonic() >= end:
            return False
        return not a.probes or any(th.is_alive() for th in threads)

    while running():
        for src in retry[:]:
            if open_one(src):
                retry.remove(src)
        for key, ev in sel.select(timeout=0.05):
            s, data = key.fileobj, key.data
            src, sent = data
            gone = False
            if not sent and ev & selectors.EVENT_WRITE:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err == 0:
                    try:
                        s.send(PARTIAL_HELLO)
                        data[1] = True
                        sel.modify(s, selectors.EVENT_READ, data)
                        continue
                    except OSError:
                        pass
                gone = True
            else:
                try:
                    gone = s.recv(4096) == b""  # an alert or a close: cut
                except BlockingIOError:
                    continue
                except OSError:
                    gone = True
            if gone:
                stats["cuts"] += 1
                sel.unregister(s)
                s.close()
                if not open_one(src):
                    retry.append(src)
    for th in threads:
        th.join()
    if kids:
        c, k, r = end_unix_flood(kids)
        print("unix flood: %d processes, %d connects, %d cut by the daemon, %d refused "
              "(backlog full)" % (len(kids), c, k, r))
    held = sum(1 for k in sel.get_map().values() if k.data[1])
    for k in list(sel.get_map().values()):
        k.fileobj.close()
    print("flood: %d connections held at the end, %d connects, %d cut by the server"
          % (held, stats["connects"], stats["cuts"]))
    for name, _ in targets:
        h, hn, r, rn, why = results[name]
        print("probes %s: %d of %d answered within 1 s (healthz %d/%d, readyz %d/%d)%s"
              % (name, h + r, hn + rn, h, hn, r, rn, "; first failure: " + why if why else ""))


if __name__ == "__main__":
    main()
