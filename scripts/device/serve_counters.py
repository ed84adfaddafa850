#!/usr/bin/env python3
"""The engine thread's counters around one `ridge bench serve` run (scripts/device/gpu-serve's
latency step).

  serve_counters.py snapshot PORT            -> the ridge_engine_* counters of /metrics as JSON
  serve_counters.py report RUN.json BEFORE.json AFTER.json
                                             -> one line: TPOT / ITL / TTFT p50 of the run and the
                                                engine's time per step by part between the two
                                                snapshots (the run's warm-up included)
"""
import json
import re
import sys
import urllib.request


def snapshot(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(ridge_engine_[a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def report(run, before, after):
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    steps = d.get("ridge_engine_steps_total", 0.0) or 1.0

    def per_step(part):
        return 1e3 * d.get(f'ridge_engine_seconds_total{{part="{part}"}}', 0.0) / steps

    dec_steps = d.get('ridge_engine_kind_steps_total{kind="decode"}', 0.0)
    dec_tokens = d.get('ridge_engine_kind_tokens_total{kind="decode"}', 0.0)
    dec_fwd = d.get('ridge_engine_forward_seconds_total{kind="decode"}', 0.0)
    dec = (f"decode steps {dec_steps:.0f} of {dec_tokens / dec_steps:.1f} tokens, forward "
           f"{1e3 * dec_fwd / dec_steps:.3f} ms each" if dec_steps else "no decode steps")
    return (f"TPOT p50 {run['tpot_ms']['p50']:.3f} ms, ITL p50 {run['itl_ms']['p50']:.3f} ms, "
            f"TTFT p50 {run['ttft_ms']['p50']:.1f} ms, {run['output_token_throughput']:.0f} out "
            f"tok/s; {steps:.0f} steps ({dec}); per step: forward {per_step('forward'):.3f} ms, "
            f"sample {per_step('sample'):.3f}, output {per_step('output'):.3f}, schedule "
            f"{per_step('schedule'):.3f}, between {per_step('between'):.3f}")


def main(argv):
    if len(argv) == 3 and argv[1] == "snapshot":
        print(json.dumps(snapshot(int(argv[2]))))
        return 0
    if len(argv) == 5 and argv[1] == "report":
        run, before, after = (json.load(open(p)) for p in argv[2:])
        print(report(run, before, after))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
