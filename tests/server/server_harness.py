"""Starts `ridge serve` on a free loopback port and talks to it: the official openai client, raw
HTTP (http.client), /metrics parsing, the server's RSS. RIDGE_TEST_SERVER=stub runs the suites
against the stub engine (the HTTP layer alone) instead of the default model."""
import http.client
import json
import os
import pathlib
import re
import resource
import signal
import subprocess
import threading
import time

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("RIDGE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN_DIR = pathlib.Path(os.environ.get("RIDGE_BIN_DIR", SOURCE_DIR / "build" / "bin"))
DEFAULT_MODEL = SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
USE_STUB = os.environ.get("RIDGE_TEST_SERVER", "") == "stub"


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    def __init__(self, *args, stub=None, api_key=None, ready_timeout=300):
        if not DEFAULT_MODEL.exists():
            pytest.skip("the default model is not installed (scripts/setup)")
        self.stub = USE_STUB if stub is None else stub
        self.api_key = api_key
        cmd = [str(BIN_DIR / "ridge"), "--log-level", "warn", "serve", "--port", "0",
               "--device", "cpu", "--shutdown-timeout", "20"]
        if self.stub:
            cmd.append("--stub-engine")
            if "--stub-step-ms" not in map(str, args):
                cmd += ["--stub-step-ms", "2"]  # about the default model's pace on CPU, x15
        if api_key:
            cmd += ["--api-key", api_key]
        cmd += [str(a) for a in args]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()
        line = self._read_listen_line(ready_timeout)
        m = re.search(r"http://([\d.]+):(\d+)", line or "")
        if not m:
            self.proc.kill()
            self.proc.wait()
            err = "".join(self.stderr_lines)
            raise AssertionError(f"ridge serve did not start: {' '.join(cmd)}\n{err}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        self.base_url = self.url + "/v1"
        self.model = self.models()[0]

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _read_listen_line(self, timeout):
        out = []

        def read():
            out.append(self.proc.stdout.readline())

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out else None

    # -- clients
    def client(self, **kw):
        import openai
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.base_url, api_key=kw.pop("api_key", self.api_key or "none"), **kw)

    def request(self, method, path, body=None, headers=None, timeout=600):
        """Raw HTTP: returns (status, headers dict, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def models(self):
        status, _, body = self.request("GET", "/v1/models")
        assert status == 200, body
        return [m["id"] for m in json.loads(body)["data"]]

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def wait_metrics(self, pred, timeout=30):
        end = time.time() + timeout
        m = self.metrics()
        while not pred(m) and time.time() < end:
            time.sleep(0.05)
            m = self.metrics()
        return m

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=120):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("ridge serve did not stop within %s s" % timeout)
        return self.proc.returncode


def sse_events(raw: bytes):
    """Splits an SSE body into the JSON payloads of its data: lines (and '[DONE]')."""
    events = []
    for block in raw.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
