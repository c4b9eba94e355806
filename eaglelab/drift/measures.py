"""What one drifted target B' is, measured against A on the same held-out text, and the old drafter on it.

For one B', on the same teacher-forced sequences (counted positions only):

- at the drafter's three aux layers and the last layer: cosine, relative L2 and linear CKA;
- of the next-token distributions: top-1 agreement, total variation ``½ Σ|p - q|``, ``KL(A || B')``,
  and the total variation an engine's top-k logprobs allow (``tv_topk``, see :func:`tv_top_k`);
- the old drafter, teacher forced on A and on B': per-position accuracy, chain rates, τ, and τ
  replayed cycle by cycle as greedy decoding would meet the text (:class:`CycleWalk`);
- the per-token plug-in prediction: a draft chain that is right on A stays right on B' when the
  two targets agree on every token along it (``conditional``), which needs the drafter's run on
  A and both targets' top-1 tokens, but no drafter run on B'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eaglelab.data.states import HiddenStates
from eaglelab.engines.logprob_files import sglang_response, vllm_response, write_jsonl
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.targets import Target, load_target
from eaglelab.probe.plugin import capture_batch, layer_labels, update_similarity
from eaglelab.probe.similarity import SimilarityAccumulator
from eaglelab.progress import progress as bar
from eaglelab.settings import DEFAULT_K
from eaglelab.train.ttt import AcceptanceTally, evaluate_batch, shift_mask


@dataclass
class DriftMeasures:
    """All the numbers of one B' (JSON-ready).

    Attributes:
        layers: per layer (low, mid, high, last): ``cosine``, ``rel_l2``, ``cka``.
        agreement: share of counted positions where A's and B''s argmax agree.
        tv, kl: mean total variation and KL(A || B') of the next-token distributions.
        tv_topk: mean :func:`tv_top_k`, what engine files give.
        positions: counted positions.
        on_a, on_b: the drafter teacher forced on A / on B': ``acc``, ``chain`` (per draft), ``accept_len``,
            ``walk_accept_len`` (:class:`CycleWalk`), and per sequence ``seq_hits`` / ``seq_counted`` ([N][k]).
        conditional: the per-token prediction of ``on_b``: ``chain`` and ``accept_len``.
    """

    layers: dict
    agreement: float
    tv: float
    kl: float
    tv_topk: float
    positions: int
    on_a: dict
    on_b: dict
    conditional: dict

    def to_json(self) -> dict:
        return asdict(self)

    def measure_values(self) -> dict[str, float]:
        """The scalar measures the predictors read, by name."""
        aux = [v for k, v in self.layers.items() if k != "last"]
        return {"agreement": self.agreement, "tv": self.tv, "kl": self.kl, "tv_topk": self.tv_topk,
                "cos_aux": sum(v["cosine"] for v in aux) / len(aux), "cos_last": self.layers["last"]["cosine"],
                "cka_aux": sum(v["cka"] for v in aux) / len(aux), "rel_l2_last": self.layers["last"]["rel_l2"]}


def tv_top_k(logp: torch.Tensor, logq: torch.Tensor, text: torch.Tensor, k: int) -> torch.Tensor:
    """Total variation of two next-token distributions as seen through an engine's top-k logprobs.

    Each engine returns its top k plus the text's next token; on the tokens both returned (C) the
    distributions are compared exactly, everything else is lumped into one "rest" outcome:
    ``½ (Σ_C |p - q| + |p(rest) - q(rest)|)``, a lower bound of the true TV
    (:func:`eaglelab.engines.logprob_files.compare_logprobs` computes the same from the files).

    Args:
        logp, logq: [N, V] log-probabilities of A and B'.
        text: [N] the text's next token at each position.
        k: logprobs per position the engine returned.

    Returns:
        [N] per-position values.
    """
    return _tv_seen(logp.exp(), logq.exp(), _returned(logp, text, k) & _returned(logq, text, k))


def _returned(logx: torch.Tensor, text: torch.Tensor, k: int) -> torch.Tensor:
    """[N, V] bool: the tokens an engine returns at each position (its top k and the text's next token)."""
    seen = torch.zeros_like(logx, dtype=torch.bool)
    seen.scatter_(1, logx.topk(k, dim=-1).indices, True)
    seen.scatter_(1, text[:, None], True)
    return seen


def _tv_seen(p: torch.Tensor, q: torch.Tensor, common: torch.Tensor) -> torch.Tensor:
    """[N] :func:`tv_top_k` from the two distributions themselves and the tokens both engines returned."""
    p, q = p * common, q * common
    return 0.5 * ((p - q).abs().sum(-1) + (p.sum(-1) - q.sum(-1)).abs())


class CycleWalk:
    """Greedy speculative decoding replayed over teacher-forced hits: tokens emitted per cycle.

    The chain rates average a cycle started at *every* position; decoding starts one only where
    the last cycle ended, and skips the positions its accepted drafts covered, which are the easy
    ones. The walk starts a cycle at the first counted position t, accepts the n drafts whose chain
    holds there, emits n + 1 tokens and starts the next cycle at t + n + 1. On the target's own
    greedy text this is what decoding measures, up to teacher forcing's approximation of the
    drafter's cache.
    """

    def __init__(self):
        self.emitted = 0
        self.cycles = 0

    def add(self, chain_hits: list[torch.Tensor], counted: torch.Tensor) -> None:
        """chain_hits: per draft, [B, S] chain hits; counted: [B, S] positions that count."""
        runs = torch.stack([h.cpu() for h in chain_hits]).sum(0).tolist()  # drafts accepted from each position
        for row, mask in zip(runs, counted.cpu().tolist()):
            where = [t for t, m in enumerate(mask) if m]
            t = where[0] if where else len(mask)
            while where and t <= where[-1]:
                self.emitted += row[t] + 1
                self.cycles += 1
                t += row[t] + 1

    def value(self) -> float:
        return self.emitted / self.cycles if self.cycles else float("nan")


class _ChainCounter:
    """Running count of the per-token conditional prediction: chain hits on A kept where A and B' agree."""

    def __init__(self, k: int):
        self.hits = [0] * k
        self.n = [0] * k

    def add(self, hits_a: list[torch.Tensor], agree: torch.Tensor, counted: list[int]) -> None:
        """hits_a[i]: [B, S] chain hits of draft i on A; agree: [B, S] argmax agreement; counted: valid per draft."""
        alive = torch.ones_like(agree)
        for i, h in enumerate(hits_a):
            # draft i at position t is checked against the target's token at t + 1 + i
            alive = alive & shift_mask(agree, 1 + i).to(h.device)
            self.hits[i] += int((h & alive).sum())
            self.n[i] += counted[i]

    def result(self) -> dict:
        chain = [h / max(n, 1) for h, n in zip(self.hits, self.n)]
        return {"chain": chain, "accept_len": 1.0 + sum(chain)}


@dataclass
class ReferenceBatch:
    """A's side of one batch: its states, its next tokens, its next-token log-probabilities at counted
    positions, and the old drafter's chain hits on it."""

    states: HiddenStates
    greedy: torch.Tensor
    logp: torch.Tensor
    chain_hits: list[torch.Tensor]
    counted: list[int]


@dataclass
class Reference:
    """A's side of every drift measure on the held-out text: the same for every B', so a sweep computes it once.

    Attributes:
        batches: per batch of ``batch_size`` sequences, in order.
        on_a: the drafter teacher forced on A (``acc``, ``chain``, ``accept_len``, ``walk_accept_len``,
            ``seq_hits``, ``seq_counted``).
        sequences, counted, k, batch_size: what it was computed on and with (a measure on other text or with
            other settings recomputes it).
    """

    batches: list[ReferenceBatch]
    on_a: dict
    sequences: torch.Tensor
    counted: torch.Tensor
    k: int
    batch_size: int

    def fits(self, sequences: torch.Tensor, counted: torch.Tensor, k: int, batch_size: int) -> bool:
        """Whether this is A's side of exactly these sequences, counted positions and settings."""
        return ((self.k, self.batch_size) == (k, batch_size) and torch.equal(self.sequences, sequences)
                and torch.equal(self.counted.bool(), counted.bool()))


#: what :class:`DriftMeasures` keeps of a tally
_TALLY_KEYS = ("acc", "chain", "accept_len")


@torch.no_grad()
def reference_pass(model_a, drafter: Eagle3Drafter, sequences: torch.Tensor, counted: torch.Tensor, k: int = DEFAULT_K,
                   batch_size: int = 8) -> Reference:
    """A's forward over the held-out text and the old drafter teacher forced on it, batch by batch.

    Args:
        sequences: [N, S] teacher-forced token ids; counted: [N, S] positions whose next token counts.
    """
    target = Target.for_drafter(model_a, drafter.spec)
    tally, walk, batches = AcceptanceTally(k), CycleWalk(), []
    try:
        for i in range(0, len(sequences), batch_size):
            ids, mask = sequences[i: i + batch_size], counted[i: i + batch_size].bool()
            states, logits = capture_batch(target, ids, mask)
            with drafter.serving_target(model_a):
                out = evaluate_batch(drafter, states, model_a.lm_head, k, tally, t_logits=logits)
            walk.add(out.chain_hits, mask)
            logp = torch.log_softmax(logits[mask.to(logits.device)].float(), -1)
            batches.append(ReferenceBatch(states, logits.argmax(-1), logp, out.chain_hits, out.counted))
    finally:
        target.close()
    on_a = {**{key: tally.result()[key] for key in _TALLY_KEYS}, "walk_accept_len": walk.value(),
            "seq_hits": tally.seq_hits, "seq_counted": tally.seq_counted}
    return Reference(batches, on_a, sequences, counted, k, batch_size)


@torch.no_grad()
def measure_drift(model_a, model_b, drafter: Eagle3Drafter, sequences: torch.Tensor, counted: torch.Tensor,
                  k: int = DEFAULT_K, batch_size: int = 8, top_k: int = 20, progress: bool = False,
                  reference: Reference | None = None) -> DriftMeasures:
    """Measure B' (``model_b``) against A (``model_a``) and the old drafter on both, streamed over batches.

    Args:
        sequences: [N, S] teacher-forced token ids (held-out conversations).
        counted: [N, S] bool, positions whose next token counts (replies).
        k: drafts per cycle of the teacher-forced acceptance.
        top_k: logprobs per position an engine would return (for ``tv_topk``).
        reference: A's side (:func:`reference_pass` on the same sequences), computed here when not given;
            a sweep passes the one it computed for its first point.

    ``model_b`` given as ``model_a`` itself (a sweep's zero point) runs no second forward and no second drafter
    evaluation: B''s side is the reference's, as a second identical forward would give it.
    """

    if reference is None or not reference.fits(sequences, counted, k, batch_size):
        reference = reference_pass(model_a, drafter, sequences, counted, k, batch_size)
    same = model_b is model_a
    tb = Target.for_drafter(model_b, drafter.spec)
    sim = SimilarityAccumulator(layer_labels(tb.aux_layer_outputs))
    tally_b, cond, walk_b = AcceptanceTally(k), _ChainCounter(k), CycleWalk()
    tv = kl = tv_k = 0.0
    try:
        starts = range(0, len(sequences), batch_size)
        for i, ref in bar(zip(starts, reference.batches), total=len(starts), desc="drift point", disable=not progress,
                          leave=False):
            ids, mask = sequences[i: i + batch_size], counted[i: i + batch_size].bool()
            if same:
                sb, greedy_b, logq = ref.states, ref.greedy, ref.logp
            else:
                sb, lb = capture_batch(tb, ids, mask)
                greedy_b, logq = lb.argmax(-1), torch.log_softmax(lb[mask.to(lb.device)].float(), -1)
            update_similarity(sim, ref.states, sb, argmax_a=ref.greedy, argmax_b=greedy_b)
            logp = ref.logp
            p, q = logp.exp(), logq.exp()  # once each: TV, KL and the engines' TV read the same
            tv += float(0.5 * (p - q).abs().sum())
            kl += float((p * (logp - logq)).sum())
            text = shift_mask(ids, 1).to(logp.device)[mask.to(logp.device)]  # the text's next token (where it has one)
            tv_k += float(_tv_seen(p, q, _returned(logp, text, top_k) & _returned(logq, text, top_k)).sum())
            if not same:
                with drafter.serving_target(model_b):
                    walk_b.add(evaluate_batch(drafter, sb, model_b.lm_head, k, tally_b, t_logits=lb).chain_hits, mask)
            cond.add(ref.chain_hits, (ref.greedy == greedy_b), ref.counted)
    finally:
        tb.close()
    res = sim.result()
    n = max(res["tokens"], 1)
    layers = {("last" if layer.layer == "last" else layer.layer.split(" ")[0]):
              {"cosine": layer.cosine_mean, "rel_l2": layer.rel_l2, "cka": layer.cka} for layer in res["layers"]}
    # per sequence, for the bootstrap band of the predictors' held-out errors
    on_b = dict(reference.on_a) if same else {
        **{key: tally_b.result()[key] for key in _TALLY_KEYS}, "walk_accept_len": walk_b.value(),
        "seq_hits": tally_b.seq_hits, "seq_counted": tally_b.seq_counted}
    return DriftMeasures(layers, res["argmax_agreement"], tv / n, kl / n, tv_k / n, res["tokens"], dict(reference.on_a),
                         on_b, cond.result())


@torch.no_grad()
def teacher_forced(model, drafter: Eagle3Drafter, sequences: torch.Tensor, counted: torch.Tensor, k: int = DEFAULT_K,
                   batch_size: int = 8) -> dict:
    """The drafter teacher forced on one target over ``sequences`` [N, S] at ``counted`` [N, S] positions.

    Returns:
        ``acc``, ``chain`` (per draft), ``accept_len`` and ``walk_accept_len`` (:class:`CycleWalk`).
    """
    target = Target.for_drafter(model, drafter.spec)
    tally, walk = AcceptanceTally(k), CycleWalk()
    try:
        with drafter.serving_target(model):
            for i in range(0, len(sequences), batch_size):
                mask = counted[i: i + batch_size]
                states, logits = capture_batch(target, sequences[i: i + batch_size], mask)
                walk.add(evaluate_batch(drafter, states, model.lm_head, k, tally, t_logits=logits).chain_hits, mask)
    finally:
        target.close()
    return {**{k: tally.result()[k] for k in ("acc", "chain", "accept_len")}, "walk_accept_len": walk.value()}


@torch.no_grad()
def top_logprobs(model, sequences: torch.Tensor, counted: torch.Tensor, k: int = 20, batch_size: int = 8) -> list[dict]:
    """What an engine returns for teacher-forced text: per position, the top-k next-token logprobs.

    Returns, per sequence (right padding dropped): ``token_ids`` (list[int]), ``top`` (one entry per
    position i: None for i = 0, else {token id: logprob} of the distribution over token i given
    tokens < i, the top k plus token i itself, as vLLM's ``prompt_logprobs``) and ``count_from``
    (the first position whose token counts: the reply's first token).
    """
    dev = next(model.parameters()).device
    out = []
    for i in range(0, len(sequences), batch_size):
        ids, mask = sequences[i: i + batch_size], counted[i: i + batch_size].bool()
        logp = torch.log_softmax(model(input_ids=ids.to(dev)).logits.float(), -1).cpu()
        values, index = logp.topk(k, dim=-1)
        for row in range(len(ids)):
            where = mask[row].nonzero().flatten()
            if not len(where):
                continue
            end = min(int(where[-1]) + 2, ids.shape[1])  # the last counted position predicts token end - 1
            tokens = ids[row, :end].tolist()
            top: list[dict | None] = [None]
            for pos in range(1, end):
                entry = dict(zip(index[row, pos - 1].tolist(), values[row, pos - 1].tolist()))
                entry.setdefault(tokens[pos], float(logp[row, pos - 1, tokens[pos]]))
                top.append(entry)
            out.append({"token_ids": tokens, "top": top, "count_from": int(where[0]) + 1})
    return out


def write_engine_file(source, sequences: torch.Tensor, counted: torch.Tensor, path, layout: str = "vllm",
                      k: int = 20) -> Path:
    """Score ``sequences`` with the target at ``source`` and write the responses an engine would return (JSONL).

    Args:
        layout: ``vllm`` (OpenAI-server ``prompt_logprobs``) or ``sglang`` (``/generate`` with ``return_logprob``).
    """

    model, _ = load_target(source)
    to_response = {"vllm": vllm_response, "sglang": sglang_response}[layout]
    return write_jsonl(path, [to_response(s) for s in top_logprobs(model, sequences, counted, k)])
