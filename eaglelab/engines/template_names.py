"""Which SpecForge chat template a target's training data is rendered with, read from the target's own template.

SpecForge renders every training conversation with a template of its own registry (``data.chat_template``,
``--chat-template``; SpecForge 0.2.0's ``specforge/data/template.py``), not with the target's Jinja template,
and masks the loss by that template's assistant header. One picked wrong trains the drafter on prompts the
target never serves. So the name is read from what the target's own template writes: it is rendered (in the
sandboxed child, :mod:`eaglelab.checkpoints.targets.chat_templates`) on a conversation, and the registry's
template whose user header, assistant header (the generation prompt the rendering ends with) and end of turn
all appear is the one (:data:`SPECFORGE_TEMPLATES`, checked against SpecForge's registry by the tests). A ChatML
target (SmolLM2, Yi, TinyLlama-Chat, Qwen) is ``qwen``, whatever its ``model_type`` says; a template that
matches none is refused by name. The recipes take the name from here (:mod:`eaglelab.engines.recipes`). No torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.targets.chat_templates import render
from eaglelab.checkpoints.targets.config import target_field
from eaglelab.checkpoints.targets.tokenizer_files import Tokenizer, read_target_files, read_tokenizer
from eaglelab.errors import EaglelabError, ParameterError
from eaglelab.inputs import printable, quoted


@dataclass(frozen=True)
class SpecForgeTemplate:
    """One template of SpecForge's registry, as it renders a conversation (``specforge/data/template.py``).

    Attributes:
        name: its registry name (``--chat-template``).
        user, assistant: the headers that open a user's and an assistant's turn (the assistant's is the
            generation prompt; the loss is masked up to it).
        end: the token that ends a turn (None: the template names none).
        thinking: whether it opens a reasoning block (SpecForge's ``enable_thinking``).
    """

    name: str
    user: str
    assistant: str
    end: str | None
    thinking: bool = False

    def written_by(self, rendered: str) -> bool:
        """Whether a rendering of a conversation (with its generation prompt) is in this template's turns."""
        return self.user in rendered and rendered.endswith(self.assistant) and (self.end is None or self.end in rendered)


#: SpecForge 0.2.0's registry, in its order: the templates a rendering can be matched to (gpt-oss' harmony channels,
#: which name no headers, are given by name only). Kimi's are picked from the config (:data:`KIMI_TEMPLATES`): the
#: registry's Kimi user header is not what Kimi's own template writes.
SPECFORGE_TEMPLATES = (
    SpecForgeTemplate("llama3", "<|start_header_id|>user<|end_header_id|>",
                      "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    SpecForgeTemplate("llama4", "<|header_start|>user<|header_end|>", "<|header_start|>assistant<|header_end|>\n\n",
                      "<|eot|>"),
    SpecForgeTemplate("qwen", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n"),
    SpecForgeTemplate("lfm", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n"),
    SpecForgeTemplate("phi3", "<|user|>\n", "<|assistant|>\n", "<|end|>\n"),
    SpecForgeTemplate("phi4", "<|im_start|>user<|im_sep|>", "<|im_start|>assistant<|im_sep|>", "<|im_end|>"),
    SpecForgeTemplate("phi4-mini", "<|user|>", "<|assistant|>", "<|end|>"),
    SpecForgeTemplate("gpt-oss-naive", "<|start|>user<|message|>", "<|start|>assistant<|channel|>analysis<|message|>",
                      "<|end|>"),
    SpecForgeTemplate("deepseek-r1-distill", "<｜User｜>", "<｜Assistant｜>", None),
    SpecForgeTemplate("qwen3-thinking", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n", True),
    SpecForgeTemplate("qwen3-instruct", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n"),
    SpecForgeTemplate("qwen3-next-thinking", "<|im_start|>user\n", "<|im_start|>assistant\n<think>\n", "<|im_end|>\n",
                      True),
    SpecForgeTemplate("kimi-k3-thinking", '<|open|>message role="user"<|sep|>',
                      '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>', "<|end_of_msg|>"),
    SpecForgeTemplate("deepseek-v3", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    SpecForgeTemplate("deepseek-v2", "User: ", "Assistant: ", "<｜end▁of▁sentence｜>"),
    SpecForgeTemplate("ling-flash-2.0", "<role>HUMAN</role>", "<role>ASSISTANT</role>", "<|role_end|>"),
    SpecForgeTemplate("deepseek-v32", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", True),
    SpecForgeTemplate("glm-5.2", "<|user|>", "<|assistant|><think>", "<|user|>"),
    SpecForgeTemplate("gemma", "<start_of_turn>user\n", "<start_of_turn>model\n", "<end_of_turn>\n"),
    SpecForgeTemplate("longcat", " USER:", " ASSISTANT:", "</longcat_s>"),
    SpecForgeTemplate("longcat_xml", "<longcat_user>", "<longcat_assistant>", "</longcat_s>"),
    SpecForgeTemplate("qwen3.5", "<|im_start|>user\n", "<|im_start|>assistant\n<think>\n", "<|im_end|>\n", True),
    SpecForgeTemplate("inkling-thinking", "<|message_user|>", "<|message_model|>", "<|message_user|>", True),
)
#: Every name SpecForge 0.2.0's registry holds (the matched ones, Kimi's, and gpt-oss' harmony template).
SPECFORGE_NAMES = (*(t.name for t in SPECFORGE_TEMPLATES), "gpt-oss", "kimi-k2-thinking", "kimi-k2-instruct")
#: SpecForge 0.2.0's Kimi templates: Kimi-K2-Instruct's, and the thinking one (K2-Thinking, K2.5 and later).
KIMI_TEMPLATES = {"instruct": "kimi-k2-instruct", "thinking": "kimi-k2-thinking"}
#: SpecForge templates a target without a chat template of its own (a base model) is trained with, by ``model_type``:
#: the family's chat format, assumed, and said so.
BASE_MODEL_TEMPLATES = {"llama": "llama3", "llama4": "llama4"}
#: The conversation a target's template is rendered on to read its turns (no system turn: a template that adds its
#: own default system prompt still shows its user and assistant headers).
PROBE_CONVERSATION = ({"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."},
                      {"role": "user", "content": "How are you?"})


def chat_template_for(given: str | None, target: str, target_cfg: dict[str, Any]) -> tuple[str, str]:
    """SpecForge's chat template for the new target, and how that is known: ``(name, source)``.

    ``given`` (``--chat-template``): as given (a custom template registered in the user's SpecForge too). A Kimi
    target (``model_type`` ``kimi_k2`` or ``kimi_k25``): ``kimi-k2-thinking`` when its own chat template opens a ``<think>`` block
    (K2-Thinking, K2.5 and later), else ``kimi-k2-instruct``; a Kimi-K2.5 whose template cannot be read is a
    thinking model as published. Any other target: its own default template rendered, and the registry's template
    whose turns it writes (:func:`matching_templates`); a target that ships no template (a base model): its family's
    by ``model_type`` (:data:`BASE_MODEL_TEMPLATES`), said to be assumed.

    Raises:
        ParameterError: a target whose template matches none of SpecForge's, does not render, or is absent without a
            family to assume (``--chat-template`` names the flag to pass).
    """
    if given is not None:  # a name of the user's SpecForge (a template they registered is theirs to name)
        return given, "given"
    kinds = {str(k) for k in ((target_cfg or {}).get("model_type"), target_field(target_cfg, "model_type")) if k}
    tokenizer = _tokenizer(target)
    template = tokenizer.templates.get("default") if tokenizer is not None else None
    if kinds & {"kimi_k2", "kimi_k25"}:
        return _kimi_template(target, kinds, template)
    if template is None:
        base = next((BASE_MODEL_TEMPLATES[k] for k in sorted(kinds) if k in BASE_MODEL_TEMPLATES), None)
        if base is not None:
            return base, (f"the target ships no chat template (a base model): its family's, model_type {min(kinds)}, "
                          "assumed")
        raise ParameterError("--chat-template", f"{printable(target)} (model_type {', '.join(sorted(kinds)) or 'absent'}) "
                                                "ships no chat template and names no family: pass --chat-template NAME "
                                                "(SpecForge's data/template.py lists them)")
    rendering = render(template, PROBE_CONVERSATION, tokenizer.specials)
    if rendering.text is None:
        raise ParameterError("--chat-template", f"{printable(target)}'s chat template does not render "
                                                f"({rendering.problem}): pass --chat-template NAME")
    matches = matching_templates(rendering.text, "<think>" in template)
    if not matches:
        raise ParameterError("--chat-template", f"{printable(target)}'s chat template writes turns no SpecForge template "
                                                f"writes (its generation prompt ends {quoted(rendering.text[-40:])}): "
                                                "register one in SpecForge and pass --chat-template NAME")
    best = matches[0]
    also = f" (as do {', '.join(t.name for t in matches[1:])})" if len(matches) > 1 else ""
    return best.name, (f"the target's own chat template writes its turns: user {quoted(best.user)}, assistant "
                       f"{quoted(best.assistant)}{also}")


def matching_templates(rendered: str, thinks: bool) -> list[SpecForgeTemplate]:
    """SpecForge's templates whose turns ``rendered`` is written in, best first: those that reason as the target's
    template does (``thinks``: it writes ``<think>``), then the longest assistant header (the most specific), then
    the registry's order (ChatML: ``qwen`` before ``lfm`` and ``qwen3-instruct``, which write the same turns)."""
    found = [t for t in SPECFORGE_TEMPLATES if t.written_by(rendered)]
    return sorted(found, key=lambda t: (t.thinking != thinks, -len(t.assistant)))


def _tokenizer(target: str) -> Tokenizer | None:
    """The target's tokenizer files (templates, special tokens), or None when they cannot be read."""
    try:
        return read_tokenizer(read_target_files(target))
    except EaglelabError:
        return None


def _kimi_template(target: str, kinds: set[str], template: str | None) -> tuple[str, str]:
    """Kimi's SpecForge template from whether its own template opens a ``<think>`` block."""
    if template is None and "kimi_k25" in kinds:
        return KIMI_TEMPLATES["thinking"], "a Kimi-K2.5 target (a thinking model; its chat template was not read)"
    if template is not None:
        thinking = "<think>" in template
        kind = "thinking" if thinking else "instruct"
        return KIMI_TEMPLATES[kind], f"a Kimi target whose chat template {'opens' if thinking else 'has no'} <think> block"
    raise ParameterError("--chat-template", f"{printable(target)} is a Kimi target whose chat template could not be "
                                            f"read: pass --chat-template {KIMI_TEMPLATES['instruct']} (Kimi-K2-Instruct) "
                                            f"or {KIMI_TEMPLATES['thinking']} (a thinking model)")
