"""Browser tests: JupyterLab from this interpreter, driven by Playwright in Debian's Chromium.

Tests import it as ``from tests.browser import ...``. The pieces:

* :func:`browser_skip_reason` says why the browser tests cannot run here (no ``playwright`` package,
  no Chromium); tests ``pytest.skip`` with it. Playwright's own browser download is not used
  (``playwright install`` needs a CDN the project's machines cannot reach): :func:`chromium_path`
  finds the system Chromium (``apt-get install chromium``) or ``$EAGLELAB_CHROMIUM``.
* :func:`jupyter_lab` starts ``python -m jupyter lab`` on 127.0.0.1 with its own empty user config,
  data, settings and workspace folders (so nothing from ``~/.jupyter`` leaks in and no workspace is
  restored), the news / update checks off, and ``window.jupyterapp`` exposed so the helpers below
  use JupyterLab's own command registry and models instead of clicking through menus. Its
  kernels are the venv's ``python3`` (ipykernel) and inherit ``env``.
* :func:`browser_page` opens a headless Chromium page; on an error inside the block it saves a
  ``failure.png`` screenshot, and always the page's console as ``console.log``.
* Notebook helpers (:func:`open_notebook`, :func:`run_all`, :func:`wait_idle`,
  :func:`cell_outputs_text`, :func:`screenshot`) and ipywidgets helpers that act like a user:
  :func:`widget` finds a widget by its description label, :func:`set_text` types into a text /
  combobox, :func:`select_option` picks a dropdown entry, :func:`move_slider` / :func:`set_slider`
  press arrow keys on a slider's handle, :func:`click_button` clicks a button by its text,
  :func:`widget_value` reads a widget back and :func:`wait_for_widget_text` waits for an HTML /
  Label widget to show a text.

Typical use::

    with jupyter_lab(tmp_path, env={"HF_HUB_OFFLINE": "1"}) as lab, browser_page(artifacts_dir("x")) as page:
        open_notebook(page, lab, "demo.ipynb")
        run_all(page, timeout_s=60)
        set_slider(page, "n", 5)
        wait_for_widget_text(page, "square: 25")

Every wait is bounded and fails with an ``AssertionError`` that says what it waited for and what it
saw (for the server: the tail of its log).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent

#: Where :func:`chromium_path` looks after ``$EAGLELAB_CHROMIUM`` (Debian's package installs /usr/bin/chromium).
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")

#: Settings for the server's private JupyterLab user-settings folder: every cell attached to the DOM
#: (the default windowing leaves off-screen cells' outputs out of the page, so text and widgets in them
#: could not be found), and no "get notified about news" / update toasts.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
#: Plugins turned off in the private page_config.json: the announcements plugin is the one asking
#: "Would you like to get notified about official Jupyter news?".
DISABLED_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)

DEFAULT_TIMEOUT_S = 30.0
_POLL_S = 0.2


# --- what is there --------------------------------------------------------------------------------


def chromium_path() -> str | None:
    """The system Chromium to drive: ``$EAGLELAB_CHROMIUM``, else Debian's, else one on ``PATH``.

    Returns:
        An executable's path, or None when there is none (``$EAGLELAB_CHROMIUM`` set to something that
        is not an executable file also gives None, so the test skips rather than using another browser).
    """
    explicit = os.environ.get("EAGLELAB_CHROMIUM")
    if explicit:
        return explicit if os.path.isfile(explicit) and os.access(explicit, os.X_OK) else None
    for path in CHROMIUM_CANDIDATES:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    return None


def browser_skip_reason() -> str | None:
    """Why the browser tests cannot run here, in one line, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (it is in the dev extra: pip install -e '.[dev]')"
    if os.environ.get("EAGLELAB_CHROMIUM") and chromium_path() is None:
        return f"EAGLELAB_CHROMIUM={os.environ['EAGLELAB_CHROMIUM']} is not an executable file"
    if chromium_path() is None:
        return "no Chromium found (apt-get install chromium, or set EAGLELAB_CHROMIUM to a Chromium / Chrome binary)"
    return None


def artifacts_dir(name: str | None = None) -> Path:
    """The folder for screenshots and console logs, created: ``$EAGLELAB_TEST_ARTIFACTS`` or ``runs/test-artifacts/browser``.

    Args:
        name: optional sub-folder (e.g. the test's name), so tests do not overwrite each other's files.
    """
    root = Path(os.environ["EAGLELAB_TEST_ARTIFACTS"]) if os.environ.get("EAGLELAB_TEST_ARTIFACTS") \
        else REPO / "runs" / "test-artifacts" / "browser"
    folder = root / _safe_name(name) if name else root
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "x"


# --- the JupyterLab server -----------------------------------------------------------------------


@dataclass
class Lab:
    """A running JupyterLab server (from :func:`jupyter_lab`).

    Attributes:
        url: the server's root, ``http://127.0.0.1:<port>/``.
        token: its random token.
        base: ``<url>lab/tree/``: a notebook opens at ``f"{lab.base}{name}?token={lab.token}"``
            (:meth:`notebook_url` quotes the name).
        root_dir: the folder it serves.
        log_path: the server's (and its kernels') stdout / stderr.
    """

    url: str
    token: str
    base: str
    root_dir: Path
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    def notebook_url(self, name: str) -> str:
        """The address that opens ``name`` (a path relative to ``root_dir``) in JupyterLab."""
        return f"{self.base}{quote(name)}?token={self.token}"

    def api(self, path: str, method: str = "GET", timeout_s: float = 5.0) -> Any:
        """Call the server's REST API (``path`` like ``api/kernels``); the decoded JSON, or None when empty."""
        req = urllib.request.Request(f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _private_jupyter_dirs(tmp: Path) -> dict[str, str]:
    """Empty user-level Jupyter folders: the venv's own (kernelspec, labextensions, server config) stay visible."""
    dirs = {name: tmp / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    (dirs["config"] / "labconfig").mkdir()
    (dirs["config"] / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {p: True for p in DISABLED_PLUGINS}}))
    for rel, value in LAB_SETTINGS.items():
        path = dirs["settings"] / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return {
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "IPYTHONDIR": str(dirs["ipython"]),
        # the venv's share/jupyter (ipykernel's python3 spec, jupyterlab_widgets' labextension) ahead of any system one
        "JUPYTER_PREFER_ENV_PATH": "1",
    }


@contextlib.contextmanager
def jupyter_lab(root_dir: Path, env: dict[str, str] | None = None, timeout_s: float = 60.0) -> Iterator[Lab]:
    """Run JupyterLab (``sys.executable -m jupyter lab``) serving ``root_dir`` for the block.

    The server listens on 127.0.0.1 at a free port with a random token, uses private (empty) user
    config / data / settings / workspace folders, has news, update checks and the announcements
    plugin off, and exposes ``window.jupyterapp``. Its kernels are ipykernel's ``python3`` run by
    this interpreter (jupyter_client swaps the spec's ``python`` for ``sys.executable``).

    Args:
        root_dir: the folder to serve (notebooks are opened relative to it); also the server's cwd.
        env: variables added to this process's environment for the server and so its kernels
            (e.g. ``HF_HUB_OFFLINE``, ``EAGLELAB_WORLDS``, ``EAGLELAB_PROGRESS``); they override the
            private Jupyter folders too.
        timeout_s: how long to wait for ``/api/status`` to answer.

    Yields:
        The :class:`Lab`. On exit its kernels are shut down and the server's process group ended.

    Raises:
        AssertionError: the server exited or did not answer in time (with its log's tail).
    """
    root_dir = Path(root_dir).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="eaglelab-lab-"))
    log_path = tmp / "server.log"
    token = secrets.token_hex(16)
    port = _free_port()
    full_env = dict(os.environ)
    for var in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH"):  # extra search paths would bring other kernels / extensions
        full_env.pop(var, None)
    full_env.update(_private_jupyter_dirs(tmp))
    # the venv's scripts first, so anything a kernel runs by name (jupyter, eaglelab) is this venv's
    full_env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full_env.get("PATH", "")
    full_env.update(env or {})
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.allow_root=True",  # CI containers run as root
        "--ServerApp.terminals_enabled=False",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",  # the default ("pypi") may query PyPI; the tests are offline
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: commands and models, not menu clicking
        "--MappingKernelManager.default_kernel_name=python3",
    ]
    url = f"http://127.0.0.1:{port}/"
    with open(log_path, "wb") as log:
        # own process group: the whole tree (server, kernels that stayed in it) is ended together
        proc = subprocess.Popen(cmd, cwd=root_dir, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    lab = Lab(url=url, token=token, base=f"{url}lab/tree/", root_dir=root_dir, log_path=log_path, process=proc)
    try:
        _wait_for_server(lab, timeout_s)
        yield lab
    finally:
        _stop_server(lab)
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_for_server(lab: Lab, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise AssertionError(f"JupyterLab exited with code {lab.process.returncode} before answering; "
                                 f"its log ends:\n{lab.log_tail()}")
        try:
            lab.api("api/status", timeout_s=2)
            return
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = str(e)
        time.sleep(_POLL_S)
    raise AssertionError(f"JupyterLab did not answer {lab.url}api/status within {timeout_s:.0f} s ({last}); "
                         f"its log ends:\n{lab.log_tail()}")


def _descendants(pid: int) -> list:
    try:
        import psutil  # ipykernel depends on it; only used to sweep up kernels that outlive the server
    except ImportError:
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _stop_server(lab: Lab) -> None:
    proc = lab.process
    children = _descendants(proc.pid)
    if proc.poll() is None:
        # kernels live in their own sessions (jupyter_client starts them so): shut them down through the
        # API first, then stop the server's group; anything left over is killed by pid
        with contextlib.suppress(Exception):
            for kernel in lab.api("api/kernels") or []:
                lab.api(f"api/kernels/{kernel['id']}", method="DELETE", timeout_s=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    for child in children:
        with contextlib.suppress(Exception):
            if child.is_running():
                child.kill()


# --- the browser ---------------------------------------------------------------------------------


@contextlib.contextmanager
def browser_page(artifacts_dir: Path, width: int = 1400, height: int = 1000,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[Any]:
    """A headless Chromium page (Playwright, sync API) for the block.

    Args:
        artifacts_dir: where ``console.log`` (the page's console and errors) is written on exit and
            ``failure.png`` when the block raises.
        width: viewport width in pixels.
        height: viewport height in pixels.
        timeout_s: Playwright's default timeout for each action.

    Yields:
        A ``playwright.sync_api.Page``.

    Raises:
        RuntimeError: :func:`browser_skip_reason` is not None (tests should have skipped).
    """
    if reason := browser_skip_reason():
        raise RuntimeError(reason)
    from playwright.sync_api import sync_playwright

    artifacts_dir = Path(artifacts_dir)
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    console: list[str] = []
    with sync_playwright() as pw:
        # --no-sandbox: Chromium refuses its sandbox as root (CI); /dev/shm is small in containers
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.set_default_timeout(timeout_s * 1000)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            try:
                yield page
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, artifacts_dir, "failure")
                raise
            finally:
                (artifacts_dir / "console.log").write_text("\n".join(console) + "\n")
        finally:
            browser.close()


def screenshot(page: Any, artifacts_dir: Path, name: str) -> Path:
    """Save a full-page PNG as ``<artifacts_dir>/<name>.png`` and return its path."""
    path = Path(artifacts_dir) / f"{_safe_name(name)}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path


# --- notebooks -----------------------------------------------------------------------------------

# The notebook panel the helpers act on: the current main-area widget when it is a notebook, else
# the first notebook open (so a focused sidebar or console does not confuse them).
_JS_PANEL = """
const panel = () => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return null;
  const isNb = w => w && w.content && w.content.model && w.sessionContext && w.context;
  if (isNb(app.shell.currentWidget)) return app.shell.currentWidget;
  for (const w of Array.from(app.shell.widgets('main'))) if (isNb(w)) return w;
  return null;
};
"""

_JS_STATE = _JS_PANEL + """
const w = panel();
if (!w) return {panel: false, app: !!window.jupyterapp};
const sc = w.sessionContext;
const kernel = sc.session ? sc.session.kernel : null;
const prompts = Array.from(w.content.node.querySelectorAll('.jp-InputPrompt')).map(p => p.textContent.trim());
return {panel: true, path: w.context.path, ready: sc.isReady, status: kernel ? kernel.status : null,
        kernel: kernel ? kernel.name : null, pending: prompts.filter(p => p.includes('*')).length,
        cells: w.content.widgets.length};
"""


def _js(body: str) -> str:
    return "() => {" + body + "}"


def _notebook_state(page: Any) -> dict:
    return page.evaluate(_js(_JS_STATE))


def dismiss_dialogs(page: Any) -> list[str]:
    """Answer JupyterLab's modal dialogs and close its toasts; returns their texts (for messages).

    The kernel-selection dialog (a notebook without kernel metadata) gets Python 3 (ipykernel's
    ``python3``) and "Select"; any other dialog is dismissed with Escape.
    """
    seen: list[str] = []
    for _ in range(5):
        dialog = page.locator(".jp-Dialog")
        if dialog.count() == 0:
            break
        text = " ".join(dialog.first.inner_text().split())
        seen.append(text)
        select = dialog.first.locator("select")
        if select.count():
            options = select.first.locator("option").all_inner_texts()
            choice = next((o for o in options if o.strip().startswith("Python 3")), None)
            if choice:
                select.first.select_option(label=choice)
            dialog.first.locator(".jp-Dialog-button.jp-mod-accept").click()
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(200)
    for toast in page.locator(".jp-toast-dismiss").all():
        with contextlib.suppress(Exception):
            seen.append("toast: " + " ".join(toast.locator("xpath=ancestor::*[contains(@class,'Toastify__toast')][1]")
                                             .inner_text(timeout=1000).split()))
            toast.click(timeout=1000)
    return seen


def open_notebook(page: Any, lab: Lab, name: str, timeout_s: float = 60.0) -> None:
    """Open ``name`` in JupyterLab and wait until its kernel is started and idle.

    Args:
        page: the Playwright page.
        lab: the server.
        name: the notebook's path relative to the server's ``root_dir``.
        timeout_s: bound for the page load plus the kernel's start.

    Raises:
        AssertionError: the notebook or its kernel was not ready in time (with what was seen).
    """
    page.goto(lab.notebook_url(name), timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    dialogs: list[str] = []
    state: dict = {}
    while time.monotonic() < deadline:
        dialogs += dismiss_dialogs(page)
        state = _notebook_state(page)
        if state.get("panel") and state.get("path") == name and state.get("ready") and state.get("status") == "idle":
            return
        page.wait_for_timeout(_POLL_S * 1000)
    raise AssertionError(f"notebook {name!r} with an idle kernel not ready within {timeout_s:.0f} s: "
                         f"state {state}, dialogs {dialogs}; server log ends:\n{lab.log_tail(20)}")


def run_all(page: Any, timeout_s: float = 120.0, raise_on_error: bool = True) -> None:
    """Run > Run All Cells on the open notebook (JupyterLab's ``notebook:run-all-cells``), then :func:`wait_idle`.

    Args:
        page: the Playwright page with a notebook open (:func:`open_notebook`).
        timeout_s: bound for the whole run.
        raise_on_error: raise when a cell's output is an error (the run stops there, as in JupyterLab).

    Raises:
        AssertionError: the run did not finish in time, or a cell raised (its ``ename: evalue``).
    """
    ok = page.evaluate(_js(_JS_PANEL + """
        const w = panel();
        if (!w) return false;
        window.jupyterapp.shell.activateById(w.id);
        window.jupyterapp.commands.execute('notebook:run-all-cells');
        return true;"""))
    assert ok, "no notebook open to run (open_notebook first)"
    # the cells turn [*] as the command queues them; give it a moment before polling for idle
    page.wait_for_timeout(300)
    wait_idle(page, timeout_s)
    if raise_on_error and (errors := cell_errors(page)):
        raise AssertionError("a cell raised: " + "; ".join(errors))


def run_below(page: Any, containing: str, timeout_s: float = 120.0) -> None:
    """Run > Run Selected Cell and All Below (``notebook:run-all-below``) from the first cell whose source holds
    ``containing``, then :func:`wait_idle`; a cell that raises stops the run there, as in JupyterLab."""
    ok = page.evaluate(_js(_JS_PANEL + """
        const w = panel();
        if (!w) return false;
        const i = w.content.widgets.findIndex(c => c.model.sharedModel.getSource().includes(""" + json.dumps(containing)
        + """));
        if (i < 0) return false;
        window.jupyterapp.shell.activateById(w.id);
        w.content.activeCellIndex = i;
        window.jupyterapp.commands.execute('notebook:run-all-below');
        return true;"""))
    assert ok, f"no open notebook with a cell holding {containing!r}"
    page.wait_for_timeout(300)
    wait_idle(page, timeout_s)


def wait_idle(page: Any, timeout_s: float = 120.0, settle_checks: int = 3) -> None:
    """Wait until the open notebook's kernel is idle and no cell shows ``[*]``.

    Args:
        page: the Playwright page.
        timeout_s: the bound.
        settle_checks: consecutive idle readings (0.2 s apart) required, so a gap between two cells
            or a widget callback's brief busy state does not count as done.

    Raises:
        AssertionError: still busy at the deadline (with the kernel status and pending cells).
    """
    deadline = time.monotonic() + timeout_s
    calm = 0
    state: dict = {}
    while time.monotonic() < deadline:
        state = _notebook_state(page)
        if state.get("panel") and state.get("status") == "idle" and state.get("pending") == 0:
            calm += 1
            if calm >= settle_checks:
                return
        else:
            calm = 0
        page.wait_for_timeout(_POLL_S * 1000)
    raise AssertionError(f"notebook not idle within {timeout_s:.0f} s: {state}")


def cell_outputs_text(page: Any) -> list[str]:
    """The rendered text of each cell's outputs, one string per cell in order ("" for cells without)."""
    return page.evaluate(_js(_JS_PANEL + """
        const w = panel();
        if (!w) return [];
        return w.content.widgets.map(c => {
          const out = c.node.querySelector('.jp-OutputArea');
          return out ? out.innerText.trim() : '';
        });"""))


def cell_errors(page: Any) -> list[str]:
    """``cell N: ename: evalue`` for every error output in the open notebook's model."""
    return page.evaluate(_js(_JS_PANEL + """
        const w = panel();
        if (!w) return [];
        const found = [];
        w.content.widgets.forEach((c, i) => {
          if (!c.model.outputs) return;
          for (let j = 0; j < c.model.outputs.length; j++) {
            const o = c.model.outputs.get(j).toJSON();
            if (o.output_type === 'error') found.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
          }
        });
        return found;"""))


# --- ipywidgets ----------------------------------------------------------------------------------
#
# ipywidgets 8 renders a described widget as a box with the class ``jupyter-widgets`` whose first
# child is ``<label class="widget-label">description</label>``: ``.widget-slider`` (noUiSlider:
# ``.noUi-handle`` with role=slider, value in ``.widget-readout``), ``.widget-text`` (an <input>;
# Text, Combobox, IntText...), ``.widget-textarea``, ``.widget-dropdown`` (<select>), ``.widget-html``
# (``.widget-html-content``), ``.widget-checkbox`` (its description in ``label.widget-label-basic > span``,
# beside an empty ``label.widget-label``). Buttons are ``button.jupyter-button`` with the
# description as their text. A Label widget is a bare ``div.widget-label`` with its value as text.


def _xpath_literal(text: str) -> str:
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


def _has_class(name: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def _visible(loc: Any, timeout_s: float, problem: Callable[[], str]) -> Any:
    """``loc`` once visible; else an AssertionError with ``problem()`` (what the page showed instead)."""
    try:
        loc.wait_for(state="visible", timeout=timeout_s * 1000)
    except Exception as e:
        raise AssertionError(problem()) from e
    return loc


def widget(page: Any, label: str, index: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """The ipywidgets widget whose description label reads ``label`` (whitespace-normalised, exact).

    Args:
        page: the Playwright page.
        label: the widget's ``description`` as shown.
        index: which one when several widgets share the label (document order).
        timeout_s: how long to wait for it to be shown.

    Returns:
        A Playwright ``Locator`` for the widget's box (``.jupyter-widgets``).

    Raises:
        AssertionError: no such widget was shown in time (with the labels that were).
    """
    lit = _xpath_literal(" ".join(label.split()))
    xpath = (f"//*[{_has_class('jupyter-widgets')}]"
             f"[./label[{_has_class('widget-label')} and normalize-space(.)={lit}]"
             f" or ./label/span[normalize-space(.)={lit}]]")  # Checkbox: <label><input><span>description</span></label>
    return _visible(page.locator(f"xpath={xpath}").nth(index), timeout_s,
                    lambda: f"no widget labelled {label!r} (#{index}) within {timeout_s:.0f} s; "
                            f"labels shown: {widget_labels(page)}")


def widget_labels(page: Any) -> list[str]:
    """The description labels of the widgets on the page (for messages and debugging)."""
    css = ".jupyter-widgets > label.widget-label, .jupyter-widgets > label.widget-label-basic > span"
    texts = page.locator(css).all_inner_texts()
    # a Checkbox keeps an empty (zero-width space) label beside the <span> that carries its description
    return [" ".join(t.replace("\u200b", "").split()) for t in texts if t.replace("\u200b", "").strip()]


def set_text(page: Any, label: str, value: str, submit: bool = True, index: int = 0) -> None:
    """Type ``value`` into a Text / Combobox / IntText / FloatText / Textarea widget like a user.

    Clicks the input, selects all (Ctrl+A), types the text key by key, then presses Enter (Text and
    Combobox send ``on_submit`` / sync with ``continuous_update=False`` on it) and leaves the field
    (Tab), so widgets that sync on blur get the value too.

    Args:
        page: the Playwright page.
        label: the widget's description.
        value: the text to type.
        submit: press Enter after typing (not for a Textarea, where Enter is a newline).
        index: which widget when several share the label.
    """
    box = widget(page, label, index)
    field_ = box.locator("input:not([type=checkbox]), textarea").first
    field_.click()
    field_.press("ControlOrMeta+a")
    if value:
        field_.press_sequentially(value, delay=10)
    else:
        field_.press("Delete")
    if submit:
        field_.press("Enter")
    field_.press("Tab")


def select_option(page: Any, label: str, option: str, index: int = 0) -> None:
    """Choose the entry shown as ``option`` in a Dropdown (or Select) widget."""
    widget(page, label, index).locator("select").first.select_option(label=option)


def set_checkbox(page: Any, label: str, checked: bool, index: int = 0) -> None:
    """Tick or untick a Checkbox widget by clicking it."""
    box = widget(page, label, index).locator("input[type=checkbox]").first
    if box.is_checked() != checked:
        box.click()


def _slider_handle(page: Any, label: str, index: int, handle: int) -> Any:
    handles = widget(page, label, index).locator(".noUi-handle")
    assert handles.count() > handle, f"widget {label!r} has no slider handle #{handle}"
    return handles.nth(handle)


def move_slider(page: Any, label: str, steps: int, index: int = 0, handle: int = 0) -> None:
    """Move a slider by ``steps`` of its ``step`` with the keyboard (ArrowRight / ArrowLeft on its handle).

    Each key press is one step and syncs to the kernel like a drag (``continuous_update``).

    Args:
        page: the Playwright page.
        label: the slider's description.
        steps: positive to the right (larger), negative to the left.
        index: which widget when several share the label.
        handle: for a range slider, 0 = lower handle, 1 = upper.
    """
    knob = _slider_handle(page, label, index, handle)
    knob.focus()
    key = "ArrowRight" if steps > 0 else "ArrowLeft"
    for _ in range(abs(steps)):
        knob.press(key)


def slider_value(page: Any, label: str, index: int = 0, handle: int = 0) -> float:
    """A slider's value as shown (its readout, else the handle's ``aria-valuenow``)."""
    box = widget(page, label, index)
    readout = box.locator(".widget-readout")
    text = readout.first.inner_text() if readout.count() and readout.first.is_visible() else ""
    parts = re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text.replace(",", ""))
    if len(parts) > handle:
        return float(parts[handle])
    return float(_slider_handle(page, label, index, handle).get_attribute("aria-valuenow"))


def set_slider(page: Any, label: str, value: float, index: int = 0, handle: int = 0,
               max_presses: int = 1000, tolerance: float = 1e-9) -> None:
    """Bring a slider to ``value`` by pressing arrow keys on its handle until its readout shows it.

    Raises:
        AssertionError: the slider stopped moving (a bound) or needed more than ``max_presses`` presses.
    """
    knob = _slider_handle(page, label, index, handle)
    knob.focus()
    current = slider_value(page, label, index, handle)
    for _ in range(max_presses):
        if abs(current - value) <= tolerance * max(1.0, abs(value)):
            return
        knob.press("ArrowRight" if current < value else "ArrowLeft")
        now = slider_value(page, label, index, handle)
        if now == current or (now - value) * (current - value) < 0:  # stuck at a bound, or stepped over it
            raise AssertionError(f"slider {label!r} cannot reach {value}: it is at {now} (steps do not land on it?)")
        current = now
    raise AssertionError(f"slider {label!r} not at {value} after {max_presses} key presses (at {current})")


def click_button(page: Any, text: str, index: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Click the Button widget whose text reads ``text`` (whitespace-normalised, exact)."""
    pattern = re.compile(r"^\s*" + r"\s+".join(map(re.escape, text.split())) + r"\s*$")
    button = page.locator("button.jupyter-button").filter(has_text=pattern).nth(index)
    shown = page.locator("button.jupyter-button")
    _visible(button, timeout_s, lambda: f"no button {text!r} (#{index}) within {timeout_s:.0f} s; buttons shown: "
                                        f"{[' '.join(t.split()) for t in shown.all_inner_texts()]}")
    button.click()


def widget_value(page: Any, label: str, index: int = 0) -> str:
    """What a described widget shows, as text.

    Input widgets (Text, Combobox, IntText...): the input's value; Dropdown: the selected entry;
    Checkbox: "True" / "False"; slider: its readout; HTML / HTMLMath: the content's text; anything
    else: the box's text without the label.
    """
    box = widget(page, label, index)
    field_ = box.locator("input:not([type=checkbox]), textarea")
    if field_.count():
        return field_.first.input_value()
    select = box.locator("select")
    if select.count():
        return select.first.evaluate("s => s.selectedIndex < 0 ? '' : s.options[s.selectedIndex].text")
    check = box.locator("input[type=checkbox]")
    if check.count():
        return str(check.first.is_checked())
    for css in (".widget-readout", ".widget-html-content", ".widget-htmlmath-content"):
        part = box.locator(css)
        if part.count():
            return part.first.inner_text().strip()
    return box.evaluate("b => Array.from(b.childNodes).filter(n => !(n.matches && n.matches('label.widget-label')))"
                        ".map(n => n.innerText || n.textContent || '').join(' ').trim()")


#: Widgets that show text (HTML, HTMLMath, Label): where :func:`wait_for_widget_text` looks.
TEXT_WIDGETS = ".widget-html-content, .widget-htmlmath-content, div.jupyter-widgets.widget-label"


def widget_texts(page: Any) -> list[str]:
    """The texts shown by the HTML / HTMLMath / Label widgets on the page, in document order."""
    return [" ".join(t.split()) for t in page.locator(TEXT_WIDGETS).all_inner_texts()]


def wait_for_widget_text(page: Any, expected: str | re.Pattern, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """Wait until an HTML / HTMLMath / Label widget shows ``expected`` (a substring, or a regex searched).

    Returns:
        A Locator for the first such widget.

    Raises:
        AssertionError: none showed it in time (with the texts that were shown).
    """
    return _visible(page.locator(TEXT_WIDGETS).filter(has_text=expected).first, timeout_s,
                    lambda: f"no widget showed {expected!r} within {timeout_s:.0f} s; widget texts: {widget_texts(page)}")
