# A Llama-shaped GGUF of repeated random Q4_K blocks (Q6_K output/embedding), no tokenizer,
# written without the gguf package: python3 .mkgguf.py OUT H F L V
import random, struct, sys
out, H, F, L, V = sys.argv[1], *map(int, sys.argv[2:6])
rnd = random.Random(0)
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
kv = [("general.architecture", 8, s("llama"))]
for k, v in [("context_length", 4096), ("embedding_length", H), ("block_count", L),
             ("feed_forward_length", F), ("attention.head_count", H // 128),
             ("attention.head_count_kv", H // 128), ("rope.dimension_count", 128), ("vocab_size", V)]:
    kv.append((f"llama.{k}", 4, struct.pack("<I", v)))
kv += [("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
       ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5))]
SIZES = {12: 144, 14: 210, 0: None}  # Q4_K, Q6_K, F32
def chunk(t):
    size = SIZES[t]
    blocks = []
    for _ in range(512):
        b = bytearray(rnd.randbytes(size))
        at = [0, 2] if t == 12 else [208]
        for a in at: b[a:a + 2] = struct.pack("<e", rnd.uniform(1e-4, 3e-4) * rnd.choice([-1, 1]))
        blocks.append(bytes(b))
    return b"".join(blocks)
chunks = {12: chunk(12), 14: chunk(14)}
tensors = []
def add(name, rows, cols, t):
    if t == 0:
        tensors.append((name, [cols], t, struct.pack(f"<{cols}f", *([1.0] * cols))))
        return
    n = rows * cols // 256 * SIZES[t]
    c = chunks[t]
    tensors.append((name, [cols, rows], t, (c * (n // len(c) + 1))[:n]))
add("token_embd.weight", V, H, 14); add("output.weight", V, H, 14); add("output_norm.weight", 1, H, 0)
for i in range(L):
    for n, r, c in [("attn_q", H, H), ("attn_k", H, H), ("attn_v", H, H), ("attn_output", H, H),
                    ("ffn_gate", F, H), ("ffn_up", F, H), ("ffn_down", H, F)]:
        add(f"blk.{i}.{n}.weight", r, c, 14 if n in ("attn_v", "ffn_down") and i % 4 == 0 else 12)
    add(f"blk.{i}.attn_norm.weight", 1, H, 0); add(f"blk.{i}.ffn_norm.weight", 1, H, 0)
with open(out, "wb") as f:
    f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, t, v in kv: f.write(s(k) + struct.pack("<I", t) + v)
    off = 0
    for name, ne, t, data in tensors:
        f.write(s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", e) for e in ne)
                + struct.pack("<IQ", t, off))
        off += (len(data) + 31) // 32 * 32
    f.write(b"\0" * (-f.tell() % 32))
    for _, _, _, data in tensors: f.write(data + b"\0" * (-len(data) % 32))
