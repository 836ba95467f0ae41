#!/usr/bin/python3
# usage: bench/http_library/fd_limit_check.py BUILD/bin/dserve CLASSIFY_CHECKPOINT_DIR
# (docs/performance.md, "HTTP front door")
"""Does the HTTP server spin when it runs out of file descriptors?
Starts dserve with RLIMIT_NOFILE 128 (its fds after start-up + a few), opens
connections until accept would fail, then measures the server's CPU for 3 s
with every connection idle, and whether a request on an open connection
still works."""
import os, resource, socket, subprocess, sys, time, re
B = sys.argv[1]; M = sys.argv[2]
def limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
p = subprocess.Popen([B, "serve", "--model", "classify=" + M, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                      "--http-listen", "127.0.0.1:0", "--http-threads", "8", "--workers", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=limit)
port = None
for line in p.stdout:
    m = re.match(r"dserve: http on port (\d+)", line)
    if m: port = int(m.group(1))
    if line.startswith("dserve: listening"): break
nfd = len(os.listdir("/proc/%d/fd" % p.pid))
print("server fds after start-up:", nfd, "limit 128")
conns = []
for i in range(200):
    s = socket.create_connection(("127.0.0.1", port)); conns.append(s)
time.sleep(1)
print("server fds with 200 connections attempted:", len(os.listdir("/proc/%d/fd" % p.pid)))
def cpu():
    f = open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
c0 = cpu(); t0 = time.time(); time.sleep(3); c1 = cpu()
print("server CPU while out of fds: %.2f s over %.1f s (%.0f%% of one core)" % (c1 - c0, time.time() - t0, 100 * (c1 - c0) / (time.time() - t0)))
for s in conns: s.close()
time.sleep(6)  # idle keep-alive connections time out (5 s)
import urllib.request
r = urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=10)
print("after the clients closed: /health", r.status, r.read().decode())
p.terminate(); p.wait(30)
