"""ridge serve through the official openai client (and raw HTTP where the client hides the
wire): chat and completions, streaming and not, n > 1, stop strings, seeds, logprobs, usage,
logit_bias and min_tokens (token ids from HF transformers' reading of the model's tokenizer),
equal outputs with the prefix cache on and off and alone vs in a concurrent batch."""
import concurrent.futures as cf
import json

import pytest

from server_harness import DEFAULT_MODEL, Server, sse_events

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
    r = chat(server, n=3, temperature=1.0, seed=5, max_tokens=8, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 3 * 8  # the usage counts every choice's tokens
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
    # Up to 2 alternatives (tokens whose text is equal share one key), never none; greedy chose
    # the best of them, so its logprob is the chosen token's.
    for i, t in enumerate(lp.top_logprobs):
        assert 1 <= len(t) <= 2, (i, t)
        assert max(t.values()) == pytest.approx(lp.token_logprobs[i], abs=1e-6), (i, t, lp.tokens[i])
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
    r = chat(server, messages=parts, temperature=0, max_tokens=4, extra_body={"ignore_eos": True})
    # Text parts are joined with newlines (docs/SERVING.md): the same prompt and the same greedy
    # reply as the joined string.
    joined = [{"role": "user", "content": "Write one sentence\nabout the sea."}]
    ref = chat(server, messages=joined, temperature=0, max_tokens=4, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == ref.usage.prompt_tokens
    assert r.choices[0].message.content == ref.choices[0].message.content


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


@pytest.fixture(scope="module")
def hf_tok(server):
    """The default model's tokenizer as HF transformers reads it from the GGUF file."""
    if server.stub:
        pytest.skip("the stub engine has no model")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    return transformers.AutoTokenizer.from_pretrained(str(DEFAULT_MODEL.parent),
                                                      gguf_file=DEFAULT_MODEL.name)


def _complete(server, **kw):
    kw.setdefault("model", server.model)
    kw.setdefault("temperature", 0)
    extra = kw.pop("extra_body", {})
    extra.setdefault("ignore_eos", True)
    return server.client().completions.create(extra_body=extra, **kw).choices[0]


def _single_token_id(hf_tok, text):
    ids = hf_tok.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def test_logit_bias_steers_greedy_decoding(server, hf_tok):
    import random
    rng = random.Random()
    prompt = "The capital of France is"
    free = _complete(server, prompt=prompt, max_tokens=1, logprobs=5)
    top = free.logprobs.top_logprobs[0]  # raw logprobs, best first
    ranked = sorted(top.items(), key=lambda kv: -kv[1])
    # +100 on an ordinary token: greedy decoding repeats it; the logprobs reported stay raw.
    while True:
        t = rng.randrange(300, len(hf_tok))
        piece = hf_tok.decode([t])
        if piece.isascii() and piece.strip().isalnum() and hf_tok.decode([t] * 4) == piece * 4:
            break
    got = _complete(server, prompt=prompt, max_tokens=4, logprobs=1, logit_bias={str(t): 100})
    assert got.text == piece * 4, (t, piece, got.text)
    assert got.logprobs.tokens == [piece] * 4
    assert got.logprobs.token_logprobs[0] < -1.0  # raw: an unlikely token, however biased
    # -100 on the greedy token: the raw ranking's second token comes first, with its raw logprob.
    first_id = _single_token_id(hf_tok, ranked[0][0])
    if first_id is None:
        pytest.skip(f"the greedy token {ranked[0][0]!r} does not encode to one id")
    second = _complete(server, prompt=prompt, max_tokens=1, logprobs=1,
                       logit_bias={str(first_id): -100})
    assert second.logprobs.tokens[0] == ranked[1][0]
    assert second.logprobs.token_logprobs[0] == pytest.approx(ranked[1][1], abs=1e-4)


def test_min_tokens_holds_back_stop_tokens_and_strings(server, hf_tok):
    prompt = "1, 2, 3, 4,"
    free = _complete(server, prompt=prompt, max_tokens=12, logprobs=2)
    toks, text = free.logprobs.tokens, free.text
    first_id = _single_token_id(hf_tok, toks[0])
    if first_id is None:
        pytest.skip(f"the greedy token {toks[0]!r} does not encode to one id")
    # Without min_tokens the first token stops the completion at once (a stop token is no text).
    stopped = _complete(server, prompt=prompt, max_tokens=12,
                        extra_body={"stop_token_ids": [first_id]})
    assert stopped.text == "" and stopped.finish_reason == "stop"
    # With it, the stop token cannot come for 5 tokens: the raw second choice comes first.
    r = server.client().completions.create(
        model=server.model, prompt=prompt, temperature=0, max_tokens=12, logprobs=2,
        extra_body={"ignore_eos": True, "stop_token_ids": [first_id], "min_tokens": 5})
    held = r.choices[0]
    assert r.usage.completion_tokens >= 5
    second = sorted(free.logprobs.top_logprobs[0].items(), key=lambda kv: -kv[1])[1][0]
    assert held.logprobs.tokens[0] == second
    assert toks[0] not in held.logprobs.tokens[:5]
    # Stop strings are matched only in the text after the first min_tokens tokens.
    stop = next((p.strip() for p in toks[1:4] if p.strip()), None)
    if stop is None:
        pytest.skip("no visible text in tokens 1-3")
    for m in (0, 2, 6):
        got = _complete(server, prompt=prompt, max_tokens=12, stop=[stop],
                        extra_body={"min_tokens": m})
        head = "".join(toks[:m])
        rest = text[len(head):]
        want = head + rest[:rest.index(stop)] if stop in rest else text
        assert got.text == want, (m, stop, got.text, text)
        assert got.finish_reason == ("stop" if stop in rest else "length")


@pytest.fixture(scope="module")
def hf_model(server):
    """The default model in HF transformers (fp32, dequantized from the GGUF file)."""
    if server.stub:
        pytest.skip("the stub engine has no model")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = transformers.AutoModelForCausalLM.from_pretrained(
        str(DEFAULT_MODEL.parent), gguf_file=DEFAULT_MODEL.name, dtype=torch.float32)
    m.eval()
    return m


def test_echo_returns_the_prompt_and_its_logprobs_as_transformers_scores_them(server, hf_model):
    """Completions with echo (lm-evaluation-harness's loglikelihood request): the prompt's text
    first, its tokens' logprobs (the first null) within fp32 tolerance of HF's teacher-forced pass,
    then the completion's; streamed and not; prompts as text and as token ids."""
    import torch
    cl = server.client()
    text = "The quick brown fox jumps over the lazy dog because"
    plain = cl.completions.create(model=server.model, prompt=text, temperature=0, max_tokens=3,
                                  logprobs=2, extra_body={"ignore_eos": True}).choices[0]
    r = cl.completions.create(model=server.model, prompt=text, temperature=0, max_tokens=3,
                              logprobs=2, echo=True, extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.text == text + plain.text
    lp = c.logprobs
    n = r.usage.prompt_tokens
    assert len(lp.tokens) == n + 3 == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens[:n]) == text
    assert lp.text_offset[:n] == [len("".join(lp.tokens[:j])) for j in range(n)]
    assert lp.tokens[n:] == plain.logprobs.tokens
    assert lp.token_logprobs[n:] == pytest.approx(plain.logprobs.token_logprobs, abs=1e-5)
    assert lp.text_offset[n:] == [len(text) + o for o in plain.logprobs.text_offset]
    # The prompt's logprobs as HF computes them over the same ids.
    ids = _prompt_ids(server, text)
    with torch.no_grad():
        ref = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0].double(), dim=-1)
    for j in range(1, n):
        assert lp.token_logprobs[j] == pytest.approx(ref[j - 1, ids[j]].item(), abs=5e-4), j
        assert len(lp.top_logprobs[j]) <= 2
        best = max(lp.top_logprobs[j].values())
        assert best == pytest.approx(ref[j - 1].max().item(), abs=5e-4)
    # The same prompt as token ids, streamed: the same text and logprobs.
    chunks = list(cl.completions.create(model=server.model, prompt=ids, temperature=0, max_tokens=3,
                                        logprobs=2, echo=True, stream=True,
                                        extra_body={"ignore_eos": True}))
    assert "".join(ch.choices[0].text for ch in chunks) == c.text
    streamed = [x for ch in chunks if ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
    assert streamed[0] is None
    assert streamed[1:] == pytest.approx(lp.token_logprobs[1:], abs=1e-5)
    # Echo without logprobs: the text alone.
    e = cl.completions.create(model=server.model, prompt=text, temperature=0, max_tokens=3, echo=True,
                              extra_body={"ignore_eos": True}).choices[0]
    assert e.text == c.text and e.logprobs is None


def _prompt_ids(server, text):
    """The prompt's token ids as ridge encodes them (usage and a token-id prompt must agree)."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL.parent), gguf_file=DEFAULT_MODEL.name)
    ids = hf.encode(text, add_special_tokens=False)
    r = server.client().completions.create(model=server.model, prompt=text, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == len(ids), (r.usage.prompt_tokens, ids)
    return ids


def test_json_mode_gives_a_json_object(server):
    """response_format json_object: the content parses as a JSON object whenever it finishes
    with "stop" (greedy and seeded draws, chat and completions, streamed and not)."""
    if server.stub:
        pytest.skip("the stub engine has no model")
    msgs = [{"role": "user", "content": "Give me a JSON object describing a dog with a name and an age."}]
    stopped = 0
    for seed in (None, 1, 2, 3):
        kw = dict(messages=msgs, max_tokens=200, response_format={"type": "json_object"})
        kw.update(temperature=0) if seed is None else kw.update(temperature=0.8, seed=seed)
        r = chat(server, **kw)
        content, reason = r.choices[0].message.content, r.choices[0].finish_reason
        if reason == "stop":
            stopped += 1
            assert isinstance(json.loads(content), dict), content
        else:
            assert reason == "length"
            assert content.lstrip().startswith("{"), content
    assert stopped > 0
    chunks = list(chat(server, messages=msgs, max_tokens=200, temperature=0, stream=True,
                       response_format={"type": "json_object"}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == chat(server, messages=msgs, max_tokens=200, temperature=0,
                            response_format={"type": "json_object"}).choices[0].message.content
    # The client's completions.create has no response_format argument: raw HTTP.
    status, _, body = server.request("POST", "/v1/completions", {
        "model": server.model, "prompt": "A JSON object:", "max_tokens": 120, "temperature": 0,
        "response_format": {"type": "json_object"}})
    assert status == 200
    choice = json.loads(body)["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["text"]), dict), choice["text"]
    else:
        assert choice["text"].lstrip().startswith("{")


def test_vllm_prompt_logprobs_ranks_and_values(server, hf_model):
    """vLLM's prompt_logprobs: [null, {"id": {logprob, rank, decoded_token}}, ...] for each prompt
    token, the values echo reports, ranks as HF's logits order them (up to near-ties), the top-k
    alternatives ranked 1..k; for chat once per response; with stream a 400."""
    import torch
    text = "The capital of France is Paris, and the capital of Italy is"
    ids = _prompt_ids(server, text)
    status, _, body = server.request("POST", "/v1/completions", {
        "model": server.model, "prompt": ids, "max_tokens": 1, "temperature": 0,
        "prompt_logprobs": 3, "echo": True, "logprobs": 1})
    assert status == 200, body
    choice = json.loads(body)["choices"][0]
    plp = choice["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    echo = choice["logprobs"]["token_logprobs"]
    with torch.no_grad():
        ref = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0].double(), dim=-1)
    for j in range(1, len(ids)):
        d = plp[j]
        mine = d[str(ids[j])]
        assert mine["logprob"] == pytest.approx(echo[j], abs=1e-6)
        assert mine["decoded_token"] and isinstance(mine["rank"], int)
        row = ref[j - 1]
        above_sure = int((row > mine["logprob"] + 1e-3).sum())
        above_maybe = int((row > mine["logprob"] - 1e-3).sum())
        assert above_sure <= mine["rank"] - 1 <= above_maybe, (j, mine, above_sure, above_maybe)
        others = sorted((v for k, v in d.items() if k != str(ids[j])), key=lambda v: v["rank"])
        assert 3 - 1 <= len(others) <= 3
        ranks = [v["rank"] for v in others]
        assert ranks == sorted(ranks) and all(1 <= r <= 3 for r in ranks)
        for v in others:  # ranks order the logprobs
            if v["rank"] < mine["rank"]:
                assert v["logprob"] >= mine["logprob"] - 1e-6, (j, v, mine)
            else:
                assert v["logprob"] <= mine["logprob"] + 1e-6, (j, v, mine)
    # Chat: once, at the response's level; streaming refuses it.
    status, _, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model, "messages": CHAT, "max_tokens": 2, "prompt_logprobs": 1})
    assert status == 200, body
    r = json.loads(body)
    assert r["prompt_logprobs"][0] is None and len(r["prompt_logprobs"]) == r["usage"]["prompt_tokens"]
    status, _, body = server.request("POST", "/v1/completions", {
        "model": server.model, "prompt": "a", "prompt_logprobs": 1, "stream": True})
    assert status == 400 and json.loads(body)["error"]["param"] == "prompt_logprobs"


PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "hobbies": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "pet": {"anyOf": [{"$ref": "#/$defs/pet"}, {"type": "null"}]},
    },
    "required": ["name", "age", "mood", "hobbies"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "object",
                      "properties": {"kind": {"type": "string"}, "legs": {"type": "integer"}},
                      "required": ["kind", "legs"], "additionalProperties": False}},
}


def test_json_schema_outputs_validate(server):
    """response_format json_schema: every reply that finishes with "stop" validates against the
    schema (the `jsonschema` package is the judge) and has its keys in the schema's order; a
    schema ridge cannot enforce is a 400 naming the keyword."""
    if server.stub:
        pytest.skip("the stub engine has no model")
    jsonschema = pytest.importorskip("jsonschema")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA,
                                                  "strict": True}}
    msgs = [{"role": "user", "content": "Invent a person and describe them as JSON."}]
    stopped = 0
    for seed in (None, 5, 6, 7):
        kw = dict(messages=msgs, max_tokens=250, response_format=fmt)
        kw.update(temperature=0) if seed is None else kw.update(temperature=0.9, seed=seed)
        r = chat(server, **kw)
        content, reason = r.choices[0].message.content, r.choices[0].finish_reason
        if reason != "stop":
            assert reason == "length"
            continue
        stopped += 1
        value = json.loads(content)
        jsonschema.validate(value, PERSON_SCHEMA)
        order = list(PERSON_SCHEMA["properties"])
        keys = list(value)
        assert keys == sorted(keys, key=order.index), keys
    assert stopped > 0
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "^a+$"}}}
    status, _, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model, "messages": msgs, "max_tokens": 4, "response_format": bad})
    err = json.loads(body)["error"]
    assert status == 400 and err["param"] == "response_format" and "pattern" in err["message"]
