"""Pieces of the HTTP/JSON e2e tests (issue 17).

- HttpServerProcess: e2e.ServerProcess with --http-listen 127.0.0.1:0 (the
  same address as --metrics-listen, so one HTTP server also serves /metrics),
  parsing the bound HTTP port from stdout.
- OpenApi: the checked-in server/doors/http/openapi.json; validate() checks a real
  response against the schema of its route and status (python3-jsonschema)
  and records which routes were checked, so a test can assert all were.
- curl(): the same calls through the curl CLI, as users make them.
"""
import json
import os
import re
import shutil
import subprocess

import jsonschema
import requests

import e2e_support as e2e

OPENAPI_PATH = os.path.join(e2e.SOURCE, "server", "doors", "http", "openapi.json")


class HttpServerProcess(e2e.ServerProcess):
    def __init__(self, models, extra_args=(), name="http", env=None, http_listen="127.0.0.1:0"):
        super().__init__(models, list(extra_args), name=name, env=env)
        self.http_listen = http_listen
        self.http_port = None

    def command(self):
        cmd = super().command()
        return cmd + ["--http-listen", self.http_listen]

    def _read_stdout(self):
        # ServerProcess's reader, plus the HTTP port line (printed before
        # "listening", so it is known once start() returns).
        for line in self.proc.stdout:
            m = re.match(r"dserve: http on port (\d+)", line)
            if m:
                self.http_port = int(m.group(1))
            self.stdout_lines.append(line)
            m = re.match(r"dserve: metrics on port (\d+)", line)
            if m:
                self.metrics_port = int(m.group(1))
            m = re.match(r"dserve: listening on port (\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._ready.set()

    def url(self, path, scheme="http"):
        return "%s://127.0.0.1:%d%s" % (scheme, self.http_port, path)


class OpenApi:
    def __init__(self, path=OPENAPI_PATH):
        with open(path) as f:
            self.doc = json.load(f)
        self.checked = set()  # (path, method, status)
        self.resolver = jsonschema.RefResolver.from_schema(self.doc)

    def _deref(self, node):
        while "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def response_schema(self, path, method, status):
        op = self.doc["paths"][path][method.lower()]
        responses = op["responses"]
        if str(status) not in responses:
            raise AssertionError("openapi.json: %s %s has no response %d" % (method, path, status))
        response = self._deref(responses[str(status)])
        return response["content"]

    def validate(self, path, method, response):
        """Checks `response` (requests.Response) against the document: its
        status is listed for the route, its content type is the listed one
        and a JSON body validates against the schema."""
        content = self.response_schema(path, method, response.status_code)
        ctype = response.headers.get("content-type", "").split(";")[0].strip()
        if ctype not in content:
            raise AssertionError("%s %s -> %d: content-type %r, openapi.json lists %s" % (
                method, path, response.status_code, ctype, list(content)))
        schema = content[ctype]["schema"]
        if ctype == "application/json":
            validator = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
            errors = sorted(validator.iter_errors(response.json()), key=lambda e: list(e.path))
            if errors:
                raise AssertionError("%s %s -> %d does not match openapi.json: %s\nbody: %s" % (
                    method, path, response.status_code, "; ".join(
                        "%s: %s" % (list(e.path), e.message) for e in errors[:5]), response.text[:2000]))
        self.checked.add((path, method.upper(), response.status_code))
        return response

    def routes(self):
        return {(p, m.upper()) for p, ops in self.doc["paths"].items() for m in ops}


def curl(args, stdin=None):
    """Runs the curl CLI; returns (status, body)."""
    exe = shutil.which("curl") or "/usr/bin/curl"
    out = subprocess.run([exe, "-sS", "-w", "\n%{http_code}"] + list(args), input=stdin, capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("curl %s failed: %s" % (" ".join(args), out.stderr))
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body


def session():
    s = requests.Session()
    s.headers["content-type"] = "application/json"
    return s
