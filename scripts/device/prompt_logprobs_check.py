#!/usr/bin/env python3
"""Prompt logprobs on a running ridge server (GPU path): scripts/device/gpu-serve's `logprobs` step.

  prompt_logprobs_check.py PORT --vocab V [--model NAME] [--seed S]

The server's prompt-logprob rows are copied back from the device and reduced on the host; its
sampled rows' logprobs come from the device sampler. For random token-id prompts (lengths that
cross --max-prompt-logprob-rows and the step's token budget) this checks, over HTTP:
  1. completions `echo` + `logprobs` and vLLM's `prompt_logprobs` report the same logprob for every
     prompt token (one forward, two encodings of it);
  2. at sampled positions j, the echo's top-5 at j equals the top-5 that a request for the prompt's
     first j tokens gets for its first generated token (the device sampler's logprobs of the same
     distribution): the same tokens up to near-ties and logprobs within --tol (the two prefills
     differ in chunking, so their bf16 products differ in the last bits).
Prints one line per check and exits 1 on any failure. Needs only the standard library.
"""
import argparse
import json
import random
import sys
import urllib.request


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=0.05)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    model = a.model
    if model is None:
        with urllib.request.urlopen(f"http://127.0.0.1:{a.port}/v1/models", timeout=30) as r:
            model = json.loads(r.read())["data"][0]["id"]
    failures = 0
    for length in (23, 300):
        prompt = [rng.randrange(10, a.vocab) for _ in range(length)]
        base = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        echo = post(a.port, dict(base, echo=True, logprobs=5))["choices"][0]["logprobs"]
        plp = post(a.port, dict(base, prompt_logprobs=5))["choices"][0]["prompt_logprobs"]
        # 1. echo and prompt_logprobs agree on every prompt token.
        lp_echo = echo["token_logprobs"][:length]
        ok = lp_echo[0] is None and plp[0] is None and len(plp) == length
        worst = 0.0
        for j in range(1, length if ok else 0):
            entry = plp[j].get(str(prompt[j]))
            if entry is None or lp_echo[j] is None:
                ok = False
                break
            worst = max(worst, abs(entry["logprob"] - lp_echo[j]))
        ok = ok and worst <= 1e-4
        failures += not ok
        print(f"length {length}: echo vs prompt_logprobs, {length - 1} tokens, max |diff| "
              f"{worst:.2e}: {'ok' if ok else 'FAILED'}")
        # 2. the echo's top-5 at j against the device sampler's first-token top-5 after prompt[:j].
        positions = sorted(rng.sample(range(1, length), min(8, length - 1)))
        worst, mismatched = 0.0, []
        for j in positions:
            ref = echo["top_logprobs"][j]
            got = post(a.port, dict(base, prompt=prompt[:j], logprobs=5))
            top = got["choices"][0]["logprobs"]["top_logprobs"][0]
            common = set(ref) & set(top)
            for t in common:
                worst = max(worst, abs(ref[t] - top[t]))
            # A token in one top-5 only must sit at the other's edge (a near-tie for 5th place).
            edge = min(min(ref.values()), min(top.values()))
            for t in set(ref) ^ set(top):
                v = ref.get(t, top.get(t))
                if v - edge > a.tol:
                    mismatched.append((j, t, v, edge))
        ok = worst <= a.tol and not mismatched
        failures += not ok
        print(f"length {length}: echo top-5 vs the device sampler's at positions {positions}: "
              f"max |diff| {worst:.4f} (tol {a.tol}), mismatched {mismatched}: "
              f"{'ok' if ok else 'FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
