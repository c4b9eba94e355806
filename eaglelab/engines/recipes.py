"""Warm-start recipes for the training engines a team runs at scale: SpecForge and speculators.

The workbook decides on a small scale; the warm start itself runs on the cluster, in SpecForge
(SGLang for the target) or speculators (vLLM for the target). A recipe is a runnable, commented
shell script and the config files it needs: regenerate the responses with the new target, capture
its hidden states, train from the old drafter **with the old drafter's own vocabulary map** (never
a regenerated one: that re-assigns every ``lm_head`` row to another token, the collapse of SpecForge
issue #300), export, check with ``eaglelab compare`` that the maps survived, and serve.

Argument names follow the pinned engines' own parsers and config schemas (SpecForge 0.2.0,
speculators 0.9.0; the tests parse every engine command with them). Two SpecForge steps use
scripts of its repository that its wheel does not ship; they are marked so in the script.

Building a recipe reads configs and safetensors headers only: no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs, is_speculators_config
from eaglelab.checkpoints.drafters.tensor_table import strip_prefix
from eaglelab.checkpoints.drafters.verdicts import drafter_vs_target
from eaglelab.checkpoints.targets.config import is_mla_target, is_multimodal, target_layer_count
from eaglelab.checkpoints.targets.reading import load_target_config, read_target_weights
from eaglelab.engines.scripts import (
    Here,
    Step,
    Var,
    comment_line,
    flag_value,
    path_word,
    script_text,
    script_value,
    write_recipe_folder,
    yaml_text,
)
from eaglelab.engines.template_names import chat_template_for
from eaglelab.errors import ConfigError, ParameterError
from eaglelab.inputs import field_int, printable, read_json_object
from eaglelab.settings import DEFAULT_K

#: Training engines a recipe is written for (the serving engines eaglelab drives: vllm.SERVING_ENGINES).
TRAINING_ENGINES = ("specforge", "speculators")
#: The engine versions whose parsers and schemas the recipes are written against.
ENGINE_VERSIONS = {"specforge": "0.2.0", "speculators": "0.9.0"}
#: Each engine's own defaults, used when neither the user nor the workbook gives a value.
ENGINE_DEFAULTS = {
    "specforge": {"learning_rate": 1e-4, "ttt_length": 7, "epochs": 1},
    "speculators": {"learning_rate": 1e-3, "ttt_length": 3, "epochs": 20},
}


@dataclass(frozen=True)
class RecipeSettings:
    """What a warm-start recipe needs.

    Attributes:
        engine: ``specforge`` or ``speculators``.
        old_drafter: the old drafter (local folder or hub id).
        new_target: the new target (local folder or hub id).
        data: prompts / conversations to regenerate with the new target (JSONL on the cluster).
        workdir: the folder on the cluster for every intermediate file (created by the script).
        gpus: GPUs of the training node.
        learning_rate, epochs, ttt_length: None: from the workbook run or the engine's default.
        k: drafts per cycle when serving.
        max_length: tokens per training sequence.
        chat_template: SpecForge's template name for the target (its ``data.chat_template``); None: picked
            from the target (:func:`~eaglelab.engines.template_names.chat_template_for`), or refused in one line.
        embedding_key, lm_head_key: the target's names of its embedding and head, which SpecForge reads
            (its ``model.embedding_key`` / ``model.lm_head_key``); None: read from the target's headers
            (Kimi-K2.5's ``language_model.model.embed_tokens.weight``), SpecForge's defaults for a text
            model whose headers are not readable.
    """

    engine: str
    old_drafter: str
    new_target: str
    data: str = "prompts.jsonl"
    workdir: str = "warm-start"
    gpus: int = 8
    learning_rate: float | None = None
    epochs: int | None = None
    ttt_length: int | None = None
    k: int = DEFAULT_K
    max_length: int = 4096
    chat_template: str | None = None
    embedding_key: str | None = None
    lm_head_key: str | None = None


#: SpecForge 0.2.0's defaults for where a target keeps its embedding and head.
SPECFORGE_KEYS = {"embedding_key": "model.embed_tokens.weight", "lm_head_key": "lm_head.weight"}


@dataclass(frozen=True)
class Recipe:
    """A warm-start recipe: steps, the files they read, and where each setting came from."""

    settings: RecipeSettings
    steps: list[Step]
    files: dict[str, str]
    provenance: dict[str, str]
    vocab_map: dict[str, Any]

    def script(self) -> str:
        """The runnable, commented bash script."""
        s = self.settings
        head = [
            "#!/usr/bin/env bash",
            f"# Warm start of an EAGLE-3 drafter with {s.engine} {ENGINE_VERSIONS[s.engine]}, written by `eaglelab recipe`.",
            comment_line(f"  old drafter: {s.old_drafter}"),
            comment_line(f"  new target:  {s.new_target}"),
            comment_line(f"  data:        {s.data} (prompts / conversations, regenerated with the new target)"),
            comment_line(f"  work folder: {s.workdir}"),
            "# Settings and where they come from:",
            *[comment_line(f"  {k}: {v}") for k, v in self.provenance.items()],
            *(["# A full-vocabulary drafter: draft id = target id, no vocabulary map to keep."]
              if self.vocab_map["full_vocab"] else
              ["# The old drafter's vocabulary map is kept (d2t / t2d: "
               f"{self.vocab_map['draft_slots']} draft slots over {self.vocab_map['target_vocab']} target tokens);",
               "# a regenerated map would give every lm_head row another token to predict."]),
        ]
        return script_text(head, s.workdir, self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"settings": asdict(self.settings), "steps": [st.to_json() for st in self.steps],
                "files": sorted(self.files), "provenance": self.provenance, "vocab_map": self.vocab_map}

    def write(self, out_dir: str | Path, overwrite: bool = False) -> Path:
        """Write ``run.sh``, the config files and ``recipe.json`` into ``out_dir``, atomically.

        Raises:
            OverwriteError: ``out_dir`` holds a recipe and ``overwrite`` is False, or files eaglelab did not write.
            OutputError: the folder cannot be written.
        """
        return write_recipe_folder(out_dir, self.script(), self.files, self.to_json(), overwrite)


SAVE_VOCAB_MAP = """\
\"\"\"Save a drafter's d2t / t2d as the torch file SpecForge's model.vocab_mapping_path reads.

usage: python save_vocab_map.py DRAFTER_DIR OUT.pt
\"\"\"
import sys

import torch
from safetensors.torch import load_file

weights = load_file(sys.argv[1] + "/model.safetensors")
torch.save({"d2t": weights["d2t"], "t2d": weights["t2d"]}, sys.argv[2])
print(f"saved {weights['d2t'].numel()} draft slots over {weights['t2d'].numel()} target tokens to {sys.argv[2]}")
"""

SET_VERIFIER = """\
\"\"\"Copy a speculators drafter and name another target as its verifier.

speculators 0.9.0's --from-pretrained reads the teacher (lm_head, norm) and the layer ids from the
verifier named in the checkpoint's config.json, not from --verifier-name-or-path.

usage: python set_verifier.py DRAFTER_DIR OUT_DIR NEW_TARGET
\"\"\"
import json
import shutil
import sys

shutil.copytree(sys.argv[1], sys.argv[2])
path = sys.argv[2] + "/config.json"
with open(path) as fh:
    config = json.load(fh)
config["speculators_config"]["verifier"]["name_or_path"] = sys.argv[3]
with open(path, "w") as fh:
    json.dump(config, fh, indent=2)
"""


# --------------------------------------------------------------------------- checks

def check_warm_start(settings: RecipeSettings) -> dict[str, Any]:
    """Refuse a warm start that cannot keep the old drafter's vocabulary map; describe the map it keeps.

    Raises:
        ParameterError: unknown engine or impossible settings, or an engine that cannot train this
            drafter or capture this target (SpecForge has no MLA drafter; vLLM captures no MLA target), or a
            SpecForge recipe for a target that does not say its chat template (``--chat-template`` not given).
        ConfigError: the old drafter has no d2t / t2d to keep (a reduced vocabulary), or cannot load on
            the new target (its map would have to be replaced).
    """
    if settings.engine not in TRAINING_ENGINES:
        raise ParameterError("--engine", f"unknown engine {settings.engine!r}; choose {' or '.join(TRAINING_ENGINES)}")
    for name in ("gpus", "k", "max_length", "epochs", "ttt_length"):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise ParameterError(f"--{name.replace('_', '-')}", f"must be at least 1, got {value}")
    if settings.learning_rate is not None and not 0 < settings.learning_rate < 1:
        raise ParameterError("--lr", f"must be in (0, 1), got {settings.learning_rate}")
    for name in ("old_drafter", "new_target", "data", "workdir", "chat_template", "embedding_key", "lm_head_key"):
        if getattr(settings, name) is not None:  # each reaches the script or its configs
            script_value(f"--{name.replace('_', '-')}", getattr(settings, name))
    insp = inspect_checkpoint(settings.old_drafter)
    if insp.spec is None:
        raise ConfigError(settings.old_drafter, "is not an EAGLE-3 drafter (no drafter config): nothing to warm-start from")
    if insp.spec.mla is not None:
        raise ParameterError("--engine", f"{settings.old_drafter} is an MLA drafter: SpecForge {ENGINE_VERSIONS['specforge']} "
                                         "has no MLA drafter model and speculators no MLA layer; TorchSpec trains "
                                         "Kimi's MLA drafters (warm-start from this checkpoint there)")
    if settings.engine == "speculators" and not insp.spec.draft_vocab_given and not is_speculators_config(insp.config):
        raise ParameterError("--engine", f"{settings.old_drafter}'s config has no draft_vocab_size: speculators "
                                         f"{ENGINE_VERSIONS['speculators']}'s convert would write 32000 for its "
                                         f"{insp.spec.draft_vocab_size}-row lm_head; write \"draft_vocab_size\": "
                                         f"{insp.spec.draft_vocab_size} into its config.json first")
    names = {strip_prefix(n) for n in insp.checkpoint.tensors}
    if not insp.spec.full_vocab and not {"d2t", "t2d"} <= names:
        raise ConfigError(settings.old_drafter, "has no d2t / t2d tensors: the engine would build a new vocabulary map and "
                                         "every lm_head row would stand for another token; refusing the warm start")
    if insp.problems:
        raise ConfigError(settings.old_drafter, f"does not match its own config: {insp.problems[0]}")
    target_cfg = load_target_config(settings.new_target)
    layers = target_layer_count(target_cfg)
    if layers is None:
        raise ConfigError(settings.new_target, "config has no num_hidden_layers")
    if settings.engine == "speculators" and is_mla_target(target_cfg):
        raise ParameterError("--engine", f"{settings.new_target} uses multi-head latent attention, and vLLM's hidden-state "
                                         "extractor (speculators' data step) refuses MLA targets; use --engine specforge")
    verdict = drafter_vs_target(insp.spec, insp.config, target_cfg)
    if verdict.level == "incompatible":
        raise ConfigError(settings.old_drafter, f"cannot warm-start on {settings.new_target}: {verdict.reasons[0]} "
                                                  "(its vocabulary map and fc would have to be replaced: train from "
                                                  "scratch instead)")
    return {"draft_slots": insp.spec.draft_vocab_size, "target_vocab": insp.spec.vocab_size,
            "full_vocab": insp.spec.full_vocab, "aux_layer_ids": list(insp.spec.aux_layer_ids or []),
            "convention": insp.spec.aux_convention, "speculators_format": is_speculators_config(insp.config),
            "target_layers": layers, "keys": target_keys(settings, target_cfg),
            **({"chat_template": chat_template_for(settings.chat_template, settings.new_target, target_cfg)}
               if settings.engine == "specforge" else {})}


def target_keys(settings: RecipeSettings, target_cfg: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Where the new target keeps its embedding and head (SpecForge reads them by name), and how that is known.

    Returns:
        ``{"embedding_key": (name, source), "lm_head_key": (name, source)}``.

    Raises:
        ParameterError: a multimodal target whose headers could not be read and no key given (SpecForge's
            defaults name a text model's tensors and would fail on it).
    """
    given = {"embedding_key": settings.embedding_key, "lm_head_key": settings.lm_head_key}
    weights = read_target_weights(settings.new_target) if None in given.values() else None
    read = {} if weights is None or weights.heads is None else \
        {"embedding_key": weights.heads.embed_tokens, "lm_head_key": weights.heads.lm_head}
    out = {}
    for key, value in given.items():
        if value is not None:
            out[key] = (value, "given")
        elif key in read:
            out[key] = (read[key], "read from the target's safetensors headers")
        elif is_multimodal(target_cfg):
            raise ParameterError(f"--{key.replace('_', '-')}", f"{settings.new_target} wraps its language model "
                                 "(text_config) and its weights' names could not be read: give the key (e.g. "
                                 "language_model.model.embed_tokens.weight)")
        else:
            out[key] = (SPECFORGE_KEYS[key], "SpecForge's default (the target's headers were not read)")
    return out


def settings_from_run(run_dir: str | Path) -> dict[str, Any]:
    """Epochs and TTT length of a workbook fine-tune (``run.json`` of :func:`eaglelab.train.training.train_drafter`).

    The workbook's learning rate is not carried over: it was tuned for a drafter of a small
    target and does not transfer to one of a large target; epochs over the new target's data and
    the unroll length do.

    Returns:
        ``{"epochs", "ttt_length", "source"}``.

    Raises:
        ConfigError: ``run.json`` is missing, not strict JSON, or holds impossible numbers.
    """
    script_value("--from-run", str(run_dir))
    path = Path(run_dir) / "run.json"
    where = printable(str(path))
    run = read_json_object(path, ConfigError)
    cfg = run.get("config")
    if not isinstance(cfg, dict):
        raise ConfigError(where, "is not a workbook run record (no config object)")
    n = field_int(run, "train_sequences", where, ConfigError, high=10**12)
    steps = field_int(cfg, "steps", where, ConfigError, high=10**12)
    batch = field_int(cfg, "batch_size", where, ConfigError, high=10**9)
    ttt = field_int(cfg, "ttt_length", where, ConfigError, high=64)
    epochs = max(1, math.ceil(steps * batch / n))
    return {"epochs": epochs, "ttt_length": ttt, "source": f"workbook run {run_dir} ({steps} steps x {batch} over {n} "
                                                          "sequences)"}


# --------------------------------------------------------------------------- recipes

def build_recipe(settings: RecipeSettings, from_run: str | Path | None = None) -> Recipe:
    """The warm-start recipe for ``settings.engine``, after :func:`check_warm_start`.

    Args:
        settings: engine, checkpoints, data and sizes.
        from_run: a workbook fine-tune folder (notebook 04's warm run) whose epochs and TTT
            length the recipe takes where ``settings`` leaves them unset.
    """
    vocab = check_warm_start(settings)
    defaults = ENGINE_DEFAULTS[settings.engine]
    run = settings_from_run(from_run) if from_run is not None else {}
    provenance = {}
    values = {}
    for key, given in (("learning_rate", settings.learning_rate), ("epochs", settings.epochs),
                       ("ttt_length", settings.ttt_length)):
        if given is not None:
            values[key], provenance[key] = given, f"{given} (given)"
        elif key in run:
            values[key], provenance[key] = run[key], f"{run[key]} (from the {run['source']})"
        else:
            values[key] = defaults[key]
            provenance[key] = f"{defaults[key]} ({settings.engine} {ENGINE_VERSIONS[settings.engine]}'s default)"
    if settings.engine == "specforge":
        for key, (name, source) in vocab["keys"].items():
            provenance[key] = f"{name} ({source})"
        name, source = vocab["chat_template"]
        provenance["chat_template"] = f"{name} ({source})"
        settings = replace(settings, chat_template=name)
    build = _specforge if settings.engine == "specforge" else _speculators
    steps, files = build(as_script_words(settings), vocab, values)
    return Recipe(settings, steps, files, provenance, vocab)


#: The settings of a recipe that are paths (local folders, files on the cluster) or hub ids.
PATH_SETTINGS = ("old_drafter", "new_target", "old_target", "data", "workdir")


def as_script_words(settings):
    """``settings`` with each path as a command's word (:func:`~eaglelab.engines.scripts.path_word`: ``-k2`` is
    written ``./-k2``, so that no engine's parser reads it as an option); the recipe records the settings as given."""
    names = {f.name for f in fields(settings)}
    return replace(settings, **{n: path_word(getattr(settings, n)) for n in PATH_SETTINGS if n in names})


def _local_drafter(s: RecipeSettings, steps: list[Step]) -> str:
    """The old drafter as a local folder on the cluster (downloaded first when it is a hub id)."""
    if Path(s.old_drafter).exists():
        return s.old_drafter
    local = f"{s.workdir}/old-drafter"
    steps.append(Step("download the old drafter", ["hf", "download", s.old_drafter, "--local-dir", local]))
    return local


def _check_step(old: str, new: str, target: str) -> Step:
    return Step("check that the vocabulary map survived (it must read SAME)",
                ["eaglelab", "compare", old, new, "--new-target", target],
                ["`vocabulary maps: MOVED` here means the run regenerated d2t / t2d: do not serve that drafter."])


def _specforge(s: RecipeSettings, vocab: dict, v: dict) -> tuple[list[Step], dict[str, str]]:
    steps: list[Step] = []
    old = _local_drafter(s, steps)
    w = s.workdir
    full = vocab["full_vocab"]  # draft id = target id: SpecForge builds no map, there is none to keep
    vocab_file = "" if full else f"{w}/old_vocab_map.pt"
    if not full:
        steps.append(Step(
            "save the old drafter's vocabulary map where SpecForge reads it (model.vocab_mapping_path)",
            ["python", Here("save_vocab_map.py"), old, vocab_file],
            ["SpecForge loads it with torch.load(...)['d2t' / 't2d'] after the warm-start weights; without it, an",
             "offline run builds a new map from the data and overwrites the old drafter's (SpecForge issue #300)."]))
    steps.append(Step(
        "serve the new target with SGLang, for the regeneration",
        ["python", "-m", "sglang.launch_server", "--model-path", s.new_target, "--tp-size", str(s.gpus), "--port", "30000"],
        background=True))
    steps.append(Step(
        "regenerate the responses with the new target (SpecForge repository script, not in its wheel)",
        ["python", "scripts/regenerate_train_data.py", "--model", s.new_target, "--server-address", "localhost:30000",
         "--input-file-path", s.data, "--output-file-path", f"{w}/regenerated.jsonl"],
        ["Run from a SpecForge checkout (scripts/ of commit abd0346d, the wheel's source); the drafter then learns",
         "what the new target writes. Its flags follow that script as read: it is not in the wheel, so no test parses them."]))
    steps.append(Step("stop the SGLang server", ["kill", Var("SERVER_PID")]))
    steps.append(Step(
        "capture the new target's hidden states at the old drafter's layers (SpecForge repository script)",
        ["torchrun", f"--nproc_per_node={s.gpus}", "scripts/prepare_hidden_states.py", "--target-model-path",
         s.new_target, "--strategy", "eagle3", "--draft-model-config", f"{old}/config.json", "--data-path",
         f"{w}/regenerated.jsonl", "--output-path", f"{w}/hidden_states", *flag_value("--chat-template", s.chat_template),
         "--max-length", str(s.max_length)],
        ["It also writes hidden_states/vocab_mapping/vocab_mapping.pt, built from the new data: do NOT use that",
         "file; the training config points at the old drafter's map."]))
    config = {
        "run_id": "warm",
        "output_dir": f"{w}/runs",
        "model": {"target_model_path": s.new_target, "draft_checkpoint_path": old, "vocab_mapping_path": vocab_file,
                  # where the target keeps its embedding and head (Kimi-K2.5: under language_model.)
                  **{key: name for key, (name, _) in vocab["keys"].items()}},
        "data": {"hidden_states_path": f"{w}/hidden_states", "max_length": s.max_length,
                 "chat_template": s.chat_template},
        "training": {"strategy": "eagle3", "num_epochs": int(v["epochs"]), "learning_rate": float(v["learning_rate"]),
                     "ttt_length": int(v["ttt_length"]), "save_interval": 1000},
        "deployment": {"mode": "local_colocated", "trainer": {"nnodes": 1, "nproc_per_node": s.gpus}},
    }
    steps.append(Step(
        "train from the old drafter, keeping its vocabulary map",
        ["specforge", "train", "--config", Here("warm.yaml")],
        ["warm.yaml (beside this script): draft_checkpoint_path loads the old weights only (no optimizer state),",
         "vocab_mapping_path keeps the old map; the embedding is the new target's, read at embedding_key."],
        engine_command=("specforge", "train")))
    export = f"{w}/export-sglang"
    steps.append(Step(
        "export for SGLang",
        ["specforge", "export", "--to", "sglang", "--checkpoint", f"{w}/runs/warm-latest", "--draft-config",
         f"{old}/config.json", "--output-dir", export, *([] if full else ["--vocab-mapping", vocab_file])],
        engine_command=("specforge", "export")))
    steps.append(_check_step(old, export, s.new_target))
    k = s.k
    steps.append(Step(
        "serve the new target with the warm-started drafter",
        ["python", "-m", "sglang.launch_server", "--model-path", s.new_target, "--tp-size", str(s.gpus),
         "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", export,
         "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
         str(k + 1)],
        ["SGLang logs `accept len` per decode batch: `eaglelab perf --log server.log` turns it into tok/s."]))
    return steps, {"warm.yaml": yaml_text(config), **({} if full else {"save_vocab_map.py": SAVE_VOCAB_MAP})}


def _speculators(s: RecipeSettings, vocab: dict, v: dict) -> tuple[list[Step], dict[str, str]]:
    steps: list[Step] = []
    old = _local_drafter(s, steps)
    w = s.workdir
    start = f"{w}/old-drafter-for-new-target"
    layers = vocab["target_layers"]
    outs = aux_ids_as_layer_outputs(tuple(vocab["aux_layer_ids"]) or None, vocab["convention"], layers)
    inputs = [i + 1 for i in outs]  # vLLM / speculators count layer inputs: output of layer i = input of i + 1
    if vocab["speculators_format"]:
        steps.append(Step(
            "copy the old drafter and name the new target as its verifier",
            ["python", Here("set_verifier.py"), old, start, s.new_target],
            ["speculators 0.9.0's --from-pretrained takes the teacher (lm_head, norm) and the layer ids from the",
             "verifier named in the checkpoint's config, not from --verifier-name-or-path."]))
    else:
        steps.append(Step(
            "convert the old drafter to the speculators format, with the new target as verifier",
            ["speculators", "convert", old, "--algorithm", "eagle3", "--verifier", s.new_target, "--output-path", start,
             "--algorithm-kwargs", json.dumps({"eagle_aux_hidden_state_layer_ids": inputs})],
            [f"The SpecForge ids (layer outputs {list(outs)}) become vLLM's layer inputs {inputs};",
             "d2t / t2d are copied from the weights."],
            engine_command=("speculators", "convert")))
    steps.append(Step("serve the new target with vLLM, for the regeneration",
                      ["vllm", "serve", s.new_target, "--tensor-parallel-size", str(s.gpus), "--port", "8000"],
                      background=True))
    steps.append(Step(
        "regenerate the responses with the new target",
        ["speculators", "regenerate-responses", "--endpoint", "http://127.0.0.1:8000/v1/chat/completions",
         "--model", s.new_target, "--dataset", s.data, "--outfile", f"{w}/regenerated.jsonl"],
        engine_command=("speculators", "regenerate-responses")))
    steps.append(Step("stop the vLLM server", ["kill", Var("SERVER_PID")]))
    steps.append(Step(
        "tokenize the regenerated conversations",
        ["speculators", "prepare-data", "--model", s.new_target, "--data", f"{w}/regenerated.jsonl", "--output",
         f"{w}/data", "--seq-length", str(s.max_length)],
        ["Token frequencies are skipped (the default): a warm start keeps the old map."],
        engine_command=("speculators", "prepare-data")))
    extract = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
               "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": inputs + [layers]}}}
    connector = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                 "kv_connector_extra_config": {"shared_storage_path": f"{w}/vllm-hidden-states"}}
    steps.append(Step(
        "serve the new target with vLLM, extracting hidden states at the old drafter's layers",
        ["vllm", "serve", s.new_target, "--tensor-parallel-size", str(s.gpus), "--port", "8000",
         "--speculative-config", json.dumps(extract), "--kv-transfer-config", json.dumps(connector)],
        ["The layers are the old drafter's: on a warm start speculators takes them from the checkpoint and",
         "ignores --target-layer-ids."], background=True))
    steps.append(Step(
        "capture the hidden states of the new target",
        ["speculators", "generate-offline-data", "--model", s.new_target, "--endpoint", "http://127.0.0.1:8000/v1",
         "--preprocessed-data", f"{w}/data", "--output", f"{w}/data/hidden_states"],
        engine_command=("speculators", "generate-offline-data")))
    steps.append(Step("stop the vLLM server", ["kill", Var("SERVER_PID")]))
    save = f"{w}/checkpoints"
    steps.append(Step(
        "train from the old drafter, keeping its vocabulary map",
        ["torchrun", f"--nproc_per_node={s.gpus}", "-m", "speculators.train", "--verifier-name-or-path", s.new_target,
         "--from-pretrained", start, "--data-path", f"{w}/data", "--hidden-states-path", f"{w}/data/hidden_states",
         "--on-missing", "raise", "--save-path", save, "--lr", str(v["learning_rate"]), "--epochs", str(v["epochs"]),
         "--ttt-steps", str(v["ttt_length"]), "--optimizer", "adamw", "--scheduler-type", "cosine"],
        ["No --draft-vocab-size, --d2t-path or --token-freq-path: any of them replaces the old map. --save-path must",
         "be new (an existing one resumes and ignores --from-pretrained). speculators 0.9.0 keeps lm_head frozen."],
        engine_command=("speculators", "train")))
    steps.append(_check_step(start, f"{save}/checkpoint_best", s.new_target))
    steps.append(Step(
        "serve the new target with the warm-started drafter",
        ["vllm", "serve", s.new_target, "--tensor-parallel-size", str(s.gpus), "--speculative-config",
         json.dumps({"method": "eagle3", "model": f"{save}/checkpoint_best",
                     "num_speculative_tokens": s.k})],
        ["vLLM logs `SpecDecoding metrics` lines: `eaglelab perf --log server.log` turns them into tok/s."]))
    return steps, {"set_verifier.py": SET_VERIFIER} if vocab["speculators_format"] else {}
