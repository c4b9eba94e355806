"""The repository's shape: sub-packages a newcomer can name, no import circles, nothing pointing outside it."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "eaglelab"


def import_graph() -> dict[str, set[str]]:
    """Module -> eaglelab modules it imports, at module level or inside functions alike."""
    mods = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import: resolve against the package
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                for cand in [base] + [f"{base}.{a.name}" for a in node.names]:
                    if cand in mods and cand != name:
                        graph[name].add(cand)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in mods and a.name != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path of module names, or None (depth-first search with colours)."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles_in_the_package():
    graph = import_graph()
    assert len(graph) > 30 and "eaglelab.model.drafter" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


#: The layers, bottom first: a module imports its own layer and the ones below, never one above
#: (docs/ARCHITECTURE.md draws them). engines/vllm_worker.py runs in vLLM's environment and imports none.
LAYERS = [
    {"errors", "inputs", "atomic", "outputs", "markdown", "progress", "decisions", "recommendation", "settings",
     "views"},  # the base
    {"checkpoints"},  # files, headers, configs: no torch
    {"serving"},  # the throughput model and serving logs: arithmetic
    {"engines"},  # what the engines read and write: exports, recipes, logprob files, the vLLM driver
    {"model"},  # the drafter, targets, decoding
    {"data"},  # every token and state set, the world's paths
    {"train"},  # the TTT loss, training, fine-tune runs
    {"probe"},  # similarity and the plug-in probe
    {"drift"},  # drift families, the sweep, the predictors
    {"planning"},  # provenance, the data-scaling law, the decision table
    {"worlds"},  # building the offline worlds
    {"jobs"},  # one function per question
    {"workbook"},  # notebooks' runner, plots, pickers, the game plan
    {"cli", "__main__", "__init__"},  # the command line
]


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"{module} is in no layer: add its sub-package to LAYERS")


def test_imports_run_down_the_layers():
    graph = import_graph()
    up = [f"{a} -> {b}" for a, deps in graph.items() for b in deps if layer_of(b) > layer_of(a)]
    assert up == [], up


#: ``checkpoints/``'s rooms, bottom first: files and transport, targets, drafters. A room imports its own and
#: the ones below; nothing else lives loose in ``checkpoints/``.
CHECKPOINT_ROOMS = ["files", "targets", "drafters"]


def test_checkpoints_rooms_import_one_way_and_hold_every_module():
    graph = import_graph()
    rooms = {m: m.split(".")[2] for m in graph if m.startswith("eaglelab.checkpoints.")}
    assert set(rooms.values()) == set(CHECKPOINT_ROOMS), sorted(set(rooms.values()))
    assert all(m.count(".") == 3 or m == f"eaglelab.checkpoints.{r}" for m, r in rooms.items()), sorted(rooms)
    up = [f"{a} -> {b}" for a, room in rooms.items() for b in graph[a]
          if b in rooms and CHECKPOINT_ROOMS.index(rooms[b]) > CHECKPOINT_ROOMS.index(room)]
    assert up == [], up


def test_every_hub_read_goes_through_the_one_transport():
    """Only ``checkpoints/files/hub.py`` asks the hub; a reader elsewhere opens its repository with ``open_repo``."""
    asks = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        name = str(path.relative_to(REPO))
        calls = [w for w in ("hub_fetch(", "hf_hub_url(", "hf_hub_download(", "HubRepo(", "hub_offline()", "hub_problem(")
                 if w in text]
        if calls and name != "eaglelab/checkpoints/files/hub.py":
            asks[name] = calls
    assert asks == {}, asks


def test_no_module_is_over_about_500_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 520}
    assert long == {}, long


def test_states_sit_below_the_drafter_and_the_loss_above_it():
    graph = import_graph()
    assert "eaglelab.model.drafter" not in graph["eaglelab.data.states"]
    assert "eaglelab.model.drafter" in graph["eaglelab.train.ttt"]
    assert not any(m.startswith("eaglelab.train") for m in graph["eaglelab.model.drafter"])


def test_sub_packages_group_the_modules():
    subs = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert subs == ["checkpoints", "cli", "data", "drift", "engines", "jobs", "model", "planning", "probe", "serving",
                    "train", "workbook", "worlds"]
    loose = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__", "__main__", "atomic", "decisions", "errors", "inputs", "markdown", "outputs", "progress",
                     "recommendation", "settings", "views"]


def test_nothing_tracked_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    if not files:  # not a git checkout (an sdist): walk the tree instead
        files = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file()
                 and not any(part.startswith(".venv") for part in p.parts)]
    outside = ("shared" + "/", "../" + "../")  # spelled apart so this file does not match itself
    offenders = []
    for f in files:
        path = REPO / f
        if path.suffix not in {".py", ".md", ".ipynb", ".toml", ".yml", ".cfg", ".txt", ""} or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        if any(s in text for s in outside):
            offenders.append(f)
    assert offenders == [], offenders


#: Packages a module may import inside a function, and only when it does not import them at module level
#: already (itself or through the eaglelab modules it imports): heavy ones that the metadata commands and
#: torch-free paths must not pay for, and optional ones that are not installed everywhere.
LAZY_PACKAGES = {"torch", "transformers", "safetensors", "accelerate", "numpy", "pandas", "matplotlib", "seaborn", "tqdm",
                 "huggingface_hub", "tokenizers", "nbformat", "papermill", "ipywidgets", "IPython", "vllm"}
#: Files that run on their own, in another environment (copied to a cluster, run inside vLLM's venv, a
#: sandboxed child process): they import nothing of eaglelab and keep their own small helpers.
STANDALONE = {"eaglelab.engines.load_client", "eaglelab.engines.vllm_worker", "eaglelab.checkpoints.targets.template_child"}


def _imports(module: str, tree: ast.Module) -> tuple[set[str], list[tuple[int, set[str]]]]:
    """A module's imports: the modules named at module level (outside ``TYPE_CHECKING``), and each
    function-body import (outside ``try``, which marks an optional one) with its line and modules."""
    top: set[str] = set()
    body: list[tuple[int, set[str]]] = []

    def named(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names}
        assert not node.level, f"{module}: relative import"
        return {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}

    def walk(node: ast.AST, in_function: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            guard = guarded or isinstance(child, ast.Try) or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if in_function and not guarded:
                    body.append((child.lineno, named(child)))
                elif not in_function and not guarded:
                    top.update(named(child))
            walk(child, function, guard)

    walk(tree, False, False)
    return top, body


def package_imports() -> dict[str, tuple[set[str], list[tuple[int, set[str]]]]]:
    mods = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}
    return {m: _imports(m, ast.parse(p.read_text())) for m, p in mods.items()}


def heavy_packages(imports) -> dict[str, set[str]]:
    """Module -> the lazy-worthy packages importing it loads (module-level imports, followed through eaglelab)."""
    memo: dict[str, set[str]] = {}

    def of(name: str) -> set[str]:
        if name.split(".")[0] != "eaglelab":
            return {name.split(".")[0]} & LAZY_PACKAGES
        if name not in imports:  # `from eaglelab.x import function`: the module is named as well
            return set()
        if name not in memo:
            memo[name] = set()
            parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            memo[name] = set().union(*(of(m) for m in imports[name][0] | set(parents) if m != name))
        return memo[name]

    return {m: of(m) for m in imports}


def test_function_body_imports_only_keep_a_heavy_or_optional_package_off_a_path():
    """An import inside a function hides the dependency graph; it pays only where the module does not
    load the package anyway (#39): everything else sits at module level."""
    imports = package_imports()
    heavy = heavy_packages(imports)
    assert "torch" in heavy["eaglelab.model.drafter"] and heavy["eaglelab.cli"] == set()

    def brings(names: set[str]) -> set[str]:
        return set().union(*(heavy.get(n, {n.split(".")[0]} & LAZY_PACKAGES) for n in names))

    idle = [f"{m}:{line} {sorted(names)}" for m, (_, body) in sorted(imports.items()) if m not in STANDALONE
            for line, names in body if not brings(names) - heavy[m]]
    assert idle == [], "\n".join(["imports to move to module level:"] + idle)


def test_distinct_things_have_distinct_public_names():
    """One name for one thing: no two modules define the same public function or class, except the CLI's
    and the standalone files' entry points."""
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if module in STANDALONE:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(module)
    protocol = {"add_parsers", "main"}  # each CLI module adds its parsers; a module run as a program has main
    twice = {name: mods for name, mods in where.items() if len(mods) > 1 and name not in protocol}
    assert twice == {}, twice


def test_the_format_reference_and_fixtures_ship_with_the_repository():
    doc = (REPO / "docs" / "EAGLE3_FORMAT.md").read_text()
    assert "d2t" in doc and "eagle_aux_hidden_state_layer_ids" in doc
    fixtures = REPO / "data" / "fixtures" / "specforge-configs"
    assert len(list(fixtures.glob("*.json"))) >= 20 and "Apache" in (fixtures / "README.md").read_text()


def test_the_readme_is_a_front_door():
    """The first 40 lines get a newcomer from clone to a first result; every link and command in it is real."""
    import re

    from eaglelab.cli import build_parser

    text = (REPO / "README.md").read_text()
    first = "\n".join(text.splitlines()[:40])
    assert all(word in first for word in ("make smoke", "make workbook", "make test", "GAME_PLAN.md"))
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and all((REPO / link).is_file() for link in links if "://" not in link), links
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    code = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S))
    used = set(re.findall(r"^eaglelab ([a-z]+)", code, flags=re.M)) | set(re.findall(r"`eaglelab ([a-z]+)", text))
    assert used and used <= set(sub), used - set(sub)
    assert len(text.splitlines()) < 120  # details live in docs/
