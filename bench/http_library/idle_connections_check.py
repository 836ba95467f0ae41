#!/usr/bin/python3
"""How long a /health call waits while N idle keep-alive connections hold
the HTTP threads (--http-threads 8). docs/performance.md, "HTTP front door".
usage: bench/http_library/idle_connections_check.py BUILD/bin/dserve CLASSIFY_CHECKPOINT_DIR"""
import re, socket, subprocess, sys, time, urllib.request
B, M = sys.argv[1], sys.argv[2]
p = subprocess.Popen([B, "serve", "--model", "classify=" + M, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                      "--http-listen", "127.0.0.1:0", "--http-threads", "8", "--workers", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
for line in p.stdout:
    m = re.match(r"dserve: http on port (\d+)", line)
    if m: port = int(m.group(1))
    if line.startswith("dserve: listening"): break
def health():
    t = time.monotonic(); urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=30).read(); return time.monotonic() - t
print("health with no idle connections: %.3f s" % health())
for n in (7, 8, 16):
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    time.sleep(0.3)
    print("health with %d idle connections open (8 threads): %.3f s" % (n, health()))
    for s in conns: s.close()
    time.sleep(6)
p.terminate(); p.wait(30)
