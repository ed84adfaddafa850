"""Every error case of the API in OpenAI's error JSON with the right status, the API key, and the
server's lifecycle: a client that disconnects mid-stream has its request cancelled and its KV
blocks returned (read from /metrics); SIGTERM finishes in-flight streams and exits 0."""
import json
import signal
import socket
import threading
import time

import openai
import pytest

from server_harness import Server

MSGS = [{"role": "user", "content": "Hello!"}]


def error_of(resp):
    status, headers, body = resp
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert headers["content-type"].startswith("application/json")
    return status, e


def post(server, path, body, **kw):
    return server.request("POST", path, body, **kw)


def test_malformed_json(server):
    status, e = error_of(post(server, "/v1/chat/completions", '{"model": "x", "messages": ['))
    assert status == 400 and e["type"] == "invalid_request_error"
    assert "parse" in e["message"]
    status, e = error_of(post(server, "/v1/completions", "[1, 2]"))
    assert status == 400


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("max_tokens", 1.5), ("n", "2"), ("stream", "yes"), ("top_p", [1]),
    ("seed", 1.25), ("stop", 5), ("logprobs", 2), ("messages", "hi"), ("top_k", 0.5),
    ("presence_penalty", {}), ("user", 7), ("logit_bias", [[5, 1]]), ("logit_bias", {"5": "up"}),
    ("min_tokens", "3")])
def test_wrong_types_name_the_parameter(server, field, value):
    body = {"model": server.model, "messages": MSGS, "max_tokens": 2, field: value}
    status, e = error_of(post(server, "/v1/chat/completions", body))
    assert status == 400, e
    assert e["param"] == field and field in e["message"]


@pytest.mark.parametrize("field,value", [
    ("temperature", 2.5), ("temperature", -0.1), ("top_p", 0), ("top_p", 1.5), ("max_tokens", 0),
    ("max_tokens", -3), ("n", 0), ("n", 1000), ("presence_penalty", 3), ("frequency_penalty", -2.5),
    ("top_logprobs", 21), ("min_p", 1.5), ("repetition_penalty", 0), ("top_k", -5),
    ("logit_bias", {"5": 100.5}), ("logit_bias", {"5": -101}), ("logit_bias", {"five": 1}),
    ("logit_bias", {"-5": 1}), ("logit_bias", {"999999999": 1}), ("logit_bias", {"7": 1, "07": 2}),
    ("logit_bias", {str(i): 1 for i in range(1025)}), ("min_tokens", -1), ("min_tokens", 3),
    ("stop", "x" * 1025), ("stop", ["ok", "x" * 1025]), ("stop", [str(i) for i in range(17)]),
    ("stop_token_ids", list(range(1025))),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
    ("response_format", {"type": "yaml"}), ("response_format", "json_object")])
def test_out_of_range_values_name_the_parameter(server, field, value):
    body = {"model": server.model, "messages": MSGS, "max_tokens": 2, "logprobs": True, field: value}
    status, e = error_of(post(server, "/v1/chat/completions", body))
    assert status == 400, e
    assert e["param"] == field and field in e["message"]


def test_bad_messages_and_prompts(server):
    for body, param in [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages[0].content[0].type"),
    ]:
        status, e = error_of(post(server, "/v1/chat/completions", {"model": server.model, **body}))
        assert status == 400 and e["param"] == param, e
    for prompt in [[], [-1], [10 ** 9], [[1, 2], "x", 3], {"a": 1}]:
        status, e = error_of(post(server, "/v1/completions", {"model": server.model, "prompt": prompt}))
        assert status == 400 and e["param"] == "prompt", e
    status, e = error_of(post(server, "/v1/completions", {"model": server.model}))
    assert status == 400 and e["param"] == "prompt"
    status, e = error_of(post(server, "/v1/chat/completions", {
        "model": server.model, "messages": MSGS, "stream_options": {"include_usage": True}}))
    assert status == 400 and e["param"] == "stream_options"


def test_context_length_exceeded_names_both_numbers(server):
    limit = json.loads(server.request("GET", "/v1/models")[2])["data"][0]["max_model_len"]
    status, e = error_of(post(server, "/v1/completions", {
        "model": server.model, "prompt": [100] * 10, "max_tokens": limit}))
    assert status == 400 and e["code"] == "context_length_exceeded"
    assert str(limit) in e["message"] and str(limit + 10) in e["message"]
    assert "10 in the prompt" in e["message"] and f"{limit} in the completion" in e["message"]
    # The client sees the same as a BadRequestError.
    with pytest.raises(openai.BadRequestError) as ex:
        server.client().completions.create(model=server.model, prompt=[100] * (limit + 1))
    assert ex.value.status_code == 400


def test_unknown_model_is_404(server):
    status, e = error_of(post(server, "/v1/chat/completions", {"model": "gpt-17", "messages": MSGS}))
    assert status == 404 and e["code"] == "model_not_found" and "gpt-17" in e["message"]
    with pytest.raises(openai.NotFoundError):
        server.client().completions.create(model="nope", prompt="x", max_tokens=1)
    assert server.request("GET", "/v1/models/nope")[0] == 404


def test_unknown_route_and_method(server):
    assert error_of(server.request("GET", "/v1/nothing"))[0] == 404
    status, headers, _ = server.request("GET", "/v1/chat/completions")
    assert status == 405 and headers["allow"] == "POST"
    status, headers, _ = server.request("POST", "/health", {})
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_head_is_get_without_the_body(server):
    for path in ("/health", "/v1/models", "/metrics"):
        sock = socket.create_connection((server.host, server.port))
        auth = f"Authorization: Bearer {server.api_key}\r\n" if server.api_key else ""
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode())
        data = _read_until_closed(sock)
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), data[:200]
        assert body == b"", (path, body[:100])
        length = int([h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0])
        if path != "/metrics":  # (metrics change between the two requests)
            status, _, get_body = server.request("GET", path)
            assert status == 200 and length == len(get_body), (path, length, len(get_body))
        else:
            assert length > 0


def test_body_too_large_is_413():
    s = Server("--max-body-bytes", "4096", stub=True)
    try:
        status, e = error_of(s.request("POST", "/v1/completions", {"prompt": "x" * 10000}))
        assert status == 413 and "4096" in e["message"]
        # the server still serves
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0


def test_queue_full_is_429_or_503():
    s = Server("--max-num-seqs", "1", "--max-queue", "1", "--stub-step-ms", "20", stub=True)
    try:
        results = []

        def one():
            results.append(s.request("POST", "/v1/completions", {
                "prompt": "hi", "max_tokens": 50, "ignore_eos": True})[:3:2])

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(st for st, _ in results)
        assert codes.count(200) >= 1 and any(c in (429, 503) for c in codes), codes
        for st, body in results:
            if st != 200:
                e = json.loads(body)["error"]
                assert e["type"] in ("rate_limit_error", "service_unavailable")
        with pytest.raises((openai.RateLimitError, openai.InternalServerError)):
            c = s.client()
            with c.completions.create(model=s.model, prompt="a", max_tokens=60, stream=True,
                                      extra_body={"ignore_eos": True}):
                with c.completions.create(model=s.model, prompt="b", max_tokens=60, stream=True,
                                          extra_body={"ignore_eos": True}):
                    c.completions.create(model=s.model, prompt="c", max_tokens=60)
    finally:
        assert s.stop() == 0


def test_api_key():
    s = Server(api_key="sekrit-123", stub=True)
    try:
        ok = s.client().chat.completions.create(model=s.model, messages=MSGS, max_tokens=2)
        assert ok.choices
        for headers in [{"Authorization": ""}, {"Authorization": "Bearer wrong"},
                        {"Authorization": "Bearer sekrit-12"}, {"Authorization": "Basic sekrit-123"}]:
            status, e = error_of(s.request("POST", "/v1/chat/completions",
                                           {"messages": MSGS}, headers=headers))
            assert status == 401, headers
        with pytest.raises(openai.AuthenticationError):
            s.client(api_key="bad").models.list()
        assert s.request("GET", "/health", headers={"Authorization": ""})[0] == 200
    finally:
        assert s.stop() == 0


def _open_stream(server, max_tokens, prompt="Tell me a long story."):
    sock = socket.create_connection((server.host, server.port))
    body = json.dumps({"model": server.model, "prompt": prompt, "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    auth = f"Authorization: Bearer {server.api_key}\r\n" if server.api_key else ""
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                 auth.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def test_disconnect_mid_stream_cancels_and_returns_blocks(server):
    base = server.wait_metrics(lambda m: m["ridge_kv_blocks_used"] == 0 and m["ridge_requests_running"] == 0)
    assert base["ridge_kv_blocks_used"] == 0
    sock = _open_stream(server, max_tokens=2000, prompt="Tell me a very long story. " * 20)
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(65536)
    during = server.metrics()
    assert during["ridge_requests_running"] >= 1 and during["ridge_kv_blocks_used"] > 0
    sock.close()
    t0 = time.time()
    after = server.wait_metrics(lambda m: m["ridge_kv_blocks_used"] == 0 and m["ridge_requests_running"] == 0, 10)
    assert after["ridge_kv_blocks_used"] == 0 and after["ridge_requests_running"] == 0, after
    assert time.time() - t0 < 5
    assert after["ridge_http_disconnect_cancels_total"] >= base["ridge_http_disconnect_cancels_total"] + 1
    # far fewer than 2000 tokens were made
    assert after["ridge_generation_tokens_total"] - base["ridge_generation_tokens_total"] < 1000


def test_openai_client_closing_a_stream_cancels(server):
    base = server.metrics()
    stream = server.client().completions.create(model=server.model, prompt="Count slowly:",
                                                max_tokens=2000, stream=True,
                                                extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    after = server.wait_metrics(lambda m: m["ridge_kv_blocks_used"] == 0 and m["ridge_requests_running"] == 0, 10)
    assert after["ridge_kv_blocks_used"] == 0
    assert after["ridge_http_disconnect_cancels_total"] >= base["ridge_http_disconnect_cancels_total"] + 1


def test_sigterm_finishes_in_flight_streams_and_exits_0():
    s = Server(stub=None) if False else Server()
    try:
        results = {}

        def run():
            chunks = list(s.client().completions.create(
                model=s.model, prompt="Tell me a story.", max_tokens=24, stream=True,
                extra_body={"ignore_eos": True}))
            results["text"] = "".join(c.choices[0].text for c in chunks)
            results["finish"] = chunks[-1].choices[0].finish_reason

        t = threading.Thread(target=run)
        t.start()
        s.wait_metrics(lambda m: m["ridge_requests_running"] >= 1 or m["ridge_generation_tokens_total"] > 0, 60)
        s.proc.send_signal(signal.SIGTERM)
        t.join(120)
        assert results.get("finish") == "length", results
        assert s.proc.wait(60) == 0
        with pytest.raises(OSError):
            socket.create_connection((s.host, s.port), timeout=2)
    finally:
        s.stop()


def test_second_signal_cancels_at_once():
    s = Server("--stub-step-ms", "50", stub=True)
    sock = _open_stream(s, max_tokens=3000)
    sock.recv(4096)
    s.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    assert s.proc.wait(30) == 0
    # The harness gives a 20 s grace period (--shutdown-timeout 20) and the stream would run for
    # 150 s: only a second signal that cancels at once exits within a few seconds.
    assert time.monotonic() - t0 < 15, "the second signal did not cancel the requests at once"
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    assert data.rstrip().endswith(b"0") or b"[DONE]" in data


def test_http10_stream_ends_with_the_connection(server):
    sock = socket.create_connection((server.host, server.port))
    body = json.dumps({"model": server.model, "prompt": "Hi", "max_tokens": 3, "stream": True}).encode()
    auth = f"Authorization: Bearer {server.api_key}\r\n" if server.api_key else ""
    sock.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n" +
                 auth.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert payload.endswith(b"data: [DONE]\n\n")


def test_numbers_past_a_double_are_400(server):
    for body in ('{"prompt": "hi", "max_tokens": 1e400}', '{"prompt": "hi", "temperature": -1E+999}',
                 '{"prompt": "hi", "max_tokens": 2, "unknown_field": 1e999}'):
        status, e = error_of(post(server, "/v1/completions", body))
        assert status == 400 and e["type"] == "invalid_request_error", (body, e)
        assert "overflow" in e["message"], e


def _read_until_closed(sock, timeout=10):
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_transfer_encoding_not_chunked_is_refused_and_closes(server):
    # Otherwise the body's bytes would be read as a request of their own (request smuggling).
    sock = socket.create_connection((server.host, server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"
                 b"GET /v2/smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
    data = _read_until_closed(sock)
    sock.close()
    assert data.startswith(b"HTTP/1.1 400"), data[:200]
    assert b"Transfer-Encoding" in data
    assert data.count(b"HTTP/1.1 ") == 1, data  # nothing after it was taken as a request
    assert server.request("GET", "/health")[0] == 200


def test_more_choices_than_the_queue_is_400_naming_n():
    s = Server("--max-queue", "4", stub=True)
    try:
        status, e = error_of(s.request("POST", "/v1/completions",
                                       {"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 1}))
        assert status == 400 and e["param"] == "n", e
        assert "6 choices" in e["message"] and "4" in e["message"], e
        m = s.metrics()  # nothing was queued
        assert m["ridge_requests_waiting"] == 0 and m["ridge_requests_running"] == 0, m
        # a request that fits is served
        assert s.request("POST", "/v1/completions", {"prompt": "a", "n": 4, "max_tokens": 1})[0] == 200
    finally:
        assert s.stop() == 0


def _peak_rss_kb(s):
    with open(f"/proc/{s.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_choices_past_the_queue_are_refused_before_any_is_made():
    # 4,096 one-token prompts x n = 128: 524,288 choices, each with its decoder and stop matcher
    # (hundreds of MB, and a request of a few MB could ask for ~268M of them). Refused, naming the
    # numbers, before one is built: the server's peak memory does not move.
    s = Server(stub=True)  # --max-queue 4096
    try:
        before = _peak_rss_kb(s)
        status, e = error_of(s.request("POST", "/v1/completions",
                                       {"prompt": [[0]] * 4096, "n": 128, "max_tokens": 1}))
        assert status == 400 and e["param"] == "n", e
        assert "524288 choices (4096 prompts × n = 128)" in e["message"], e
        assert "(4096, --max-queue)" in e["message"], e
        grown_mb = (_peak_rss_kb(s) - before) / 1024
        assert grown_mb < 64, f"peak RSS grew {grown_mb:.0f} MB"
        # More prompts than the server queues (--max-queue): refused naming `prompt`, while
        # parsing.
        status, e = error_of(s.request("POST", "/v1/completions",
                                       {"prompt": [[0]] * 4097, "max_tokens": 1}))
        assert status == 400 and e["param"] == "prompt", e
        assert "4097 prompts, at most 4096 in one request (the server's --max-queue)" \
            in e["message"], e
        m = s.metrics()  # nothing was queued
        assert m["ridge_requests_waiting"] == 0 and m["ridge_requests_running"] == 0, m
        assert s.request("POST", "/v1/completions",
                         {"prompt": [[0]] * 32, "n": 128, "max_tokens": 1})[0] == 200
    finally:
        assert s.stop() == 0


def test_a_stream_the_client_stops_reading_is_cancelled():
    # 8 choices x 2000 tokens with logprobs take ~10 s; the client reads nothing, so once the
    # socket buffers (a few MB) and --max-pending-bytes are full the server cancels the request
    # instead of buffering the rest.
    s = Server("--max-pending-bytes", "65536", "--stub-step-ms", "5", stub=True)
    try:
        base = s.metrics()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((s.host, s.port))
        body = json.dumps({"prompt": "hi", "n": 8, "max_tokens": 2000, "ignore_eos": True,
                           "stream": True, "logprobs": 5}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        during = s.wait_metrics(lambda m: m["ridge_requests_running"] >= 1, 30)
        assert during["ridge_requests_running"] >= 1, during
        after = s.wait_metrics(lambda m: m["ridge_requests_running"] == 0, 60)
        made = after["ridge_generation_tokens_total"] - base["ridge_generation_tokens_total"]
        assert after["ridge_requests_running"] == 0 and after["ridge_kv_blocks_used"] == 0, after
        assert made < 8 * 2000 * 0.8, f"{made} tokens: the request ran on for a client not reading"
        assert any("not reading" in line for line in s.stderr_lines), s.stderr_lines[-5:]
        sock.close()
    finally:
        assert s.stop() == 0


def test_expect_100_continue_is_answered(server):
    # curl sends it for bodies past 1 MB and waits ~1 s for the 100 before sending anyway.
    body = json.dumps({"model": server.model, "prompt": "Hi", "max_tokens": 2}).encode()
    auth = f"Authorization: Bearer {server.api_key}\r\n" if server.api_key else ""
    sock = socket.create_connection((server.host, server.port))
    sock.settimeout(5)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                 auth.encode() + b"Expect: 100-continue\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body))
    first = sock.recv(4096)  # (without the 100, this times out)
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
    sock.sendall(body)
    rest = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):] + _read_until_closed(sock)
    sock.close()
    assert rest.startswith(b"HTTP/1.1 200"), rest[:200]
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["choices"]


def test_expect_100_continue_refused_on_its_headers_gets_no_100(server):
    # No such route, a GET route, or (with --api-key) a wrong key: the refusal is the answer, the
    # body is never asked for, and the connection closes after it.
    cases = [("/v1/nothing", 404), ("/health", 405)]
    if server.api_key:
        cases.append(("/v1/completions", 401))
    for path, status in cases:
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                     "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                     "Content-Length: 5000000\r\n\r\n".encode())
        data = _read_until_closed(sock)
        sock.close()
        assert data.startswith(f"HTTP/1.1 {status}".encode()), (path, data[:200])
        assert b"100 Continue" not in data
