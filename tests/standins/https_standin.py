#!/usr/bin/env python3
"""HTTPS stand-ins for the credentials tests: private servers on loopback that need a secret.

One server, one certificate for several names, routed by the Host header:

  git.example.test    git smart HTTP (clone and push, through `git http-backend`) of the
                      bare repositories under DIR/git/, behind HTTP Basic (--basic)
  api.example.test    GET /whoami needs `Authorization: Bearer <--bearer>` (200 JSON, else
                      401); GET /redirect?to=URL answers 302 to URL, for anyone
  echo.example.test   returns the request's headers, in the body and in X-Echo
  other.example.test  200 "other" (a second host, to see what reaches it)

Usage:
  python3 tests/standins/https_standin.py --dir DIR --basic user:token --bearer TOKEN
  STANDIN_BASIC=user:token STANDIN_BEARER=TOKEN python3 tests/standins/https_standin.py --dir DIR

It makes DIR/ca.pem (the stand-in's own certificate authority: what a client must trust),
DIR/git/private.git (one commit with README), listens on 127.0.0.1 (--port, 0 = any),
writes the port to DIR/port once it serves, and logs every request as one JSON line to
DIR/requests.jsonl: {"sni", "host", "method", "path", "headers": {...}}. That log is the
receiving side the tests check: what each host was sent, credentials included.

Needs python3 (standard library), openssl and git. Test kit only; not part of orch.
"""

import argparse
import base64
import http.server
import json
import os
import socketserver
import ssl
import subprocess
import sys
import threading
import urllib.parse

NAMES = ["git.example.test", "api.example.test", "echo.example.test", "other.example.test"]


def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def make_certificates(d):
    """A CA and one leaf for every name (and 127.0.0.1), signed by it, with openssl."""
    ca_key, ca_pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    leaf_key, leaf_csr, leaf_pem = (os.path.join(d, n) for n in ("leaf.key", "leaf.csr", "leaf.pem"))
    ext = os.path.join(d, "leaf.ext")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", ca_key, "-out", ca_pem, "-days", "2", "-subj", "/CN=orch test stand-in CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", leaf_key, "-out", leaf_csr, "-subj", "/CN=" + NAMES[0]])
    with open(ext, "w") as f:
        alt = ",".join("DNS:" + n for n in NAMES) + ",IP:127.0.0.1"
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
        f.write("subjectAltName=" + alt + "\n")
    run(["openssl", "x509", "-req", "-in", leaf_csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
         "-out", leaf_pem, "-days", "2", "-extfile", ext])
    return leaf_pem, leaf_key


def make_repository(d):
    """DIR/git/private.git: a bare repository with one commit, pushable over HTTP."""
    bare = os.path.join(d, "git", "private.git")
    if os.path.isdir(bare):
        return
    seed = os.path.join(d, "seed")
    env = dict(os.environ, GIT_AUTHOR_NAME="standin", GIT_AUTHOR_EMAIL="standin@example.test",
               GIT_COMMITTER_NAME="standin", GIT_COMMITTER_EMAIL="standin@example.test")
    run(["git", "init", "-q", "-b", "main", seed])
    with open(os.path.join(seed, "README"), "w") as f:
        f.write("private repository\n")
    run(["git", "-C", seed, "add", "README"], env=env)
    run(["git", "-C", seed, "commit", "-q", "-m", "first"], env=env)
    run(["git", "clone", "-q", "--bare", seed, bare])
    run(["git", "-C", bare, "config", "http.receivepack", "true"])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin"

    def setup(self):
        # The TLS handshake happens here, in the connection's own thread, so that a
        # client that stalls it holds up nobody else.
        self.request.settimeout(30)
        self.request.do_handshake()
        super().setup()

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    def record(self):
        entry = {
            "sni": getattr(self.connection, "standin_sni", None),
            "host": self.headers.get("Host", ""),
            "method": self.command,
            "path": self.path,
            "headers": {k: v for k, v in self.headers.items()},
        }
        with self.server.log_lock, open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def reply(self, status, body, ctype="text/plain", extra=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        self.record()
        data = self.body()
        name = self.headers.get("Host", "").split(":")[0].lower()
        if name == "git.example.test":
            return self.git(data)
        if name == "api.example.test":
            return self.api()
        if name == "echo.example.test":
            headers = {k: v for k, v in self.headers.items()}
            text = json.dumps(headers)
            return self.reply(200, text, "application/json", [("X-Echo", json.dumps(headers))])
        if name == "other.example.test":
            return self.reply(200, "other\n")
        return self.reply(404, "unknown host\n")

    do_GET = do_POST = do_PUT = do_HEAD = handle_any

    def api(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/redirect":
            to = urllib.parse.parse_qs(url.query).get("to", [""])[0]
            return self.reply(302, "", extra=[("Location", to)])
        if url.path == "/whoami":
            if self.headers.get("Authorization") == "Bearer " + self.server.bearer:
                return self.reply(200, json.dumps({"user": "api-user"}) + "\n", "application/json")
            return self.reply(401, "bearer token required\n", extra=[("WWW-Authenticate", "Bearer")])
        return self.reply(404, "no such path\n")

    def git(self, data):
        expected = "Basic " + base64.b64encode(self.server.basic.encode()).decode()
        if self.headers.get("Authorization") != expected:
            return self.reply(401, "credentials required\n", extra=[("WWW-Authenticate", 'Basic realm="git"')])
        url = urllib.parse.urlsplit(self.path)
        env = dict(os.environ)
        env.update({
            "GIT_PROJECT_ROOT": self.server.git_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": self.server.basic.split(":")[0],
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(url.path),
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(data)),
            "GATEWAY_INTERFACE": "CGI/1.1",
        })
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run([self.server.http_backend], input=data, env=env, capture_output=True).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        if not _:
            head, _, body = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k.strip(), v.strip()))
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    # The secrets may come from the environment instead, so that they are not on the
    # command line (which every process of the same user can read).
    p.add_argument("--basic", default=os.environ.get("STANDIN_BASIC"),
                   help="user:token that git.example.test requires (default: $STANDIN_BASIC)")
    p.add_argument("--bearer", default=os.environ.get("STANDIN_BEARER"),
                   help="the token api.example.test requires (default: $STANDIN_BEARER)")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    if not a.basic or not a.bearer:
        p.error("give --basic and --bearer, or set STANDIN_BASIC and STANDIN_BEARER")
    os.makedirs(a.dir, exist_ok=True)
    leaf, key = make_certificates(a.dir)
    make_repository(a.dir)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(leaf, key)

    def on_sni(sock, name, _ctx):
        sock.standin_sni = name

    ctx.sni_callback = on_sni
    server = Server(("127.0.0.1", a.port), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.git_root = os.path.join(a.dir, "git")
    exec_path = subprocess.check_output(["git", "--exec-path"], text=True).strip()
    server.http_backend = os.path.join(exec_path, "git-http-backend")
    server.basic, server.bearer = a.basic, a.bearer
    server.log_path = os.path.join(a.dir, "requests.jsonl")
    server.log_lock = threading.Lock()
    open(server.log_path, "a").close()
    port_file = os.path.join(a.dir, "port")
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
