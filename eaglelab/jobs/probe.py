"""The plug-in probe as one job: how far the new target moved where the old drafter reads, and its τ there.

``eaglelab probe``, notebook 03 and its picker all run :func:`probe_checkpoints` on a
:class:`ProbeSettings`, whose defaults are the only ones (``tests/test_parity.py`` ties the notebook's
parameters cell and the command line's flags to them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from eaglelab.checkpoints.drafters.preflight import check_context, check_drafter, check_target, check_target_pair
from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
from eaglelab.checkpoints.targets.config import target_layer_count
from eaglelab.data.probe_data import world_for_data
from eaglelab.data.world import World
from eaglelab.errors import ParameterError, SourceError
from eaglelab.inputs import printable
from eaglelab.outputs import open_output_folder
from eaglelab.progress import progress as progress_bar
from eaglelab.serving.speculation import Speculations
from eaglelab.settings import DEFAULT_K, DEFAULT_MEASURE_PROMPTS, DEFAULT_MEASURE_TOKENS, check_ranges, option
from eaglelab.views import Column, View

if TYPE_CHECKING:  # the types only: the metadata commands import this module without torch or transformers
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from eaglelab.data.sets import ProbeSet
    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.probe.plugin import ProbeResult

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe runs on and how.

    Attributes:
        old_target: the old target (the drafter was trained on it): folder or hub id.
        new_target: the new target.
        old_drafter: the old drafter.
        data: text or JSONL file (None: the world's held-out conversations when the old target lies in a world that
            keeps them, the demo world; else built-in text: :func:`eaglelab.data.sets.probe_set`).
        world_dir: the world folder whose conversations and prompts to use; None: the one target A lies in.
        sequences: sequences probed (whole conversations, or rows of ``seq_len`` tokens).
        seq_len: tokens per row of packed text (at most the targets' context).
        k: drafts per cycle, for the teacher-forced and the measured τ.
        batch_size: sequences per forward: the probe's memory is bounded by it.
        measure_prompts: held-out prompts decoded for real on both targets (0: none).
        measure_tokens: new tokens per measured prompt.
        dtype: the dtype the targets load in; from dumps, the dtype of the head products.
        device: cpu, cuda, cuda:1 (None: cuda when available); from dumps, where the head products run.
        device_map: auto: spread each target over all GPUs (needs accelerate).
        trust_remote_code: allow the targets' own code (off unless asked).
        old_states, new_states: folders of the engines' hidden-state dumps of A and of B (SpecForge's or
            vLLM's layout, :mod:`eaglelab.data.dumps`): the probe then loads neither target, only
            their heads and embeddings; ``sequences`` caps the sample pairs probed.
    """

    old_target: str
    new_target: str
    old_drafter: str
    data: str | None = None
    world_dir: str | None = None
    sequences: int = option(24, min=1)
    seq_len: int = option(64, min=1)
    k: int = option(DEFAULT_K, min=1)
    batch_size: int = option(8, min=1)
    measure_prompts: int = option(DEFAULT_MEASURE_PROMPTS, min=0)
    measure_tokens: int = option(DEFAULT_MEASURE_TOKENS, min=1)
    dtype: str = option("float32", choices=DTYPES)
    device: str | None = None
    device_map: str | None = option(None, choices=("auto",))
    trust_remote_code: bool = option(False)
    old_states: str | None = None
    new_states: str | None = None

    @property
    def from_dumps(self) -> bool:
        return self.old_states is not None or self.new_states is not None

    #: what a notebook's smoke run probes (:func:`eaglelab.settings.smoke_sized`)
    SMOKE_SIZES: ClassVar[dict[str, int]] = {"sequences": 16, "measure_prompts": 3, "measure_tokens": 24}

    def __post_init__(self):
        check_ranges(self)  # each field's declared range and choices: flags, notebook parameters and the API alike
        if (self.old_states is None) != (self.new_states is None):
            raise ParameterError("--old-states / --new-states",
                                 "give both dump folders (the old target's and the new's), or neither")


@dataclass
class ProbePair:
    """What a probe loads once: both targets, their tokenizer, the old drafter, and the data both see."""

    model_a: PreTrainedModel
    model_b: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    drafter: Eagle3Drafter
    data: ProbeSet
    world: World | None

    def prompts(self, n: int) -> list[list[int]]:
        """The held-out prompts to decode for real (the world's, else built-in), encoded."""
        from eaglelab.data.sets import measure_prompts

        return measure_prompts(self.tokenizer, n, self.world)


@dataclass
class ProbeReport:
    """The probe's answer: similarity per layer, τ on A and B (teacher forced, and measured), the verdict.

    Attributes:
        settings: what was probed.
        result: :class:`eaglelab.probe.plugin.ProbeResult` (layers, agreement, acceptance, verdict).
        data: where the sequences came from (one line) and how many positions counted.
        measured: real speculative decoding on A and B (``{"A": ..., "B": ...}``), or None.
    """

    settings: ProbeSettings
    result: ProbeResult
    data: str
    positions: int
    measured: Speculations | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tau_a(self) -> float:
        return float(self.result.eval_a["accept_len"])

    @property
    def tau_b(self) -> float:
        return float(self.result.eval_b["accept_len"])

    def to_json(self) -> dict[str, Any]:
        out = {**self.result.to_json(), "checkpoints": {"old_target": self.settings.old_target,
                                                        "new_target": self.settings.new_target,
                                                        "old_drafter": self.settings.old_drafter},
               "states": ({"old": self.settings.old_states, "new": self.settings.new_states} if self.settings.from_dumps
                          else None), "notes": list(self.notes),
               "k": self.settings.k, "data": {"description": self.data, "positions": self.positions}}
        if self.measured is not None:
            out["measured"] = self.measured.to_json()
        return out

    def headline(self, tag: str = "") -> str:
        """One line: the verdict (or that there is none), τ on A and B, agreement, and which checkpoints were compared."""
        s, decision = self.settings, self.result.decision
        why = "" if decision.decided else f" ({decision.cause})"
        return (f"Verdict{' ' + tag if tag else ''}: {decision.label.upper()}{why} · drafter {s.old_drafter} "
                f"on {s.old_target} (A) and {s.new_target} (B) · τ (teacher forced, k = {s.k}) {self.tau_a:.2f} on A vs "
                f"{self.tau_b:.2f} on B · next-token agreement {100 * self.result.argmax_agreement:.1f}%")

    def findings(self, tag: str = "") -> dict[str, str]:
        """The probe's own findings, one sentence (markdown) each, by name, for a notebook to pick and order:
        ``compared``, ``moved``, ``data``, ``plugin``, ``verdict``. ``tag``: the evidence tag (``[demo]``...)."""
        s, r, t = self.settings, self.result, f" {tag}" if tag else ""
        layers = r.layers
        low, high = min(layers, key=lambda x: x.cosine_mean), max(layers, key=lambda x: x.cosine_mean)
        band = r.decision.bands.get("tau_b") if r.decision.bands else None
        return {
            "compared": f"**Compared{t}:** the drafter `{s.old_drafter}` on `{s.old_target}` (A, old) and "
                        f"`{s.new_target}` (B, new).",
            "moved": f"**How far the target moved{t}:** mean per-token cosine between A and B ranges from "
                     f"{low.cosine_mean:.3f} ({low.layer}) to {high.cosine_mean:.3f} ({high.layer}); relative L2 "
                     f"{min(x.rel_l2 for x in layers):.2f}–{max(x.rel_l2 for x in layers):.2f}; CKA "
                     f"{min(x.cka for x in layers):.3f}–{max(x.cka for x in layers):.3f}; the two targets agree on the "
                     f"next token {100 * r.argmax_agreement:.1f}% of the time (total variation {r.tv:.3f}).",
            "data": f"**Data{t}:** {self.data} ({self.positions} positions counted).",
            "plugin": f"**Plug-in acceptance{t} (teacher forced, k = {s.k}):** simulated τ {self.tau_a:.2f} on A vs "
                      f"**{self.tau_b:.2f} on B**" + (f" ({band.text()})" if band else "") +
                      f"; first-draft accuracy {r.eval_a['acc'][0]:.2f} → {r.eval_b['acc'][0]:.2f}.",
            "verdict": f"**Verdict{t}: {r.decision.label.upper()}.** {'; '.join(r.decision.reasons)}.",
        }

    def view(self) -> View:
        """The similarity at each of the drafter's layers (what ``eaglelab probe`` prints per layer)."""
        columns = [Column("layer"), Column("cosine", "{:.4f}"), Column("rel L2", "{:.3f}"), Column("norm ratio", "{:.3f}"),
                   Column("CKA", "{:.4f}")]
        return View.of(columns, [[x.layer, x.cosine_mean, x.rel_l2, x.norm_ratio, x.cka] for x in self.result.layers],
                       index="layer")

    def table(self):
        return self.view().frame()

    def chain_view(self) -> View:
        """Per draft position: the teacher-forced accuracy on A and B, and the chain rate (drafts 1..i all right) with
        its bootstrap band over the sequences."""
        ev_a, ev_b = self.result.eval_a, self.result.eval_b

        def band(ev, i):
            bands = ev.get("chain_band") or []
            return f"{bands[i]['low']:.3f}-{bands[i]['high']:.3f}" if i < len(bands) else None

        columns = [Column("draft"), Column("accuracy on A", "{:.3f}"), Column("accuracy on B", "{:.3f}"),
                   Column("chain on A", "{:.3f}"), Column("A 90% band"), Column("chain on B", "{:.3f}"),
                   Column("B 90% band")]
        return View.of(columns, [[i + 1, ev_a["acc"][i], ev_b["acc"][i], ev_a["chain"][i], band(ev_a, i),
                                  ev_b["chain"][i], band(ev_b, i)] for i in range(len(ev_a["acc"]))], index="draft")

    def chain_table(self):
        return self.chain_view().frame()

    def scenario_findings(self, cycle_ms: float, baseline_tps: float, tag: str, yours: bool, plan_line: str) -> dict[str, str]:
        """``scenario``: τ on B projected to tok/s at the user's cycle, beside break-even, and whether the game plan
        uses it (``plan_line``); not projected (said so) when the evidence is the demo world's (``yours`` False)."""
        from eaglelab.serving.perf import break_even_tau, effective_tps

        head = f"**In your serving scenario** ({cycle_ms:g} ms cycle, {baseline_tps:g} tok/s baseline): "
        if not yours:
            return {"scenario": head + "not projected: τ measured on the demo world illustrates the method and is no "
                                       "forecast for your model; run this notebook on your checkpoints (`OLD_TARGET`, "
                                       "`NEW_TARGET`, `OLD_DRAFTER`) for the number the decision table needs."}
        proj_a, proj_b = (float(effective_tps(t, cycle_ms / 1e3)) for t in (self.tau_a, self.tau_b))
        uses = plan_line if self.result.decision.decided else \
            "the game plan's decision table does not use this τ: the probe gave no verdict on it."
        return {"scenario": head + f"τ {self.tau_b:.2f} {tag} projects to {proj_b:.1f} tok/s [derived] on the new target "
                                   f"(the old target's τ would give {proj_a:.1f}); break-even needs τ = "
                                   f"{float(break_even_tau(cycle_ms / 1e3, baseline_tps)):.2f}; {uses}"}

    def lines(self) -> list[str]:
        """What ``eaglelab probe`` prints."""
        out = [f"data: {self.data}; {self.positions} positions counted; next-token agreement "
               f"{self.result.argmax_agreement:.3f}, total variation {self.result.tv:.3f}"]
        for layer in self.result.layers:
            out.append(f"  {layer.layer:<10} cosine {layer.cosine_mean:.4f}  rel L2 {layer.rel_l2:.3f}  "
                       f"norm ratio {layer.norm_ratio:.3f}  CKA {layer.cka:.4f}")
        out.append(f"drafter accept len (teacher forced, k={self.settings.k}): on A {self.tau_a:.2f}, on B {self.tau_b:.2f}")
        bands = self.result.decision.bands
        if bands:
            out.append(f"  bootstrap over sequences: τ on A {bands['tau_a'].text()}; on B {bands['tau_b'].text()}; "
                       f"gain kept {self.result.decision.kept_text()}")
        for name, m in (self.measured or {}).items():
            out.append(f"measured on {name}: accept len {m.accept_len:.2f}, {m.tokens_per_s:.1f} vs "
                       f"{m.greedy_tokens_per_s:.1f} tok/s plain ({m.speedup:.2f}x), outputs equal greedy: "
                       f"{m.matches_greedy}" + ("" if m.timing_ok else f"\n  warning: {m.timing_note}"))
        out.append(f"verdict: {self.result.decision.label}")
        out += [f"  - {r}" for r in self.result.decision.reasons]
        out += [f"note: {n}" for n in self.notes]
        return out


def check_probe(settings: ProbeSettings) -> None:
    """Every checkpoint checked from configs and headers before anything loads; ``seq_len`` within both contexts.

    Raises:
        EaglelabError subclasses: one line naming the file and the problem.
    """
    _, cfg_a = check_drafter(settings.old_drafter, settings.old_target)
    cfg_b = check_target(settings.new_target)
    check_target_pair(settings.old_target, cfg_a, settings.new_target, cfg_b)
    check_context(settings.seq_len, "--seq-len", (settings.old_target, cfg_a), (settings.new_target, cfg_b))


def load_pair(settings: ProbeSettings, bar=None) -> ProbePair:
    """Check, then load both targets, the drafter and the probe's data (``bar``: a progress bar to advance by 3)."""
    from eaglelab.data.sets import probe_set
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.memory import check_live_probe_memory

    def step(text: str) -> None:
        if bar is not None:
            bar.set_postfix_str(text)
            bar.update()

    check_probe(settings)
    check_live_probe_memory(settings.old_target, settings.new_target, settings.old_drafter, settings.dtype,
                            settings.batch_size, settings.seq_len, settings.k, settings.device, settings.device_map)
    step("checked configs and headers")
    kwargs = {"dtype": settings.dtype, "device": settings.device, "device_map": settings.device_map,
              "trust_remote_code": settings.trust_remote_code}
    model_a, tok = load_target(settings.old_target, **kwargs, need_tokenizer=True)
    step("loaded target A")
    model_b, _ = load_target(settings.new_target, **kwargs)
    drafter = load_drafter(settings.old_drafter).to(next(model_a.parameters()).device)
    step("loaded target B and the drafter")
    world = world_for_data(settings.old_target, settings.world_dir)
    data = probe_set(tok, settings.sequences, settings.seq_len, world, settings.data, old_target=settings.old_target)
    return ProbePair(model_a, model_b, tok, drafter, data, world)


def probe_checkpoints(settings: ProbeSettings, pair: ProbePair | None = None, progress: bool = True,
                      measure: bool = True) -> ProbeReport:
    """The plug-in probe: paired capture, similarity at the drafter's layers, τ on both targets, the verdict.

    One progress bar moves through it all: the checks and loads (3 steps), then every batch of the
    paired capture.

    Args:
        settings: what to probe.
        pair: what :func:`load_pair` loaded (a notebook keeps it for its other sections); None: loaded here.
        progress: show the bar.
        measure: also decode ``settings.measure_prompts`` prompts for real on A and B (when > 0).
    """
    from eaglelab.probe.plugin import ProbeSource, measure_plugin, run_probe

    if settings.from_dumps:
        return probe_dumps(settings, progress)
    batches = -(-settings.sequences // settings.batch_size)
    with progress_bar(total=(0 if pair else 3) + batches, desc="plug-in probe", disable=not progress,
                      leave=True) as bar:
        pair = pair or load_pair(settings, bar)
        source = ProbeSource(printable(str(pair.data.source)), data=pair.data.choice)
        if not pair.data.positions:  # nothing counts: refused before either target runs
            raise SourceError(source.where, f"0 positions counted in {len(pair.data.ids)} sequences: nothing to measure")
        bar.total = bar.n + -(-len(pair.data.ids) // settings.batch_size)  # the data may hold fewer sequences
        bar.set_postfix_str("capturing both targets")
        result = run_probe(pair.model_a, pair.model_b, pair.drafter, pair.data.ids, k=settings.k,
                           batch_size=settings.batch_size, loss_mask=pair.data.counted, on_batch=bar.update,
                           source=source)
        bar.set_postfix_str("done")
    measured = None
    if measure and settings.measure_prompts:
        measured = measure_plugin(pair.model_a, pair.model_b, pair.drafter, pair.prompts(settings.measure_prompts),
                                  settings.measure_tokens, k=settings.k)
    return ProbeReport(settings, result, str(pair.data.source), pair.data.positions, measured, list(result.notes))


def check_dump_probe(settings: ProbeSettings) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The drafter against target A, and the two targets against each other, from configs and headers.

    Returns:
        ``(spec, cfg_a, cfg_b)``.
    """
    spec, cfg_a = check_drafter(settings.old_drafter, settings.old_target)
    cfg_b = check_target(settings.new_target)
    check_target_pair(settings.old_target, cfg_a, settings.new_target, cfg_b)
    return spec, cfg_a, cfg_b


def probe_dumps(settings: ProbeSettings, progress: bool = True) -> ProbeReport:
    """The plug-in probe from two folders of the engines' hidden-state dumps: neither target loads.

    Of each target only its final norm, ``lm_head`` and ``embed_tokens`` are read
    (:func:`eaglelab.model.heads.read_target_heads`); the states are the dumps' (paired by sample
    index, their tokens checked equal). Nothing is decoded for real: the measured τ needs the targets.
    """
    import torch

    from eaglelab.data.dumps import open_dumps, pair_dumps
    from eaglelab.probe.dumps import load_dump_probe, run_dump_probe

    spec, cfg_a, _ = check_dump_probe(settings)
    # the folders are listed and paired (one folder twice is refused) before any head is read
    folder_a, folder_b = open_dumps(settings.old_states), open_dumps(settings.new_states)
    pairs = pair_dumps(folder_a, folder_b, limit=settings.sequences)
    device = torch.device(settings.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, settings.dtype)
    # sized from headers against the memory free, then read: heads in the dtype, the drafter without its own [V, H]
    heads_a, heads_b, drafter = load_dump_probe(pairs, settings.old_target, settings.new_target, settings.old_drafter,
                                                spec, dtype, device, settings.batch_size, settings.k)
    for folder, heads in ((folder_a, heads_a), (folder_b, heads_b)):
        folder.hidden_size, folder.vocab_size = heads.hidden_size, heads.vocab_size
    outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, target_layer_count(cfg_a))
    batches = -(-len(pairs.indices) // settings.batch_size)
    with progress_bar(total=batches, desc="plug-in probe (dumps)", disable=not progress, leave=True) as bar:
        result = run_dump_probe(pairs, heads_a, heads_b, drafter, outs, k=settings.k, batch_size=settings.batch_size,
                                on_batch=bar.update)
    data = (f"hidden-state dumps ({folder_a.layout} {printable(str(folder_a.root))} as A, {folder_b.layout} "
            f"{printable(str(folder_b.root))} as B): {pairs.counts()}")
    notes = pairs.notes() + [f"target {label}: {n}" for label, h in (("A", heads_a), ("B", heads_b)) for n in h.notes]
    notes += result.notes
    notes.append("from dumps nothing is decoded for real: the measured τ needs the targets (live probe or an engine)")
    return ProbeReport(settings, result, data, result.tokens, None, notes)


@dataclass(frozen=True)
class DumpSettings:
    """Dumps of a (small) target in an engine's layout: what SpecForge or vLLM would write, made here.

    The probe's dump path run end to end where a target loads in one process (the demo world, a
    check of the pipeline before the cluster); at scale the engine writes them (``eaglelab recipe --job probe``).

    Attributes:
        target: the target folder or hub id.
        drafter: the drafter whose three layers are dumped.
        out: the folder to write (eaglelab's; ``force`` replaces an earlier dump there).
        layout: ``specforge`` (``rows_*/data_{i}.ckpt``) or ``vllm`` (``hs_{i}.safetensors``).
        compress: SpecForge's ``--compress`` (``.ckpt.gz``).
        data: text or JSONL file (None: the world's conversations, else built-in text); the sequences are picked as
            the probe picks them (:class:`ProbeSettings`).
        world_dir: world folder whose held-out conversations to dump.
        sequences: sequences dumped (whole conversations, or rows of ``seq_len`` tokens).
        seq_len: tokens per row of packed text.
        batch_size: sequences per forward.
        dtype: the storage dtype (``bfloat16`` is what engines write; ``float32`` keeps the live probe's numbers).
        force: replace an earlier dump eaglelab wrote in ``out``.
        trust_remote_code: allow the target's own code (off unless asked).
    """

    target: str
    drafter: str
    out: str
    layout: str = option("specforge", choices=("specforge", "vllm"))
    compress: bool = False
    data: str | None = None
    world_dir: str | None = None
    sequences: int = option(24, min=1)
    seq_len: int = option(64, min=1)
    batch_size: int = option(8, min=1)
    dtype: str = option("float32", choices=DTYPES)
    force: bool = False
    trust_remote_code: bool = False

    def __post_init__(self):
        check_ranges(self)  # each field's declared range and choices (the layouts: data.dumps.LAYOUTS)
        if self.compress and self.layout != "specforge":
            raise ParameterError("--compress", "only SpecForge's layout is compressed (.ckpt.gz)")


@dataclass(frozen=True)
class DumpReport:
    """The dumps written: their folder, the engine's layout, how many samples, of which text."""

    out: str
    layout: str
    samples: int
    data: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        return [f"{self.samples} samples of {self.data} written to {self.out} in {self.layout}'s layout; probe them "
                "with `eaglelab probe --old-states ... --new-states ...`"]


def dump_states(settings: DumpSettings, progress: bool = True) -> DumpReport:
    """Run the target over the probe's sequences and write its dumps in ``settings.layout``."""
    import torch

    from eaglelab.data.dump_writers import capture_dumps
    from eaglelab.data.sets import probe_set
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target

    _, cfg = check_drafter(settings.drafter, settings.target)
    check_context(settings.seq_len, "--seq-len", (settings.target, cfg))
    with open_output_folder(settings.out, "hidden-state dumps", force=settings.force) as out:
        model, tok = load_target(settings.target, dtype="float32", trust_remote_code=settings.trust_remote_code,
                                 need_tokenizer=True)
        world = world_for_data(settings.target, settings.world_dir)
        data = probe_set(tok, settings.sequences, settings.seq_len, world, settings.data)
        spec = load_drafter(settings.drafter).spec
        n = capture_dumps(model, spec, data.ids, data.counted, out, settings.layout, settings.batch_size,
                          getattr(torch, settings.dtype), settings.compress, progress)
    return DumpReport(str(out.path), settings.layout, n, str(data.source))
