"""The direct plug-in probe: did the target move at the drafter's layers, and does the old drafter still work?

Two kinds of evidence, on the same token sequences:

1. *similarity* of target A and target B at the three aux layers the drafter reads and at
   the last layer (cosine, relative L2, norm ratio, linear CKA, next-token agreement);
2. *plug-in acceptance*: the drafter trained on A, teacher-forced on A's and on B's states
   (per-position accuracy, simulated τ), and measured speculative decoding on B.

A verdict (plug in / warm start / from scratch, :func:`eaglelab.decisions.plugin_verdict`) follows from
the acceptance numbers, and only from evidence: no position counted, too few sequences for its band,
or a number that is not finite (a head or states with NaN) is refused in one line saying what is
missing (:func:`finish_probe`); on text that is not the drafter's kind (the built-in fallback,
``ProbeSource.data``) the probe gives no verdict and names the text.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from eaglelab.checkpoints.targets.footprint import out_of_memory_as_error
from eaglelab.data.probe_data import DataChoice
from eaglelab.data.states import HiddenStates
from eaglelab.decisions import Decision, missing_evidence, plugin_verdict, tau_bands
from eaglelab.errors import EaglelabError, SourceError
from eaglelab.model.decoding import benchmark_speculation
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.targets import Target
from eaglelab.probe.memory import LIVE_ADVICE, LIVE_WHERE
from eaglelab.probe.similarity import SimilarityAccumulator, StreamingCKA
from eaglelab.progress import progress as bar
from eaglelab.serving.speculation import Speculation, Speculations
from eaglelab.settings import DEFAULT_K
from eaglelab.train.ttt import AcceptanceTally, evaluate_batch


@dataclass
class ProbeResult:
    """All the probe's numbers (see :meth:`to_json` for the CLI's shape)."""

    layers: list = field(default_factory=list)
    cka_map: object = None
    labels: list = field(default_factory=list)
    cosines: dict = field(default_factory=dict)
    argmax_agreement: float = float("nan")
    tokens: int = 0
    eval_a: dict | None = None
    eval_b: dict | None = None
    decision: Decision | None = None
    tv: float = float("nan")
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        plugin = {}
        if self.eval_a and self.eval_b:
            plugin = {"accept_len_on_a": self.eval_a["accept_len"], "accept_len_on_b": self.eval_b["accept_len"],
                      "acc_on_a": self.eval_a["acc"], "acc_on_b": self.eval_b["acc"],
                      "chain_on_a": self.eval_a["chain"], "chain_on_b": self.eval_b["chain"]}
        return {
            "layers": [asdict(layer) for layer in self.layers],
            "cka_map": [[float(v) for v in row] for row in self.cka_map] if self.cka_map is not None else None,
            "labels": self.labels,
            "argmax_agreement": self.argmax_agreement,
            "tv": self.tv,
            "tokens": self.tokens,
            "plugin": plugin,
            "verdict": self.decision.to_json() if self.decision else None,
        }


@dataclass(frozen=True)
class ProbeSource:
    """Where a probe's sequences came from, for the one line that refuses a verdict without evidence.

    Attributes:
        where: the data (a file, the world's conversations) or the dump folders, as the user named them.
        error: the typed error to raise (:class:`~eaglelab.errors.DumpError` for dumps).
        unit: what one sequence is called there (``"sequences"``, ``"paired samples"``).
        counted: what a counted position is called there.
        data: the text, as resolved before the probe ran (:attr:`eaglelab.data.sets.ProbeSet.choice`): on
            text that is not the drafter's kind the verdict is withheld; None: the caller's own sequences
            (dumps, tests), taken as the drafter's kind.
    """

    where: str = "the probe's sequences"
    error: type[EaglelabError] = SourceError
    unit: str = "sequences"
    counted: str = "positions counted"
    data: DataChoice | None = None


def layer_labels(aux_layer_outputs: tuple[int, ...]) -> list[str]:
    return [f"{name} ({i})" for name, i in zip(("low", "mid", "high"), aux_layer_outputs)] + ["last"]


@torch.no_grad()
def run_probe(model_a, model_b, drafter: Eagle3Drafter, sequences: torch.Tensor, k: int = DEFAULT_K,
              batch_size: int = 8, progress: bool = False, loss_mask: torch.Tensor | None = None,
              on_batch=None, source: ProbeSource | None = None) -> ProbeResult:
    """Paired capture on ``sequences`` [N, S], similarity, and the drafter's plug-in acceptance, streamed.

    Each batch of sequences runs through both targets, feeds the similarity accumulator and the
    two acceptance tallies, and is dropped: memory is bounded by the batch, not by N.

    Args:
        model_a: the old target (the drafter was trained on it).
        model_b: the new target.
        drafter: the old drafter (its aux ids pick the layers).
        sequences: token ids both targets see.
        k: drafts per cycle of the teacher-forced acceptance.
        progress: a bar of its own over the batches (a caller with a bar passes ``on_batch`` instead).
        loss_mask: [N, S] positions that count for similarity and acceptance (default: all).
        on_batch: called after each batch (advances a caller's progress bar).
        source: where the sequences came from, named when the evidence falls short.

    Raises:
        EaglelabError: (``source.error``) no verdict can be drawn (:func:`finish_probe`).
    """

    ta, tb = Target.for_drafter(model_a, drafter.spec), Target.for_drafter(model_b, drafter.spec)
    labels = layer_labels(ta.aux_layer_outputs)
    sim = SimilarityAccumulator(labels)
    tally_a, tally_b = AcceptanceTally(k), AcceptanceTally(k)
    dtype = drafter.fc.weight.dtype
    embed_a = model_a.get_input_embeddings().weight.detach().to(dtype)
    embed_b = model_b.get_input_embeddings().weight.detach().to(dtype)
    # a drafter without a head of its own drafts with each target's (full vocabulary)
    head_a, head_b = ((None, None) if drafter.has_head else
                      (model_a.get_output_embeddings().weight.detach(), model_b.get_output_embeddings().weight.detach()))
    try:
        for i in bar(range(0, len(sequences), batch_size), desc="probe", disable=not progress):
            ids = sequences[i: i + batch_size]
            counted = None if loss_mask is None else loss_mask[i: i + batch_size]
            with out_of_memory_as_error(LIVE_WHERE, LIVE_ADVICE):
                (sa, logits_a), (sb, logits_b) = capture_batch(ta, ids, counted), capture_batch(tb, ids, counted)
                tv = 0.5 * (torch.softmax(logits_a.float(), -1) - torch.softmax(logits_b.float(), -1)).abs().sum(-1)
                update_similarity(sim, sa, sb, argmax_a=logits_a.argmax(-1), argmax_b=logits_b.argmax(-1), tv=tv)
                # on each target the drafter reads that target's embedding, as SGLang injects the serving target's
                with drafter.serving_embedding(embed_a, head_a):
                    evaluate_batch(drafter, sa, model_a.lm_head, k, tally_a, t_logits=logits_a)
                with drafter.serving_embedding(embed_b, head_b):
                    evaluate_batch(drafter, sb, model_b.lm_head, k, tally_b, t_logits=logits_b)
                del sa, sb, logits_a, logits_b, tv
            if on_batch is not None:
                on_batch()
    finally:
        ta.close()
        tb.close()
    return finish_probe(sim, labels, tally_a, tally_b, source)


def finish_probe(sim: SimilarityAccumulator, labels: list[str], tally_a, tally_b,
                 source: ProbeSource | None = None) -> ProbeResult:
    """The probe's result from its accumulators: summaries, τ on A and B with their bootstrap bands, the verdict.

    The verdict is withheld (:data:`~eaglelab.decisions.NO_VERDICT`, the text named) when ``source.data``
    is not the drafter's kind of text.

    Raises:
        EaglelabError: (``source.error``, naming ``source.where``) no verdict can be drawn: no position
            counted, too few sequences for the band (:func:`eaglelab.decisions.missing_evidence`), or a
            number that is not finite.
    """

    source = source or ProbeSource()
    missing = missing_evidence(tally_a.sequences, tally_a.seq_counted, tally_a.steps, source.unit, source.counted)
    if missing:
        raise source.error(source.where, missing)
    res = sim.result()
    ev_a, ev_b = tally_a.result(), tally_b.result()
    _require_finite(res, ev_a, ev_b, source)
    bands = None
    if tally_a.seq_hits and len(tally_a.seq_hits) == len(tally_b.seq_hits):
        bands = tau_bands(tally_a.seq_hits, tally_a.seq_counted, tally_b.seq_hits, tally_b.seq_counted)
        ev_a["chain_band"] = [b.to_json() for b in bands["chain_a"]]
        ev_b["chain_band"] = [b.to_json() for b in bands["chain_b"]]
    return ProbeResult(res["layers"], res["cka_map"], labels, res["cosines"], res["argmax_agreement"],
                       res["tokens"], ev_a, ev_b, plugin_verdict(ev_a["accept_len"], ev_b["accept_len"], bands, source.data),
                       tv=res["tv"], notes=list(res["notes"]))


def _require_finite(res: dict, ev_a: dict, ev_b: dict, source: ProbeSource) -> None:
    """Refuse a verdict next to a number that is not finite: name the first few, and where NaN comes from."""
    numbers = {"next-token agreement": res["argmax_agreement"], "TV": res["tv"],
               "τ on A": ev_a["accept_len"], "τ on B": ev_b["accept_len"]}
    for layer in res["layers"]:
        numbers |= {f"{name} at {layer.layer}": getattr(layer, attr) for name, attr in
                    (("cosine", "cosine_mean"), ("relative L2", "rel_l2"), ("norm ratio", "norm_ratio"), ("CKA", "cka"))}
    bad = [f"{name} {value}" for name, value in numbers.items() if not math.isfinite(value)]
    if bad:
        raise source.error(source.where, f"the probe's numbers are not finite ({', '.join(bad[:4])}"
                                         f"{f' and {len(bad) - 4} more' if len(bad) > 4 else ''}): a target's head or "
                                         "its states hold NaN or Inf, or states do not vary; no verdict is read from them")


def measure_on_target(model, drafter: Eagle3Drafter, prompts: list[list[int]], max_new_tokens: int,
                      k: int = DEFAULT_K) -> Speculation:
    """Real speculative decoding of ``drafter`` on ``model``, the drafter reading that model's embedding.

    The embedding is the target's, as SGLang serves a drafter (and as an export without one is served
    by vLLM), lent without copying (:meth:`Eagle3Drafter.serving_embedding`); the drafter is unchanged
    afterwards.

    Returns:
        :func:`eaglelab.model.decoding.benchmark_speculation`'s measurement.
    """

    target = Target.for_drafter(model, drafter.spec)
    try:
        with drafter.serving_target(model):
            return benchmark_speculation(target, drafter, prompts, max_new_tokens, k=k)
    finally:
        target.close()


def measure_plugin(model_a, model_b, drafter: Eagle3Drafter, prompts: list[list[int]], max_new_tokens: int,
                   k: int = DEFAULT_K) -> Speculations:
    """Real speculative decoding of the old drafter on the old target (``"A"``) and the new (``"B"``), each against
    its own target's plain decoding (:func:`measure_on_target`)."""
    return Speculations({name: measure_on_target(model, drafter, prompts, max_new_tokens, k) for name, model in
                         (("A", model_a), ("B", model_b))})


def capture_batch(target: Target, ids: torch.Tensor, counted: torch.Tensor | None = None) -> tuple[HiddenStates, torch.Tensor]:
    """One target forward: the states the drafter reads, and the logits [B, S, V] (reused, not recomputed)."""
    out = target.forward(ids.to(target.device))
    mask = torch.ones_like(ids, dtype=torch.bool) if counted is None else counted.bool()
    states = HiddenStates(ids.cpu(), mask.cpu(), out.aux, out.last_hidden)
    return states, out.logits


def update_similarity(acc: SimilarityAccumulator, a: HiddenStates, b: HiddenStates, argmax_a: torch.Tensor,
                      argmax_b: torch.Tensor, tv: torch.Tensor | None = None) -> None:
    """Feed one batch of paired states (counted positions only) into the accumulator, sample by sample.

    Each sample's counted positions are a slice of its rows (a view, nothing copied) when they form one run, as
    replies and SpecForge's response tokens do, else one row gather of that sample: no boolean gather over the
    whole [B * S, 3H] batch. The accumulator keeps no view past the call (it copies what it buffers), so a
    caller may write the next batch over these states.

    Args:
        a, b: the two targets' states on the same tokens, [B, S, ...].
        argmax_a, argmax_b: [B, S] each target's next token.
        tv: [B, S] total variation of the two next-token distributions.
    """
    for i in range(a.aux.shape[0]):
        rows = counted_rows(a.loss_mask[i])
        if rows is None:
            continue
        xs, ys = ([*_rows_of(s.aux, i, rows).chunk(3, dim=-1), _rows_of(s.last_hidden, i, rows)] for s in (a, b))
        acc.update(xs, ys, _rows_of(argmax_a, i, rows), _rows_of(argmax_b, i, rows),
                   None if tv is None else _rows_of(tv, i, rows))


def counted_rows(mask: torch.Tensor) -> slice | torch.Tensor | None:
    """The positions of one sample's loss mask [S] that count: a slice when they form one run (SpecForge's response
    tokens do), else their indices [n]; None when none counts."""
    where = torch.nonzero(mask).reshape(-1)
    if not len(where):
        return None
    lo, hi = int(where[0]), int(where[-1]) + 1
    return slice(lo, hi) if hi - lo == len(where) else where


def _rows_of(t: torch.Tensor, i: int, rows: slice | torch.Tensor) -> torch.Tensor:
    """``t[i][rows]``: a view for a slice, one gather along the positions for indices (on t's device)."""
    return t[i, rows] if isinstance(rows, slice) else t[i].index_select(0, rows.to(t.device))


@torch.no_grad()
def layerwise_cka(model_a, model_b, sequences: torch.Tensor, batch_size: int = 8, cka_batch: int = 256,
                  progress: bool = True, loss_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Linear CKA between every layer output of A and every layer output of B, streamed.

    Args:
        sequences: [N, S] token ids both models see.
        loss_mask: [N, S] positions to compare (default: all; e.g. skip padding).

    Returns:
        [L + 1, L + 1] map; index 0 is the embedding, index i + 1 the output of layer i.
    """

    cka = None
    dev_a, dev_b = next(model_a.parameters()).device, next(model_b.parameters()).device
    for i in bar(range(0, len(sequences), batch_size), desc="layerwise CKA", disable=not progress):
        ids = sequences[i: i + batch_size]
        keep = (torch.ones_like(ids, dtype=torch.bool) if loss_mask is None else loss_mask[i: i + batch_size].bool()).reshape(-1)
        ha = [h.reshape(-1, h.shape[-1]).float().cpu()[keep]
              for h in model_a(input_ids=ids.to(dev_a), output_hidden_states=True).hidden_states]
        hb = [h.reshape(-1, h.shape[-1]).float().cpu()[keep]
              for h in model_b(input_ids=ids.to(dev_b), output_hidden_states=True).hidden_states]
        cka = cka or StreamingCKA(len(ha), len(hb))
        # Gram matrices are n x n: chunk the batch's tokens so memory stays flat
        for start in range(0, ha[0].shape[0] - 3, cka_batch):
            cka.update([h[start: start + cka_batch] for h in ha], [h[start: start + cka_batch] for h in hb])
    return cka.value()


