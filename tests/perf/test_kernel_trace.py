"""scripts/device/kernel_trace.py --chain on a made-up trace whose critical path is known: each
kernel's "adds" (how much later it ends than the kernels before it in graph order), its "lead" (how
long before the previous end it started) and its place after the anchor family."""
import csv
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "kernel_trace.py"
HEADER = ("kind,start_ns,end_ns,stream,graph,node,grid_x,grid_y,grid_z,block_x,block_y,block_z,"
          "bytes,name").split(",")


def write_trace(path, replays):
    """replays: lists of (name, start_us, end_us) in graph order; node ids are the list index."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for rep in replays:
            for node, (name, start, end) in enumerate(rep):
                w.writerow(["kernel", int(start * 1000), int(end * 1000), 1, 7, node, 132, 1, 1,
                            256, 1, 1, 0, name])


def chain_rows(out):
    rows = {}
    lines = out.splitlines()
    at = next(i for i, l in enumerate(lines) if "critical path" in l)
    for line in lines[at + 2:]:
        m = re.match(r"\s+(\S+)\s+(\d+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)$", line)
        if not m:
            break
        rows[m.group(1)] = tuple(float(x) for x in m.groups()[1:])
    return rows


def test_chain_adds_leads_and_places(tmp_path):
    # Two layers a replay: gemv (q|k|v), attention, gemv (o), gemv (mlp); each replay shifted by
    # 1,000 us. Within a replay (us): the o GEMV starts 3 us before attention ends and ends 9 us
    # after it, so it adds 9 and leads by 3.
    def replay(t0, o_tail):
        k = []
        t = t0
        for _ in range(2):
            k.append(("_Z8qkv_gemvv", t, t + 20))
            k.append(("_Z19paged_decode_kernelv", t + 18, t + 26))   # adds 6, lead 2
            k.append(("_Z6o_gemvv", t + 23, t + 26 + o_tail))       # adds o_tail, lead 3
            k.append(("_Z8mlp_gemvv", t + 24 + o_tail, t + 60))      # lead 2
            t += 60
        return k
    # The first replay is skipped (warm-up); the medians of the other three take o_tail 9, 9, 11.
    replays = [replay(0, 50), replay(1000, 9), replay(2000, 11), replay(3000, 9)]
    trace = tmp_path / "trace.csv"
    write_trace(trace, replays)
    out = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--chain",
                          "paged_decode_kernel", "--min-nodes", "4"],
                         capture_output=True, text=True, check=True).stdout
    rows = chain_rows(out)
    # label: (count a step, adds, adds x count, lead, runs)
    attn = rows["paged_decode_kernel@0"]
    assert attn[0] == 2 and attn[1] == 6.0 and attn[3] == 2.0 and attn[4] == 8.0
    o = rows["o_gemv@1"]
    assert o[0] == 2 and o[1] == 9.0 and o[2] == 18.0 and o[3] == 3.0 and o[4] == 12.0
    mlp = rows["mlp_gemv@2"]
    assert mlp[0] == 2 and mlp[1] == 60 - 26 - 9 and mlp[3] == 2.0
    # The second layer's q|k|v comes after the first attention: place 3.
    qkv = rows["qkv_gemv@3"]
    assert qkv[0] == 1 and qkv[1] == 20.0 and qkv[3] == 0.0
    # The first kernel of a replay has no kernel before it: no adds, its own line without a place.
    assert rows["qkv_gemv"][0] == 1 and rows["qkv_gemv"][1] == 0.0
