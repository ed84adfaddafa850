"""ridge serve through the official openai client (and raw HTTP where the client hides the
wire): chat and completions, streaming and not, n > 1, stop strings, seeds, logprobs, usage,
equal outputs with the prefix cache on and off and alone vs in a concurrent batch."""
import concurrent.futures as cf
import json

import pytest

from server_harness import Server, sse_events

CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write one sentence about the sea."}]


def chat(server, **kw):
    kw.setdefault("model", server.model)
    kw.setdefault("messages", CHAT)
    return server.client().chat.completions.create(**kw)


def test_health_and_models(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.model]
    m = models.data[0]
    assert m.object == "model" and m.owned_by == "ridge" and isinstance(m.created, int)
    assert server.client().models.retrieve(server.model).id == server.model


def test_chat_completion_schema(server):
    r = chat(server, temperature=0, max_tokens=12)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == server.model
    assert isinstance(r.created, int) and r.system_fingerprint
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert c.logprobs is None
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0


def test_chat_stream_equals_non_stream_and_reports_usage(server):
    full = chat(server, temperature=0, max_tokens=16)
    stream = chat(server, temperature=0, max_tokens=16, stream=True,
                  stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert all(c.id == chunks[0].id and c.object == "chat.completion.chunk" for c in chunks)


def test_stream_wire_format_ends_with_done(server):
    status, headers, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model, "messages": CHAT, "max_tokens": 5, "stream": True})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    assert all(isinstance(e, dict) and "usage" not in e for e in events[:-1])


def test_completions_stream_and_not(server):
    cl = server.client()
    prompt = "The capital of France is"
    full = cl.completions.create(model=server.model, prompt=prompt, temperature=0, max_tokens=10)
    assert full.object == "text_completion" and full.id.startswith("cmpl-")
    assert full.choices[0].text and full.choices[0].finish_reason in ("stop", "length")
    chunks = list(cl.completions.create(model=server.model, prompt=prompt, temperature=0,
                                        max_tokens=10, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason


def test_completions_default_max_tokens_is_16(server):
    r = server.client().completions.create(model=server.model, prompt="Once upon a time",
                                           temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_prompt_forms_token_ids_and_lists(server):
    cl = server.client()
    ids = [504, 3575, 282, 4649, 314]  # any ids in the vocabulary
    a = cl.completions.create(model=server.model, prompt=ids, temperature=0, max_tokens=6)
    b = cl.completions.create(model=server.model, prompt=[ids, ids[:3]], temperature=0, max_tokens=6)
    c = cl.completions.create(model=server.model, prompt=["Hello", "Goodbye"], temperature=0,
                              max_tokens=4, n=2)
    assert a.usage.prompt_tokens == 5
    assert [ch.index for ch in b.choices] == [0, 1]
    assert b.choices[0].text == a.choices[0].text
    assert b.usage.prompt_tokens == 8
    assert [ch.index for ch in c.choices] == [0, 1, 2, 3]


def test_n_choices_streaming_and_not(server):
    r = chat(server, n=3, temperature=1.0, seed=5, max_tokens=8)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == sum(
        1 for _ in range(0)) or r.usage.completion_tokens >= 3
    chunks = list(chat(server, n=2, temperature=1.0, seed=5, max_tokens=8, stream=True))
    texts, finished = {0: "", 1: ""}, set()
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    # The same seed gives the same first two choices, streamed or not.
    assert texts[0] == r.choices[0].message.content and texts[1] == r.choices[1].message.content


def test_seed_reproduces(server):
    kw = dict(temperature=1.0, top_p=1.0, max_tokens=16, extra_body={"ignore_eos": True})
    a = chat(server, seed=1234, **kw).choices[0].message.content
    b = chat(server, seed=1234, **kw).choices[0].message.content
    c = chat(server, seed=4321, **kw).choices[0].message.content
    assert a == b
    assert a != c


def _tokens(server, **kw):
    r = chat(server, temperature=0, logprobs=True, **kw)
    return r, [t.token for t in r.choices[0].logprobs.content]


def test_stop_strings_across_token_boundaries_never_emitted(server):
    r, toks = _tokens(server, max_tokens=24, extra_body={"ignore_eos": True})
    text = r.choices[0].message.content
    # A stop string made of the end of one token and the start of the next.
    k = next(i for i in range(2, len(toks) - 1) if len(toks[i]) >= 2 and len(toks[i + 1]) >= 2
             and (toks[i] + toks[i + 1]).isascii())
    stop = toks[k][-2:] + toks[k + 1][:2]
    cut = text.index(stop)
    for stream in (False, True):
        kw = dict(temperature=0, max_tokens=24, stop=[stop, "zzzzqqq"], extra_body={"ignore_eos": True})
        if stream:
            chunks = list(chat(server, stream=True, **kw))
            got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            assert reason == ["stop"]
        else:
            rr = chat(server, **kw)
            got, reason = rr.choices[0].message.content, rr.choices[0].finish_reason
            assert reason == "stop"
        assert got == text[:cut], (stream, stop, got, text)
        assert stop not in got


def test_stop_string_in_completions_stream(server):
    cl = server.client()
    base = cl.completions.create(model=server.model, prompt="1, 2, 3, 4,", temperature=0,
                                 max_tokens=20, extra_body={"ignore_eos": True}).choices[0].text
    stop = base[len(base) // 2: len(base) // 2 + 3]
    want = base[:base.index(stop)]
    chunks = list(cl.completions.create(model=server.model, prompt="1, 2, 3, 4,", temperature=0,
                                        max_tokens=20, stop=stop, stream=True,
                                        extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_logprobs(server):
    r = chat(server, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for t in content:
        assert t.logprob <= 0 and isinstance(t.token, str) and isinstance(t.bytes, list)
        assert len(t.top_logprobs) == 3
        lps = [a.logprob for a in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert t.top_logprobs[0].token == t.token  # greedy picks the most likely
    chunks = list(chat(server, temperature=0, max_tokens=8, logprobs=True, top_logprobs=2, stream=True))
    streamed = [t.token for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert streamed == [t.token for t in content]


def test_completion_logprobs(server):
    r = server.client().completions.create(model=server.model, prompt="The sky is", temperature=0,
                                           max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    n = len(lp.tokens)
    assert n >= 1 and len(lp.token_logprobs) == n and len(lp.top_logprobs) == n == len(lp.text_offset)
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)


def test_sampling_parameters_accepted(server):
    r = chat(server, max_tokens=6, temperature=0.7, top_p=0.9, seed=3, presence_penalty=0.5,
             frequency_penalty=0.5, user="tester",
             extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    assert r.choices[0].finish_reason in ("stop", "length")
    r = chat(server, max_completion_tokens=3, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


def test_content_parts(server):
    parts = [{"role": "user", "content": [{"type": "text", "text": "Write one sentence"},
                                          {"type": "text", "text": "about the sea."}]}]
    r = chat(server, messages=parts, temperature=0, max_tokens=4)
    assert r.choices[0].message.content


def test_alone_equals_in_a_concurrent_batch(server):
    kw = dict(temperature=0, max_tokens=16, extra_body={"ignore_eos": True})
    alone = chat(server, **kw).choices[0].message.content
    others = [[{"role": "user", "content": f"Tell me about the number {i}."}] for i in range(7)]

    def run(msgs):
        return chat(server, messages=msgs, **kw).choices[0].message.content

    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(run, CHAT)] + [ex.submit(run, m) for m in others]
        batched = futs[0].result()
        for f in futs[1:]:
            f.result()
    assert batched == alone


def test_prefix_cache_on_and_off_give_equal_outputs(server):
    kw = dict(temperature=0, max_tokens=16, extra_body={"ignore_eos": True})
    long_system = [{"role": "system", "content": "You are a careful assistant. " * 12}] + CHAT[1:]
    first = chat(server, messages=long_system, **kw)
    second = chat(server, messages=long_system, **kw)  # served from the prefix cache
    off = Server("--no-prefix-cache", stub=server.stub)
    try:
        third = chat(off, messages=long_system, model=off.model, **kw)
    finally:
        assert off.stop() == 0
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.choices[0].message.content == third.choices[0].message.content
    if not server.stub:
        assert second.usage.prompt_tokens_details.cached_tokens > 0
        assert third.usage.prompt_tokens_details.cached_tokens == 0


def test_metrics_exposition(server):
    chat(server, temperature=0, max_tokens=2)
    m = server.metrics()
    for name in ["ridge_requests_running", "ridge_requests_waiting", "ridge_kv_blocks_used",
                 "ridge_kv_blocks_free", "ridge_prefix_cache_hit_rate", "ridge_prompt_tokens_total",
                 "ridge_generation_tokens_total", "ridge_time_to_first_token_seconds_count",
                 "ridge_time_per_output_token_seconds_count", "ridge_e2e_request_latency_seconds_count",
                 'ridge_http_responses_total{code="200"}']:
        assert name in m, name
    assert m["ridge_generation_tokens_total"] > 0
    assert m['ridge_e2e_request_latency_seconds_bucket{le="+Inf"}'] == m["ridge_e2e_request_latency_seconds_count"]
