"""The plug-in probe's inputs at scale: a script that dumps both targets' hidden states, then probes them.

Two 1T-parameter MoE targets do not fit in one process; their serving engines can dump the states
the old drafter reads (:mod:`eaglelab.data.dumps`). ``eaglelab recipe --job probe`` writes the script:
both targets captured on the **same** conversations, tokenized the same way, at the old drafter's
layers, then ``eaglelab probe --old-states --new-states`` on the two folders (targets read for their heads
only), its JSON kept for ``eaglelab predict --calibration``.

- ``specforge``: SpecForge's ``scripts/prepare_hidden_states.py`` on SGLang, the path that works for
  MLA targets (Kimi, DeepSeek); it writes ``rows_*/data_{idx}.ckpt``.
- ``speculators``: vLLM's ``extract_hidden_states`` with the hidden-state connector, driven by
  speculators' ``generate-offline-data`` (``hs_{i}.safetensors``); vLLM refuses MLA targets, so this
  engine is refused for them here, with the reason.

Argument names follow the pinned engines (SpecForge 0.2.0's repository script, speculators 0.9.0,
whose parser the tests run). Building the script reads configs and safetensors headers only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.preflight import check_drafter, check_target_pair
from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
from eaglelab.checkpoints.targets.config import is_mla_target, target_layer_count
from eaglelab.checkpoints.targets.reading import load_target_config
from eaglelab.engines.recipes import ENGINE_VERSIONS, TRAINING_ENGINES, Recipe, _local_drafter, as_script_words
from eaglelab.engines.scripts import Here, Step, Var, comment_line, flag_value, script_text, script_value
from eaglelab.engines.template_names import chat_template_for
from eaglelab.errors import ConfigError, ParameterError


@dataclass(frozen=True)
class ProbeRecipeSettings:
    """What the dump-and-probe script needs.

    Attributes:
        engine: ``specforge`` (SGLang capture) or ``speculators`` (vLLM capture).
        old_drafter: the old drafter (local folder or hub id): its layers are dumped, it is probed.
        old_target: the old target (the drafter was trained on it).
        new_target: the new target.
        data: the conversations both targets are run on (JSONL on the cluster), the same for both.
        workdir: the folder on the cluster for the dumps and the probe's JSON.
        gpus: GPUs per target (tensor parallel).
        max_length: tokens per conversation.
        chat_template: SpecForge's template name (one for both: the tokens must be the same); None: picked from
            the targets (:func:`~eaglelab.engines.template_names.chat_template_for`), refused in one line when
            they would not get the same one or do not say which.
    """

    engine: str
    old_drafter: str
    old_target: str
    new_target: str
    data: str = "conversations.jsonl"
    workdir: str = "probe"
    gpus: int = 8
    max_length: int = 4096
    chat_template: str | None = None


class ProbeRecipe(Recipe):
    """The dump-and-probe script: steps, and where each setting came from."""

    def script(self) -> str:
        s = self.settings
        head = [
            "#!/usr/bin/env bash",
            f"# The plug-in probe at scale with {s.engine} {ENGINE_VERSIONS[s.engine]}, by `eaglelab recipe --job probe`.",
            comment_line(f"  old drafter: {s.old_drafter}"),
            comment_line(f"  old target (A): {s.old_target}"),
            comment_line(f"  new target (B): {s.new_target}"),
            comment_line(f"  data:        {s.data} (the same conversations for both targets)"),
            comment_line(f"  work folder: {s.workdir}"),
            *[comment_line(f"  {k}: {v}") for k, v in self.provenance.items()],
        ]
        return script_text(head, s.workdir, self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"job": "probe", "settings": asdict(self.settings), "steps": [st.to_json() for st in self.steps],
                "files": sorted(self.files), "provenance": self.provenance, "layers": self.vocab_map}


def check_probe_recipe(s: ProbeRecipeSettings) -> dict[str, Any]:
    """The drafter on target A, the two targets comparable, the engine able to capture them; the layers dumped.

    Returns:
        ``{"aux_layer_outputs", "vllm_layer_ids", "target_layers"}``.

    Raises:
        ParameterError: an unknown engine, a value the script cannot hold, vLLM asked for an MLA target.
        ConfigError, CheckpointMismatchError: the checkpoints (from configs and headers).
    """
    if s.engine not in TRAINING_ENGINES:
        raise ParameterError("--engine", f"unknown engine {s.engine!r}; choose {' or '.join(TRAINING_ENGINES)}")
    for name in ("gpus", "max_length"):
        if getattr(s, name) < 1:
            raise ParameterError(f"--{name.replace('_', '-')}", f"must be at least 1, got {getattr(s, name)}")
    for name in ("old_drafter", "old_target", "new_target", "data", "workdir", "chat_template"):
        if getattr(s, name) is not None:
            script_value(f"--{name.replace('_', '-')}", getattr(s, name))
    spec, cfg_a = check_drafter(s.old_drafter, s.old_target)
    cfg_b = load_target_config(s.new_target)
    check_target_pair(s.old_target, cfg_a, s.new_target, cfg_b)
    if s.engine == "speculators":
        for name, cfg in ((s.old_target, cfg_a), (s.new_target, cfg_b)):
            if is_mla_target(cfg):
                raise ParameterError("--engine", f"{name} uses multi-head latent attention, and vLLM's hidden-state "
                                                 "extractor refuses MLA targets; use --engine specforge (SGLang)")
    layers = target_layer_count(cfg_a)
    if layers is None:
        raise ConfigError(s.old_target, "config has no num_hidden_layers")
    outs = aux_ids_as_layer_outputs(spec.aux_layer_ids, spec.aux_convention, layers)
    template = probe_template(s, cfg_a, cfg_b) if s.engine == "specforge" else None
    return {"chat_template": template, "aux_layer_outputs": list(outs), "vllm_layer_ids": [i + 1 for i in outs] + [layers],
            "target_layers": layers, "mla": spec.mla is not None, "hidden_size": spec.hidden_size,
            "vocab_size": spec.vocab_size, "draft_vocab_size": spec.draft_vocab_size}


def probe_template(s: ProbeRecipeSettings, cfg_a: dict[str, Any], cfg_b: dict[str, Any]) -> tuple[str, str]:
    """SpecForge's chat template for both dumps, and how it is known: ``(name, source)``.

    Both targets must see the same token ids (the probe pairs the samples and checks them), so one template
    serves both: the one given, else the one each target implies when they agree. Two targets that imply
    different templates (a re-templated release) are refused: which conversations to probe on is the
    user's choice, and the probe needs one.

    Raises:
        ParameterError: naming ``--chat-template``.
    """
    if s.chat_template is not None:
        return s.chat_template, "given"
    name_b, why_b = chat_template_for(None, s.new_target, cfg_b)
    name_a, why_a = chat_template_for(None, s.old_target, cfg_a)
    if name_a != name_b:
        raise ParameterError("--chat-template", f"the targets imply different SpecForge templates ({name_a} for "
                                                f"{s.old_target}: {why_a}; {name_b} for {s.new_target}: {why_b}); the probe "
                                                "reads both on the same token ids: pass the one to probe with")
    return name_b, why_b


def capture_config(layers: dict[str, Any]) -> dict[str, Any]:
    """A config SpecForge 0.2.0 reads, naming the old drafter's layers, for an MLA drafter's capture.

    SpecForge's capture script resolves its draft config through its registry, which has no MLA drafter
    (``Eagle3DeepseekV2ForCausalLM``): it refuses the old drafter's own config. The capture needs the layers
    only, so this Llama EAGLE-3 config of the same width and vocabulary names them (nested ids, layer outputs).
    """
    H = layers["hidden_size"]
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": H, "intermediate_size": H, "num_attention_heads": 1, "num_key_value_heads": 1,
            "head_dim": H, "vocab_size": layers["vocab_size"], "draft_vocab_size": layers["draft_vocab_size"],
            "tie_word_embeddings": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers["aux_layer_outputs"],
                             "use_aux_hidden_state": True}}


def build_probe_recipe(s: ProbeRecipeSettings) -> ProbeRecipe:
    """The dump-and-probe script for ``s.engine``, after :func:`check_probe_recipe`."""
    layers = check_probe_recipe(s)
    given, s = s, as_script_words(s)
    steps: list[Step] = []
    old = _local_drafter(s, steps)
    w = s.workdir
    folders = {"a": f"{w}/states-a", "b": f"{w}/states-b"}
    targets = {"a": s.old_target, "b": s.new_target}
    files = {}
    draft_config = f"{old}/config.json"
    if s.engine == "specforge" and layers["mla"]:
        files["capture_config.json"] = json.dumps(capture_config(layers), indent=1) + "\n"
        draft_config = Here("capture_config.json")
    if s.engine == "specforge":
        for key in ("a", "b"):
            steps.append(Step(
                f"dump target {key.upper()}'s hidden states at the old drafter's layers (SpecForge repository script)",
                ["torchrun", f"--nproc_per_node={s.gpus}", "scripts/prepare_hidden_states.py", "--target-model-path",
                 targets[key], "--strategy", "eagle3", "--draft-model-config", draft_config, "--data-path",
                 s.data, "--output-path", folders[key], *flag_value("--chat-template", layers["chat_template"][0]),
                 "--max-length", str(s.max_length)],
                [f"Layer outputs {layers['aux_layer_outputs']} (the old drafter's) and the last hidden state after the "
                 "final norm;", "the same data, template, GPUs and batch size for both targets: the probe pairs the "
                 "samples by index.", "Run from a SpecForge checkout (scripts/ is not in its wheel)."]
                + (["capture_config.json (beside this script) names the MLA drafter's layers in a config SpecForge's "
                    "registry reads (it has no MLA drafter)."] if layers["mla"] else [])))
    else:
        steps.append(Step(
            "tokenize the conversations once, with target A's tokenizer (both targets read the same token ids)",
            ["speculators", "prepare-data", "--model", s.old_target, "--data", s.data, "--output", f"{w}/data",
             "--seq-length", str(s.max_length)], engine_command=("speculators", "prepare-data")))
        for key in ("a", "b"):
            extract = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                       "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layers["vllm_layer_ids"]}}}
            connector = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                         "kv_connector_extra_config": {"shared_storage_path": f"{w}/vllm-{key}"}}
            steps.append(Step(
                f"serve target {key.upper()} with vLLM, extracting hidden states at the old drafter's layers",
                ["vllm", "serve", targets[key], "--tensor-parallel-size", str(s.gpus), "--port", "8000",
                 "--speculative-config", json.dumps(extract), "--kv-transfer-config", json.dumps(connector)],
                [f"vLLM's layer inputs {layers['vllm_layer_ids']}: the drafter's three, then the last layer (taken "
                 "before the final norm; the probe applies the target's norm)."], background=True))
            steps.append(Step(
                f"dump target {key.upper()}'s states on the tokenized conversations",
                ["speculators", "generate-offline-data", "--model", targets[key], "--endpoint",
                 "http://127.0.0.1:8000/v1", "--preprocessed-data", f"{w}/data", "--output", folders[key]],
                engine_command=("speculators", "generate-offline-data")))
            steps.append(Step("stop the vLLM server", ["kill", Var("SERVER_PID")]))
    steps.append(Step(
        "probe the two dumps (the targets are read for their norm, lm_head and embedding only)",
        ["eaglelab", "probe", "--old-states", folders["a"], "--new-states", folders["b"], "--old-drafter", old,
         "--old-target", s.old_target, "--new-target", s.new_target, "--sequences", "1000000000", "--json"],
        ["Its JSON (probe.json) holds the verdict with its bootstrap band; `eaglelab predict --calibration",
         f"{w}/probe.json` then predicts the next target's plug-in τ from engine logprobs alone."],
        engine_command=("eaglelab", "probe"), stdout=f"{w}/probe.json"))
    provenance = {"layers dumped": f"{layers['aux_layer_outputs']} (layer outputs, the old drafter's) + the last",
                  "pairing": "by sample index, token ids checked equal"}
    if layers["chat_template"] is not None:
        provenance["chat template"] = "{} ({})".format(*layers["chat_template"])
    return ProbeRecipe(given, steps, files, provenance, layers)


def write_probe_recipe(s: ProbeRecipeSettings, out_dir: str | Path, overwrite: bool = False) -> ProbeRecipe:
    """Build and write ``run.sh`` and ``recipe.json`` into ``out_dir`` (atomically; ``overwrite`` only eaglelab's own)."""
    recipe = build_probe_recipe(s)
    recipe.write(out_dir, overwrite=overwrite)
    return recipe
