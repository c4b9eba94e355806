"""The tiny offline world: two related tiny Llama targets and their EAGLE-3 drafters.

Built in about a minute on a CPU, seeded, for tests and ``--smoke`` runs:

- a byte-level BPE tokenizer trained on standard-library text, shared by both targets;
- target A ("K2"): a tiny Llama trained on docstrings (English documentation);
- target B ("K2.5"): A continued-trained on Python source, so B is A moved, not noise;
- ``drafter-a``: trained on A's states with the larger budget (the reused drafter's role);
- ``drafter-b-small``: trained on B's states with a small budget (the new team's role);
  both in the SpecForge / SGLang layout, draft vocabulary built from token frequencies.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from eaglelab.atomic import write_json_atomic
from eaglelab.data.corpus import code_blocks, docstrings, prompts_from_docstrings, split_held_out
from eaglelab.data.states import capture_hidden_states
from eaglelab.data.tokens import pack_sequences
from eaglelab.data.world import World, default_world_dir
from eaglelab.model.drafter_files import save_drafter
from eaglelab.model.targets import Target, load_target
from eaglelab.progress import progress
from eaglelab.train.finetune import initial_drafter
from eaglelab.train.training import TrainConfig, train_drafter
from eaglelab.worlds.artifacts import cached_build

TINY_PARAMS = {
    "version": 3,
    "vocab_size": 512,
    "draft_vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 8,
    "num_attention_heads": 2,  # head size 32: the smallest vLLM's CPU attention runs (eaglelab.engines)
    "num_key_value_heads": 1,
    "max_position_embeddings": 1024,  # room for vLLM's prompt + drafts
    "seq_len": 64,
    "target_a_steps": 200,
    "target_b_steps": 50,
    "target_lr": 3e-3,
    "drafter_sequences": 768,
    "drafter_a_steps": 200,
    "drafter_b_steps": 40,
    "drafter_b_sequences": 48,
    "loss_convention": "specforge",  # the drafters' TTT loss (eaglelab.train.ttt)
    "seed": 0,
}


def _train_tokenizer(texts: list[str], vocab_size: int, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(str(out))
    return fast


def train_causal_lm(model, sequences, steps: int, lr: float, batch_size: int, seed: int, desc: str = "lm"):
    """Plain next-token training of a transformers causal LM (AdamW, cosine), in place."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    model.train()
    for step in progress(range(steps), desc=desc):
        idx = torch.randint(0, len(sequences), (batch_size,), generator=gen)
        batch = sequences[idx]
        for g in opt.param_groups:
            g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    return loss.item()


def _save_sequences(path: Path, seqs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"input_ids": seqs.contiguous()}, str(path))


def train_world_drafter(target_dir: Path, sequences, out_dir: Path, steps: int, draft_vocab_size: int,
                        seed: int, batch_size: int = 8, lr: float = 3e-3,
                        loss_convention: str = TINY_PARAMS["loss_convention"]):
    """Capture a target's states on ``sequences`` and train a drafter on them (SpecForge layout)."""
    model, _ = load_target(target_dir, device="cpu")
    drafter = initial_drafter(model, None, sequences, draft_vocab_size, seed=seed)
    target = Target.for_drafter(model, drafter.spec)
    states = capture_hidden_states(target, sequences, batch_size=64)
    torch.manual_seed(seed)
    cfg = TrainConfig(steps=steps, batch_size=batch_size, ttt_length=4, lr=lr, warmup_steps=10,
                      log_every=max(steps // 10, 1), eval_every=0, seed=seed, loss_convention=loss_convention)
    train_drafter(drafter, states, model.lm_head, cfg, progress=True)
    save_drafter(drafter, out_dir, overwrite=True)
    target.close()
    return drafter


def build_tiny_world(root: str | Path | None = None, force: bool = False, params: dict | None = None) -> World:
    """Build (or reuse) the tiny world under ``root`` and return its paths.

    Seeded: the same parameters give the same data, tokenizer and targets; drafter weights can
    differ in the last bits between builds (threaded float reductions on the CPU), which is why
    reuse is decided by the manifest of the built files, not by rebuilding. A corrupt or
    partial world (manifest check fails) is rebuilt.
    """
    p = {**TINY_PARAMS, **(params or {})}
    root = Path(root) if root is not None else default_world_dir("tiny")

    def build(tmp: Path) -> dict:
        from transformers import LlamaConfig, LlamaForCausalLM

        w = World.at(tmp)
        torch.manual_seed(p["seed"])
        docs_train, docs_held = split_held_out(docstrings())
        code_train, _ = split_held_out(code_blocks())
        tok = _train_tokenizer(docs_train + code_train, p["vocab_size"], tmp / "tokenizer")
        seq_a = pack_sequences(tok, docs_train, p["seq_len"])
        seq_b = pack_sequences(tok, code_train, p["seq_len"])
        _save_sequences(w.data_a, seq_a)
        _save_sequences(w.data_b, seq_b)
        cfg = LlamaConfig(
            vocab_size=len(tok), hidden_size=p["hidden_size"], intermediate_size=p["intermediate_size"],
            num_hidden_layers=p["num_hidden_layers"], num_attention_heads=p["num_attention_heads"],
            num_key_value_heads=p["num_key_value_heads"], max_position_embeddings=p["max_position_embeddings"],
            bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
            tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(cfg)
        train_causal_lm(model, seq_a, p["target_a_steps"], p["target_lr"], 16, p["seed"], "target A")
        model.save_pretrained(str(w.target_a))
        tok.save_pretrained(str(w.target_a))
        # B = A continued on code: the same network, moved by a new domain
        train_causal_lm(model, seq_b, p["target_b_steps"], p["target_lr"] / 3, 16, p["seed"] + 1, "target B")
        model.save_pretrained(str(w.target_b))
        tok.save_pretrained(str(w.target_b))
        # drafters: each trained on its target's own states over a mix of both domains
        gen = torch.Generator().manual_seed(p["seed"] + 7)
        half = p["drafter_sequences"] // 2
        mix = torch.cat([seq_a[torch.randperm(len(seq_a), generator=gen)[:half]],
                         seq_b[torch.randperm(len(seq_b), generator=gen)[:half]]])
        train_world_drafter(w.target_a, mix, w.drafter_a, p["drafter_a_steps"], p["draft_vocab_size"], p["seed"],
                            loss_convention=p["loss_convention"])
        small = mix[torch.randperm(len(mix), generator=gen)[: p["drafter_b_sequences"]]]
        train_world_drafter(w.target_b, small, w.drafter_b_small, p["drafter_b_steps"], p["draft_vocab_size"],
                            p["seed"] + 1, loss_convention=p["loss_convention"])
        write_json_atomic(w.prompts, {"train": prompts_from_docstrings(docs_train, 32),
                                      "held_out": prompts_from_docstrings(docs_held, 32)})
        return {"python": sys.version.split()[0], "torch": torch.__version__}

    cached_build(root, p, build, force=force)
    return World.at(root)
