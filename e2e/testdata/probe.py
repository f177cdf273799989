# probe.py: the bypass suite's one-shot network probes, run inside a
# sandbox with the image's python3 (standard library only). Each probe tries
# one way out and prints one verdict line:
#   REACHED: ...  (exit 0) the far end answered: the attempt got through
#   REFUSED: ...  (exit 3) it did not (an error, a denial, silence)
# "Reached" is judged by what came back: a world server's marker in the
# answer, a positive DNS answer, an ICMP echo reply. Probes whose success
# cannot be seen from inside (raw frames, spoofed sources) print SENT and
# exit 3; the test then relies on the world's capture and canary.
import base64, os, random, socket, ssl, struct, sys, time

MARKERS = (b"CANARY-REACHED", b"EVIL-SERVER-REACHED", b"world-txt")
TIMEOUT = 3.0


def out(reached, msg):
    print(("REACHED: " if reached else "REFUSED: ") + msg)
    sys.exit(0 if reached else 3)


def marked(data):
    return any(m in data for m in MARKERS)


def show(data):
    return repr(data[:300])


def recv_all(s, limit=65536):
    buf = b""
    s.settimeout(TIMEOUT)
    try:
        while len(buf) < limit:
            b = s.recv(4096)
            if not b:
                break
            buf += b
    except (socket.timeout, OSError):
        pass
    return buf


def default_payload(host):
    return ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode()


def tcp(host, port, payload=None, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    s.connect((host, int(port)))
    s.sendall(payload.encode() if payload else default_payload(host))
    data = recv_all(s)
    out(marked(data), "tcp %s:%s answered %s" % (host, port, show(data)))


def udp(host, port, payload=None, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(TIMEOUT)
    s.sendto((payload or "probe").encode(), (host, int(port)))
    try:
        data, frm = s.recvfrom(4096)
    except socket.timeout:
        out(False, "udp %s:%s: no answer" % (host, port))
    out(marked(data), "udp %s:%s answered %s from %s" % (host, port, show(data), frm))


def quic(host, port):
    # A QUIC v1 Initial long header (client hello not encrypted: enough to
    # look like QUIC on the wire), padded to 1200 bytes as clients do.
    dcid = os.urandom(8)
    pkt = bytes([0xC3]) + struct.pack(">I", 1) + bytes([8]) + dcid + bytes([0]) + b"\x00" + b"\x44\xd0"
    pkt += os.urandom(1200 - len(pkt))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(TIMEOUT)
    s.sendto(pkt, (host, int(port)))
    try:
        data, frm = s.recvfrom(4096)
    except socket.timeout:
        out(False, "quic %s:%s: no answer" % (host, port))
    out(True, "quic %s:%s answered %d bytes from %s" % (host, port, len(data), frm))


def checksum(b):
    if len(b) % 2:
        b += b"\x00"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_echo(ident, seq):
    body = b"airlock-probe"
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, checksum(hdr + body), ident, seq) + body


def icmp(host, raw=False):
    kind = socket.SOCK_RAW if raw else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
    s.settimeout(TIMEOUT)
    s.sendto(icmp_echo(os.getpid() & 0xFFFF, 1), (host, 0))
    end = time.time() + TIMEOUT
    while time.time() < end:
        try:
            data, frm = s.recvfrom(4096)
        except socket.timeout:
            break
        if raw:
            data = data[(data[0] & 0x0F) * 4:]
        if frm[0] == host and data and data[0] == 0:
            out(True, "icmp echo reply from %s" % frm[0])
    out(False, "icmp %s: no echo reply" % host)


def ip4_header(src, dst, proto, length):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, random.randint(0, 65535), 0, 64, proto, 0,
                      socket.inet_aton(src), socket.inet_aton(dst))
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]


def tcp_syn(src, dst, port):
    sport = random.randint(20000, 60000)
    seg = struct.pack("!HHIIBBHHH", sport, int(port), random.randint(0, 2**32 - 1), 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(seg))
    seg = seg[:16] + struct.pack("!H", checksum(pseudo + seg)) + seg[18:]
    return ip4_header(src, dst, 6, len(seg)) + seg


def udp_dgram(src, dst, port, payload=b"airlock-probe"):
    seg = struct.pack("!HHHH", random.randint(20000, 60000), int(port), 8 + len(payload), 0) + payload
    return ip4_header(src, dst, 17, len(seg)) + seg


def rawip(kind, src, dst, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    pkt = tcp_syn(src, dst, port) if kind == "syn" else udp_dgram(src, dst, port)
    s.sendto(pkt, (dst, 0))
    out(False, "SENT raw %s %s -> %s:%s (judged by the world's capture)" % (kind, src, dst, port))


def route_iface():
    try:
        with open("/proc/net/route") as f:
            for line in f.readlines()[1:]:
                p = line.split()
                if p[1] == "00000000":
                    return p[0], socket.inet_ntoa(struct.pack("<I", int(p[2], 16)))
    except OSError:
        pass
    return "eth0", None


def mac_of(ip, iface):
    if ip:
        try:  # make the kernel resolve the gateway first
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"\x00", (ip, 53))
            time.sleep(0.3)
        except OSError:
            pass
        try:
            with open("/proc/net/arp") as f:
                for line in f.readlines()[1:]:
                    p = line.split()
                    if p[0] == ip and p[5] == iface and p[3] != "00:00:00:00:00:00":
                        return bytes.fromhex(p[3].replace(":", ""))
        except OSError:
            pass
    return b"\xff" * 6


def packet(dst, port, v6=False):
    iface, gw = route_iface()
    with open("/sys/class/net/%s/address" % iface) as f:
        src_mac = bytes.fromhex(f.read().strip().replace(":", ""))
    dst_mac = mac_of(gw, iface)
    if v6:
        payload = b"airlock-probe"
        udp6 = struct.pack("!HHHH", 40000, int(port), 8 + len(payload), 0) + payload
        src6 = socket.inet_pton(socket.AF_INET6, "fe80::1")
        ip = struct.pack("!IHBB", 6 << 28, len(udp6), 17, 64) + src6 + socket.inet_pton(socket.AF_INET6, dst) + udp6
        frame = dst_mac + src_mac + b"\x86\xdd" + ip
    else:
        me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        me.connect((dst, int(port)))
        frame = dst_mac + src_mac + b"\x08\x00" + udp_dgram(me.getsockname()[0], dst, port)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    s.send(frame)
    out(False, "SENT %d-byte frame on %s to %s port %s (judged by the world's capture)" % (len(frame), iface, dst, port))


def transparent(src, dst, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_IP, 19, 1)  # IP_TRANSPARENT
    s.bind((src, 0))
    s.settimeout(TIMEOUT)
    s.connect((dst, int(port)))
    s.sendall(default_payload(dst))
    data = recv_all(s)
    out(marked(data), "tcp from %s to %s:%s answered %s" % (src, dst, port, show(data)))


def resolver():
    with open("/etc/resolv.conf") as f:
        for line in f:
            p = line.split()
            if len(p) >= 2 and p[0] == "nameserver":
                return p[1]
    return "127.0.0.1"


QTYPES = {"A": 1, "NS": 2, "CNAME": 5, "MX": 15, "TXT": 16, "AAAA": 28, "ANY": 255}


def dns_query(name, qtype):
    q = struct.pack("!HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        b = label.encode()
        q += bytes([len(b)]) + b
    return q + b"\x00" + struct.pack("!HH", QTYPES[qtype], 1)


def dns_exchange(proto, server, port, name, qtype):
    q = dns_query(name, qtype)
    if proto == "tcp":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        s.connect((server, int(port)))
        s.sendall(struct.pack("!H", len(q)) + q)
        data = b""
        while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
            b = s.recv(4096)
            if not b:
                break
            data += b
        data = data[2:]
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(TIMEOUT)
        s.sendto(q, (server, int(port)))
        data, _ = s.recvfrom(4096)
    if len(data) < 12:
        raise OSError("short answer %r" % data)
    flags, _, ancount = struct.unpack("!HHH", data[2:8])
    return flags & 0x0F, ancount, data


def dns(proto, server, port, name, qtype):
    if server == "resolv":
        server = resolver()
    try:
        rcode, ancount, data = dns_exchange(proto, server, port, name, qtype)
    except (OSError, socket.timeout) as e:
        out(False, "dns %s %s:%s %s: %s" % (proto, server, port, name, e))
    reached = (rcode == 0 and ancount > 0) or marked(data)
    out(reached, "dns %s %s:%s %s %s: rcode %d, %d answers %s" % (proto, server, port, qtype, name, rcode, ancount, show(data)))


def dnsmany(server, parent, count, mark):
    if server == "resolv":
        server = resolver()
    answered = 0
    count = int(count)
    for i in range(count):
        label = "%s%02d%s" % (mark, i, "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12)))
        try:
            rcode, ancount, _ = dns_exchange("udp", server, 53, label + "." + parent, "A")
            if rcode == 0 and ancount > 0:
                answered += 1
        except (OSError, socket.timeout):
            pass
    out(answered == count, "%d of %d random names under %s answered" % (answered, count, parent))


def tls_connect(host, port, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    return ctx.wrap_socket(raw, server_hostname=sni or None)


def status_ok(data):
    return data.startswith(b"HTTP/1.") and data[9:10] == b"2"


def tls(host, port, sni, hosthdr, path):
    s = tls_connect(host, port, sni)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, hosthdr)).encode())
    data = recv_all(s)
    out(marked(data) or status_ok(data), "tls %s:%s sni=%r host=%s answered %s" % (host, port, sni, hosthdr, show(data)))


def raw(host, port, use_tls, sni, b64):
    req = base64.b64decode(b64)
    if use_tls == "1":
        s = tls_connect(host, port, sni)
    else:
        s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    s.sendall(req)
    data = recv_all(s)
    out(marked(data), "raw %s:%s answered %s" % (host, port, show(data)))


def read_response(s):
    s.settimeout(TIMEOUT)
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            return head
        head += b
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = b""
    while len(body) < length:
        b = s.recv(length - len(body))
        if not b:
            break
        body += b
    return head + body


def keepalive(host, port, sni, host1, path1, host2, path2):
    s = tls_connect(host, port, sni)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path1, host1)).encode())
    first = read_response(s)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path2, host2)).encode())
        second = recv_all(s)
    except OSError as e:
        out(False, "second request refused: %s (first: %s)" % (e, show(first)))
    out(marked(second) or status_ok(second), "first %s; second %s" % (show(first[:60]), show(second)))


def getaddr(name, port):
    try:
        infos = socket.getaddrinfo(name, int(port), proto=socket.IPPROTO_TCP)
    except OSError as e:
        out(False, "resolve %r: %s" % (name, e))
    addr = infos[0][4]
    s = socket.socket(infos[0][0], socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    s.connect(addr)
    s.sendall(default_payload(name))
    data = recv_all(s)
    out(marked(data), "%r -> %s answered %s" % (name, addr, show(data)))


PROBES = {
    "tcp": tcp, "udp": udp, "quic": quic,
    "tcp6": lambda h, p, *a: tcp(h, p, *a, family=socket.AF_INET6),
    "udp6": lambda h, p, *a: udp(h, p, *a, family=socket.AF_INET6),
    "icmp": icmp, "rawicmp": lambda h: icmp(h, raw=True),
    "rawsyn": lambda s, d, p: rawip("syn", s, d, p), "rawudp": lambda s, d, p: rawip("udp", s, d, p),
    "packet": packet, "packet6": lambda d, p: packet(d, p, v6=True),
    "transparent": transparent, "dns": dns, "dnsmany": dnsmany,
    "tls": tls, "raw": raw, "keepalive": keepalive, "getaddr": getaddr,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PROBES:
        print("usage: probe.py {%s} ARGS..." % "|".join(sorted(PROBES)))
        sys.exit(2)
    try:
        PROBES[sys.argv[1]](*sys.argv[2:])
    except PermissionError as e:
        out(False, "not permitted in this sandbox: %s" % e)
    except (OSError, socket.timeout, ssl.SSLError, ValueError) as e:
        out(False, "%s: %s" % (type(e).__name__, e))
