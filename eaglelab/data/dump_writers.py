"""The engines' hidden-state dumps written for targets that load in one process: the demo world's, the tests'.

What SpecForge's ``prepare_hidden_states.py`` and vLLM's hidden-state connector write at scale, in their
layouts (:mod:`eaglelab.data.dumps` reads both and says where each comes from), made here by running a
small target over the probe's sequences: ``eaglelab dump`` and notebook 03's section 4.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import torch
from safetensors.torch import save_file

from eaglelab.data.dumps import LAYOUTS, counted_length, tokens_from_counted
from eaglelab.errors import DumpError
from eaglelab.inputs import printable
from eaglelab.model.targets import Target, decoder_layers
from eaglelab.progress import progress as bar


def specforge_payload(input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                      last: torch.Tensor) -> dict[str, torch.Tensor]:
    """One sample as SpecForge saves it, from eaglelab's convention.

    Args:
        input_ids: [S]; loss_mask: [S] bool (the token after t is a response token);
        aux: [S, 3H]; last: [S, H] after the final norm.
    """
    return {"input_ids": input_ids.long().clone(), "loss_mask": tokens_from_counted(loss_mask),
            "hidden_state": last[None].clone(), "aux_hidden_state": aux[None].clone()}


def vllm_payload(input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                 last_before_norm: torch.Tensor) -> dict[str, torch.Tensor]:
    """One request as vLLM's hidden-state connector writes it, plus the token loss mask speculators keeps apart.

    Args:
        aux: [S, 3H]; last_before_norm: [S, H] the last decoder layer's output (before the final norm).
    """
    S, H = last_before_norm.shape
    states = torch.cat([aux.reshape(S, 3, H), last_before_norm[:, None]], 1).contiguous()
    return {"hidden_states": states, "token_ids": input_ids.long().contiguous(),
            "loss_mask": tokens_from_counted(loss_mask)}


@torch.no_grad()
def capture_dumps(model, drafter_spec, ids: torch.Tensor, counted: torch.Tensor, out, layout: str = "specforge",
                  batch_size: int = 8, dtype: torch.dtype = torch.float32, compress: bool = False,
                  progress: bool = True) -> int:
    """Run a (small) target over sequences and write the dumps its serving engine would, into ``out``.

    What a team's engine writes at scale, made here for targets that load in one process: the demo
    world's, the tests'. SpecForge rows keep their padding (as its script writes them); vLLM requests
    are written unpadded, with the token loss mask beside the states.

    Args:
        model: a transformers causal LM.
        drafter_spec: the drafter whose three layers are dumped.
        ids: [N, S] token ids; counted: [N, S] eaglelab's loss mask.
        out: an :class:`eaglelab.outputs.OutputFolder` (each file written atomically and recorded).
        layout: ``specforge`` or ``vllm``.
        dtype: storage dtype (the engines write the model's, bf16 at scale).
        compress: SpecForge's ``--compress`` (``.ckpt.gz``).

    Returns:
        the number of samples written.
    """
    if layout not in LAYOUTS:
        raise DumpError("layout", f"must be one of {', '.join(LAYOUTS)}, got {printable(repr(layout))}")
    target = Target.for_drafter(model, drafter_spec)
    box = {}
    hook = decoder_layers(model)[-1].register_forward_hook(
        lambda _m, _i, o: box.__setitem__("raw", o[0] if isinstance(o, tuple) else o))
    try:
        for start in bar(range(0, len(ids), batch_size), desc=f"dump ({layout})", disable=not progress):
            batch = ids[start: start + batch_size]
            got = target.forward(batch.to(target.device))
            for j in range(len(batch)):
                i = start + j
                sample = (batch[j].cpu(), counted[i].bool().cpu(), got.aux[j].to("cpu", dtype),
                          (got.last_hidden if layout == "specforge" else box["raw"])[j].to("cpu", dtype))
                group = (i // 2000) * 2000
                if layout == "specforge":
                    name = f"rows_{group}-{group + 2000}/data_{i}.ckpt" + (".gz" if compress else "")
                    buf = io.BytesIO()
                    torch.save(specforge_payload(*sample), buf)
                    raw = gzip.compress(buf.getvalue(), compresslevel=6) if compress else buf.getvalue()
                    with out.writing(name) as tmp:
                        Path(tmp).write_bytes(raw)
                else:
                    n = counted_length(sample[1])  # a request is unpadded
                    with out.writing(f"hs_{i}.safetensors") as tmp:
                        save_file(vllm_payload(*(t[:n] for t in sample)), str(tmp))
    finally:
        hook.remove()
        target.close()
    return len(ids)
