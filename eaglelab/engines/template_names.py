"""Which SpecForge chat template a target's training data is rendered with, picked from the target or refused.

SpecForge renders every training conversation with a template of its own registry (``data.chat_template``,
``--chat-template``; SpecForge 0.2.0's ``specforge/data/template.py``), not with the target's Jinja template,
and masks the loss by that template's assistant header. One picked wrong trains the drafter on prompts the
target never serves. The recipes take the name from here (:mod:`eaglelab.engines.recipes`). No torch.
"""

from __future__ import annotations

from typing import Any

from eaglelab.checkpoints.targets.config import target_field
from eaglelab.checkpoints.targets.tokenizer_files import read_target_files, read_tokenizer
from eaglelab.errors import EaglelabError, ParameterError

#: SpecForge 0.2.0's chat templates picked by the target's ``model_type`` (its registry, specforge/data/template.py).
CHAT_TEMPLATES = {"llama": "llama3", "llama4": "llama4"}
#: SpecForge 0.2.0's Kimi templates: Kimi-K2-Instruct's, and the thinking one (K2-Thinking, K2.5 and later).
KIMI_TEMPLATES = {"instruct": "kimi-k2-instruct", "thinking": "kimi-k2-thinking"}


def chat_template_for(given: str | None, target: str, target_cfg: dict[str, Any]) -> tuple[str, str]:
    """SpecForge's chat template for the new target, and how that is known: ``(name, source)``.

    ``given`` (``--chat-template``): as given. A Llama target: ``llama3``; Llama 4: ``llama4``. A Kimi target
    (``model_type`` ``kimi_k2`` or ``kimi_k25``): ``kimi-k2-thinking`` when its own chat template opens a ``<think>`` block at the
    generation prompt (K2-Thinking, K2.5 and later), else ``kimi-k2-instruct``; a Kimi-K2.5 whose template
    cannot be read is a thinking model as published. Anything else is not guessed: a template picked wrong
    shapes every training prompt otherwise than the target serves them (and masks the loss elsewhere).

    Raises:
        ParameterError: the target does not say which template (``--chat-template`` names the flag to pass).
    """
    if given is not None:
        return given, "given"
    kinds = {str(k) for k in ((target_cfg or {}).get("model_type"), target_field(target_cfg, "model_type")) if k}
    if kinds & {"kimi_k2", "kimi_k25"}:
        thinking = _opens_thinking(target)
        if thinking is None and "kimi_k25" in kinds:
            return KIMI_TEMPLATES["thinking"], "a Kimi-K2.5 target (a thinking model; its chat template was not read)"
        if thinking is not None:
            kind = "thinking" if thinking else "instruct"
            return KIMI_TEMPLATES[kind], (f"a Kimi target whose chat template {'opens' if thinking else 'has no'} "
                                          "<think> block")
        raise ParameterError("--chat-template", f"{target} is a Kimi target whose chat template could not "
                                                f"be read: pass --chat-template {KIMI_TEMPLATES['instruct']} "
                                                f"(Kimi-K2-Instruct) or {KIMI_TEMPLATES['thinking']} (a thinking model)")
    for kind in sorted(kinds):
        if kind in CHAT_TEMPLATES:
            return CHAT_TEMPLATES[kind], f"the target's model_type {kind}"
    raise ParameterError("--chat-template", f"{target} (model_type {', '.join(sorted(kinds)) or 'absent'}) "
                                            "does not say which SpecForge chat template it uses: pass --chat-template "
                                            "NAME (SpecForge's data/template.py lists them)")


def _opens_thinking(target: str) -> bool | None:
    """Whether the target's own default chat template writes ``<think>`` (None: no template could be read)."""
    try:
        template = read_tokenizer(read_target_files(target)).templates.get("default")
    except EaglelabError:
        return None
    return None if template is None else "<think>" in template
