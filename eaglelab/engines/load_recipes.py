"""The load recipe: a script that measures a serving engine's cost table on the user's cluster.

``eaglelab recipe --job load`` writes ``run.sh``, ``load_client.py`` (:mod:`eaglelab.engines.load_client`, copied
verbatim: standard library only) and a README into a folder. On the cluster, ``run.sh`` serves the new target with
the engine (tensor parallel over ``gpus``), once for plain decoding and once per forced acceptance length τ, each
time: refuses a port already in use, starts the server in the background (its log in the work folder), waits for
``/health`` under a deadline (and stops at once if the server exits), runs ``load_client.py measure`` over the
concurrencies (rows appended to ``<workdir>/costs.csv``, the format of :mod:`eaglelab.serving.cost_table`), and stops
the server (SIGTERM, SIGKILL after 60 s; a trap does it on any exit). It ends with ``eaglelab perf --costs``, which
fits the load model to the table.

How τ is forced, so the cycle's cost is measured with any EAGLE-3 drafter of the target (its quality does not
matter):

- vLLM 0.32.0 (read in ``vllm/config/speculative.py`` of the installed CPU build): ``--speculative-config
  '{"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": k, "rejection_sample_method": "synthetic",
  "synthetic_acceptance_length": TAU}'``. The drafter proposes and the target verifies as usual; the accept decision
  is replaced by per-position unconditional rates, resolved from the length by the minimum-variance schedule
  (τ - 1 = 1.5 with k = 3 gives rates [1, 0.5, 0]); τ must lie in [1, k + 1]. vLLM's chain only: topk 1.
- SGLang (main of 2026: ``python/sglang/srt/speculative/spec_utils.py``, ``generate_simulated_accept_index`` and
  ``sample_simulated_acc_len``; ``python/sglang/srt/environ.py``): ``SGLANG_SIMULATE_ACC_LEN=TAU`` (off when < 0, the
  default -1) with ``--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-num-steps k
  --speculative-eagle-topk TOPK --speculative-num-draft-tokens N``. After each verify, SGLang draws ONE acceptance
  length for the whole batch and accepts that many positions of every request (the drafted tokens replaced by a
  fixed id in the default ``SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed``). ``SGLANG_SIMULATE_ACC_METHOD`` says how it is
  drawn: ``multinomial`` (older releases' default) rounds a normal(τ, 1) clamped to [1, k + 1], whose mean is not τ
  near the bounds; ``match-expected`` (newer default) takes floor(τ) or floor(τ) + 1 with the weights whose mean is
  exactly τ. The script sets ``match-expected`` explicitly. The accepted positions are the tree's first ones, a
  chain's path: with topk > 1 the cycle's cost is measured but the accepted path is not one the tree would take.
- Flags, as the engines spell them: SGLang's ``--model-path --tp-size --host --port`` and the speculative ones above
  (``server_args.py``); vLLM's ``vllm serve MODEL --tensor-parallel-size --host --port --speculative-config``.

Every user value reaches the script quoted for its place (a shell word, JSON inside a shell word) or is refused
(:func:`~eaglelab.engines.scripts.script_value`: control characters); a path that starts with ``-`` is written
``./-x`` (:func:`~eaglelab.engines.scripts.path_word`). Building the recipe reads no checkpoint: the target and the
drafter are the cluster's.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from eaglelab.engines.scripts import Here, Step, Var, comment_line, path_word, script_value, write_recipe_folder
from eaglelab.errors import ParameterError
from eaglelab.markdown import md_text
from eaglelab.serving.cost_table import MAX_CONCURRENCY, MAX_WHOLE
from eaglelab.serving.perf import require_tree
from eaglelab.settings import DEFAULT_K

#: The serving engines a load recipe is written for.
LOAD_ENGINES = ("sglang", "vllm")
#: The forced τ values when none are given (those above k + 1 left out).
DEFAULT_ACCEPT_LENS = (1.0, 2.0, 3.0)
#: How SGLang draws the per-batch acceptance length: the one whose mean is τ.
SGLANG_ACC_METHOD = "match-expected"
#: The client, copied beside the script.
CLIENT = Path(__file__).with_name("load_client.py")
#: The most GPUs a server spans, and timed runs per (setup, concurrency).
MAX_GPUS, MAX_REPEATS = 4096, 1000
#: Seconds the script waits for a stopped server before SIGKILL.
STOP_GRACE_S = 60


@dataclass(frozen=True)
class LoadRecipeSettings:
    """What the cost-table script needs.

    Attributes:
        engine: ``sglang`` or ``vllm``.
        new_target: the target served (folder on the cluster or hub id).
        old_drafter: the drafter served with it: any EAGLE-3 drafter of the target (τ is forced, so its quality
            does not matter).
        gpus: tensor-parallel size.
        concurrency: requests in flight, one measurement each (per repeat).
        k: drafts per cycle.
        topk: the drafter's branching (SGLang only; vLLM's EAGLE-3 is a chain).
        draft_tokens: tokens verified per request per cycle; None: k + 1 (a chain).
        accept_lens: the forced τ values, each in [1, k + 1]; None: :data:`DEFAULT_ACCEPT_LENS` up to k + 1.
        prompt_tokens: prompt length (synthetic token ids).
        output_tokens: tokens each request generates.
        repeats: measurements per (setup, concurrency).
        port: the server's port on 127.0.0.1.
        workdir: the folder on the cluster for ``costs.csv`` and the servers' logs.
        server_timeout_s: seconds a server may take to load before the script gives up.
        extra_flags: more words for every server command (``--cuda-graph-max-bs 128``, ``--max-num-seqs 256``), each
            one quoted as given.
    """

    engine: str
    new_target: str
    old_drafter: str
    gpus: int = 8
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    k: int = DEFAULT_K
    topk: int = 1
    draft_tokens: int | None = None
    accept_lens: tuple[float, ...] | None = None
    prompt_tokens: int = 1024
    output_tokens: int = 256
    repeats: int = 2
    port: int = 30000
    workdir: str = "load"
    server_timeout_s: int = 1800
    extra_flags: tuple[str, ...] = ()

    @property
    def verified(self) -> int:
        """Tokens verified per request per cycle."""
        return self.draft_tokens if self.draft_tokens is not None else self.k + 1

    @property
    def forced(self) -> tuple[float, ...]:
        """The τ values measured."""
        if self.accept_lens is not None:
            return tuple(float(t) for t in self.accept_lens)
        return tuple(t for t in DEFAULT_ACCEPT_LENS if t <= self.k + 1)


@dataclass(frozen=True)
class ServerStep(Step):
    """A server started in the background: its environment assignments, its log (stdout and stderr)."""

    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> str:
        assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in self.env.items())
        return (f"{assignments} " if assignments else "") + super().command() + " 2>&1"

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "env": dict(self.env)}


@dataclass(frozen=True)
class LoadRecipe:
    """The cost-table script: its steps (servers, waits, measurements) and the files beside it."""

    settings: LoadRecipeSettings
    steps: list[Step]
    files: dict[str, str]

    def script(self) -> str:
        s = self.settings
        w = shlex.quote(path_word(s.workdir))
        head = [
            "#!/usr/bin/env bash",
            f"# The serving cost table of {s.engine}, written by `eaglelab recipe --job load`.",
            comment_line(f"  target:   {s.new_target} (tensor parallel {s.gpus})"),
            comment_line(f"  drafter:  {s.old_drafter} (any EAGLE-3 drafter of the target: tau is forced)"),
            comment_line(f"  k {s.k}, topk {s.topk}, draft tokens {s.verified}; forced tau {', '.join(map(str, s.forced))}"),
            comment_line(f"  concurrency {' '.join(map(str, s.concurrency))}; prompt {s.prompt_tokens} tokens, "
                         f"output {s.output_tokens}; {s.repeats} repeats"),
            comment_line(f"  writes {s.workdir}/costs.csv (and each server's log there)"),
            "set -euo pipefail",
            'HERE="$(cd "$(dirname "$0")" && pwd)"  # this recipe\'s own files',
            'SERVER_PID=""',
            f"stop_server() {{  # SIGTERM (the engines stop their workers), SIGKILL after {STOP_GRACE_S} s",
            '  if [ -n "$SERVER_PID" ]; then',
            '    kill -TERM "$SERVER_PID" 2>/dev/null || true',
            f'    for ((i = 0; i < {STOP_GRACE_S}; i++)); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done',
            '    kill -KILL "$SERVER_PID" 2>/dev/null || true',
            '    wait "$SERVER_PID" 2>/dev/null || true',
            '    SERVER_PID=""',
            "  fi",
            "}",
            "trap stop_server EXIT",
            "trap 'exit 130' INT TERM",
            f"mkdir -p -- {w}",
            f"if [ -e {w}/costs.csv ]; then",
            f"  echo {shlex.quote(f'{s.workdir}/costs.csv exists: move it away first (never appended to)')} >&2",
            "  exit 2",
            "fi",
            "",
        ]
        body = []
        for n, step in enumerate(self.steps[:-1], 1):  # a server's wait is a step of its own (a deadline), not curl's
            body += [comment_line(f" --- {n}. {step.title}"), *[comment_line(f" {line}") for line in step.notes]]
            body += [f"{step.command()} &", "SERVER_PID=$!", ""] if step.background else [step.command(), ""]
        fit = self.steps[-1]
        tail = [comment_line(f" --- {len(self.steps)}. {fit.title}"), *[comment_line(f" {n}") for n in fit.notes],
                "if command -v eaglelab >/dev/null 2>&1; then",
                "  " + fit.command().replace("\n", "\n  "),
                "else",
                f"  echo {shlex.quote('eaglelab is not installed here: copy ' + s.workdir + '/costs.csv where it is and run')}"
                f" {' '.join(shlex.quote(w) for w in fit.words())}",
                "fi", ""]
        return "\n".join(head + body + tail)

    def to_json(self) -> dict[str, Any]:
        return {"job": "load", "settings": asdict(self.settings), "steps": [st.to_json() for st in self.steps],
                "files": sorted(self.files)}

    def write(self, out_dir: str | Path, overwrite: bool = False) -> Path:
        """Write ``run.sh``, the files and ``recipe.json`` into ``out_dir``, atomically.

        Raises:
            OverwriteError: ``out_dir`` holds a recipe and ``overwrite`` is False, or files eaglelab did not write.
            OutputError: the folder cannot be written.
        """
        return write_recipe_folder(out_dir, self.script(), self.files, self.to_json(), overwrite)


# --------------------------------------------------------------------------- checks

def check_load_recipe(s: LoadRecipeSettings) -> None:
    """Refuse settings the script cannot hold or the engine cannot serve, in one line naming the setting.

    Raises:
        ParameterError: an unknown engine, a number out of range, a τ out of [1, k + 1], a tree asked of vLLM, a chain
            whose draft tokens are not k + 1, or a text with a control character.
    """
    if s.engine not in LOAD_ENGINES:
        raise ParameterError("--engine", f"unknown engine {s.engine!r}; choose {' or '.join(LOAD_ENGINES)}")
    for name, low, high in (("gpus", 1, MAX_GPUS), ("k", 1, 64), ("topk", 1, 64), ("prompt_tokens", 1, MAX_WHOLE),
                            ("output_tokens", 2, MAX_WHOLE), ("repeats", 1, MAX_REPEATS), ("port", 1, 65535),
                            ("server_timeout_s", 1, 7 * 24 * 3600)):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ParameterError(f"--{name.replace('_', '-')}", f"must be a whole number from {low} to {high:,}, "
                                                                f"got {value!r:.40}")
    if s.prompt_tokens + s.output_tokens > MAX_WHOLE:  # the rows' context column
        raise ParameterError("--prompt-tokens", f"with --output-tokens makes a context over {MAX_WHOLE:,} tokens")
    if not s.concurrency or any(isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY
                                for c in s.concurrency):
        raise ParameterError("--concurrency", f"must be whole numbers from 1 to {MAX_CONCURRENCY:,} (the client opens a "
                                              f"connection per request; the cost table reads no more), got "
                                              f"{list(s.concurrency)!r:.80}")
    if s.draft_tokens is not None and (isinstance(s.draft_tokens, bool) or not isinstance(s.draft_tokens, int)
                                       or s.draft_tokens < 2):
        raise ParameterError("--draft-tokens", f"must be a whole number of at least 2, got {s.draft_tokens!r}")
    require_tree(s.k, s.topk, s.draft_tokens)
    if s.engine == "vllm" and s.topk != 1:
        raise ParameterError("--topk", "vLLM's EAGLE-3 drafts a chain (topk 1); a tree is SGLang's (--engine sglang)")
    if not s.forced:
        raise ParameterError("--accept-lens", f"no forced τ left in [1, k + 1 = {s.k + 1}]")
    for tau in s.forced:
        if not 1.0 <= tau <= s.k + 1:  # NaN fails too
            raise ParameterError("--accept-lens", f"τ {tau:g} is not reachable with k = {s.k} drafts (it counts the "
                                                  f"bonus token: [1, {s.k + 1}])")
    for name in ("new_target", "old_drafter", "workdir"):
        script_value(f"--{name.replace('_', '-')}", getattr(s, name))
    for flag in s.extra_flags:
        script_value("--extra-flags", flag)


# --------------------------------------------------------------------------- the script

def server_step(s: LoadRecipeSettings, tau: float | None) -> ServerStep:
    """The server for plain decoding (``tau`` None) or for the cycle at forced ``tau``."""
    label = "plain" if tau is None else f"tau-{tau:g}"
    log = f"{s.workdir}/server-{label}.log"
    if s.engine == "sglang":
        argv = ["python", "-m", "sglang.launch_server", "--model-path", s.new_target, "--tp-size", str(s.gpus),
                "--host", "127.0.0.1", "--port", str(s.port)]
        env: dict[str, str] = {}
        if tau is not None:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", s.old_drafter,
                     "--speculative-num-steps", str(s.k), "--speculative-eagle-topk", str(s.topk),
                     "--speculative-num-draft-tokens", str(s.verified)]
            env = {"SGLANG_SIMULATE_ACC_LEN": repr(float(tau)), "SGLANG_SIMULATE_ACC_METHOD": SGLANG_ACC_METHOD}
        notes = [] if tau is None else ["SGLANG_SIMULATE_ACC_LEN: every verify accepts floor(tau) or floor(tau) + 1 "
                                        "positions, one draw per batch, mean tau (match-expected)."]
    else:
        argv = ["vllm", "serve", s.new_target, "--tensor-parallel-size", str(s.gpus), "--host", "127.0.0.1",
                "--port", str(s.port)]
        env = {}
        if tau is not None:
            argv += ["--speculative-config", json.dumps(
                {"method": "eagle3", "model": s.old_drafter, "num_speculative_tokens": s.k,
                 "rejection_sample_method": "synthetic", "synthetic_acceptance_length": float(tau)})]
        notes = [] if tau is None else ["rejection_sample_method synthetic: the target verifies as usual, then accepts "
                                        "by fixed per-position rates whose mean length is tau."]
    title = "serve the target alone (plain decoding)" if tau is None else \
        f"serve the target with the drafter, tau forced to {tau:g}"
    return ServerStep(title, [*argv, *s.extra_flags], [*notes, f"Its log: {log}."], background=True, stdout=log, env=env)


def build_load_recipe(s: LoadRecipeSettings) -> LoadRecipe:
    """The cost-table script for ``s.engine``, after :func:`check_load_recipe`."""
    check_load_recipe(s)
    given, s = s, replace(s, new_target=path_word(s.new_target), old_drafter=path_word(s.old_drafter),
                          workdir=path_word(s.workdir))
    url = f"http://127.0.0.1:{s.port}"
    client = ["python", Here("load_client.py")]
    notes = ["--note", f"model: {given.new_target}", "--note", f"drafter: {given.old_drafter}", "--note",
             f"tensor parallel: {s.gpus}", "--note", f"prompt tokens: {s.prompt_tokens}", "--note",
             f"output tokens: {s.output_tokens}", "--note",
             "tau forced by: " + ("SGLANG_SIMULATE_ACC_LEN, SGLANG_SIMULATE_ACC_METHOD=match-expected"
                                  if s.engine == "sglang" else "speculative_config rejection_sample_method=synthetic")]
    steps: list[Step] = []
    for tau in (None, *s.forced):
        server = server_step(s, tau)
        k, topk, verified, accept = (0, 1, 1, 1.0) if tau is None else (s.k, s.topk, s.verified, tau)
        steps += [
            Step("check that no server already answers on the port", [*client, "port-free", "--url", url]),
            server,
            Step(f"wait until it serves (at most {s.server_timeout_s} s; stop if it exits)",
                 [*client, "wait", "--url", url, "--pid", Var("SERVER_PID"), "--timeout", str(s.server_timeout_s)]),
            Step("measure: one row per concurrency and repeat, appended to costs.csv",
                 [*client, "measure", "--url", url, "--out", f"{s.workdir}/costs.csv", "--engine", s.engine,
                  "--concurrency", ",".join(map(str, s.concurrency)), "--prompt-tokens", str(s.prompt_tokens),
                  "--output-tokens", str(s.output_tokens), "--repeats", str(s.repeats), "--k", str(k),
                  "--draft-tokens", str(verified), "--topk", str(topk), "--accept-len", repr(float(accept)), *notes],
                 ["Decode phase only: tokens inside the window where every request decodes, over its length."]),
            Step("stop the server", ["stop_server"]),
        ]
    steps.append(Step(
        "fit the load model to the measured table",
        ["eaglelab", "perf", "--costs", f"{s.workdir}/costs.csv", "--target-config", s.new_target, "--gpus",
         str(s.gpus), "--k", str(s.k)],
        ["The plain rows give the step without a drafter, the others the cycle at each tau: the speedup per concurrency."],
        engine_command=("eaglelab", "perf")))
    return LoadRecipe(given, steps, {"load_client.py": CLIENT.read_text(encoding="utf-8"), "README.md": readme(given)})


def write_load_recipe(settings: LoadRecipeSettings, out: str | Path, overwrite: bool = False) -> LoadRecipe:
    """Build and write ``run.sh``, ``load_client.py``, ``README.md`` and ``recipe.json`` into ``out`` (atomically;
    ``overwrite`` replaces only what eaglelab wrote there)."""
    recipe = build_load_recipe(settings)
    recipe.write(out, overwrite=overwrite)
    return recipe


def readme(s: LoadRecipeSettings) -> str:
    """The folder's README: what the script measures, how to run it, what comes out (the work folder, the one value
    of the user's it shows, escaped for Markdown: :func:`eaglelab.markdown.md_text`)."""
    w = md_text(s.workdir)
    forced = "SGLANG_SIMULATE_ACC_LEN (with SGLANG_SIMULATE_ACC_METHOD=match-expected)" if s.engine == "sglang" else \
        'speculative_config "rejection_sample_method": "synthetic", "synthetic_acceptance_length"'
    return f"""# The serving cost table of {s.engine}, measured on your cluster

Written by `eaglelab recipe --job load`. Copy this folder to a node with {s.gpus} GPUs, {s.engine} installed and the
target and drafter reachable, then run `bash run.sh` from the folder where {w}/ should appear.

For plain decoding, then for each forced acceptance length τ in {list(s.forced)} (k = {s.k}, topk {s.topk},
{s.verified} tokens verified per cycle), the script serves the target on 127.0.0.1:{s.port}, waits for `/health`
(at most {s.server_timeout_s} s), and `load_client.py` (Python standard library only) measures concurrencies
{list(s.concurrency)}, {s.repeats} times each: every request a synthetic prompt of {s.prompt_tokens} token ids and
{s.output_tokens} generated tokens (`ignore_eos`, temperature 0), all started together. τ is forced with {forced}: the
drafter's quality does not matter, the cycle's cost is what is measured.

Each row's `output_tok_s` is the decode phase only: the tokens that arrive between the last request's first token and
the first request's last token (the window where all of them decode together), over that window's length. Rows go to
{w}/costs.csv (comments on top: engine, model, GPU, date), one per concurrency and repeat, appended as they
are measured. Each server's log is {w}/server-\\*.log. The script refuses to start when `costs.csv` exists.

Then `eaglelab perf --costs` on {w}/costs.csv `--target-config ...` (the script's last step, when eaglelab is
installed there) fits the load model to the table: plain step = concurrency / output_tok_s, speculative cycle =
τ · concurrency / output_tok_s.

Notes:
- SGLang captures CUDA graphs up to a batch size of its own choosing; above it the step runs eagerly (a real cost, but
  a jump in the table): raise it with `--extra-flags --cuda-graph-max-bs 128` when writing the recipe. vLLM's
  `--max-num-seqs` must be at least the largest concurrency, or requests queue (the client then refuses the row).
- SGLang draws one acceptance length per batch (all requests accept the same count in a cycle); vLLM accepts by fixed
  per-position rates. Both give the mean τ asked.
"""
