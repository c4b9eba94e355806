"""The model commands check every checkpoint from its config and headers before any model loads.

A corrupt or mismatched checkpoint is one line and exit code 2, named as such, never a shape error
from deep inside torch after a target has loaded. Real tiny Llama targets (saved with transformers)
and real drafters (written by ``eaglelab drafter init``) are used; each wrong input is a real file.
"""

from __future__ import annotations

import json

import pytest

from eaglelab.cli import main
from tests.conftest import make_tiny_llama


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """Two compatible targets (hidden 64) with a fitting drafter, and a wider one (hidden 96)."""
    root = tmp_path_factory.mktemp("preflight")
    for name, hidden in (("a", 64), ("b", 64), ("wide", 96)):
        make_tiny_llama(layers=4, hidden=hidden, seed=len(name)).save_pretrained(root / name)
    assert main(["drafter", "init", "--target", str(root / "a"), "--out", str(root / "drafter"),
                 "--draft-vocab", "128"]) == 0
    return root


def one_line_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    return err


def test_a_drafter_for_another_target_is_refused_before_loading(targets, capsys):
    rc = main(["speculate", "--target", str(targets / "wide"), "--drafter", str(targets / "drafter"),
               "--prompt", "hello", "--device", "cpu"])
    line = one_line_error(capsys, rc)
    assert "does not fit the target" in line and "hidden_size 96" in line


def test_a_corrupt_target_header_is_refused_before_loading(targets, tmp_path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(targets / "a", broken)
    with open(broken / "model.safetensors", "ab") as fh:
        fh.write(b"\0" * 8)  # bytes after the last tensor: safetensors itself refuses the file
    rc = main(["speculate", "--target", str(broken), "--drafter", str(targets / "drafter"), "--prompt", "hello",
               "--device", "cpu"])
    line = one_line_error(capsys, rc)
    assert "model.safetensors" in line and "8 bytes after the last tensor" in line


def test_a_pickle_only_target_is_refused(targets, tmp_path, capsys):
    import shutil

    folder = tmp_path / "pickled"
    folder.mkdir()
    shutil.copy(targets / "a" / "config.json", folder / "config.json")
    (folder / "pytorch_model.bin").write_bytes(b"not unpickled")
    rc = main(["finetune", "--new-target", str(folder), "--scratch", "--steps", "2", "--out", str(tmp_path / "run")])
    assert "never unpickles" in one_line_error(capsys, rc)


def test_probe_refuses_targets_it_cannot_compare(targets, capsys):
    rc = main(["probe", "--old-target", str(targets / "a"), "--new-target", str(targets / "wide"),
               "--old-drafter", str(targets / "drafter"), "--device", "cpu"])
    line = one_line_error(capsys, rc)
    assert "hidden_size 64 vs 96" in line


def test_a_drafter_whose_tensors_do_not_match_its_config(targets, tmp_path, capsys):
    import shutil

    drafter = tmp_path / "drafter"
    shutil.copytree(targets / "drafter", drafter)
    cfg = json.loads((drafter / "config.json").read_text())
    cfg["intermediate_size"] += 8  # the MLP weights no longer have the shapes the config implies
    (drafter / "config.json").write_text(json.dumps(cfg))
    rc = main(["finetune", "--new-target", str(targets / "a"), "--old-drafter", str(drafter), "--steps", "2",
               "--out", str(tmp_path / "run")])
    line = one_line_error(capsys, rc)
    assert "mlp" in line and "expected" in line


def test_export_checks_the_drafter_against_its_target(targets, tmp_path, capsys):
    rc = main(["drafter", "export", "--to", "speculators", str(targets / "drafter"), str(tmp_path / "out"),
               "--target", str(targets / "wide")])
    assert "does not fit the target" in one_line_error(capsys, rc)
    assert not (tmp_path / "out").exists()


def test_compatible_inputs_pass_the_checks(targets):
    from eaglelab.checkpoints.drafters.preflight import check_drafter, check_target_pair

    spec, cfg_a = check_drafter(str(targets / "drafter"), str(targets / "a"))
    assert spec.target_hidden_size == cfg_a["hidden_size"] == 64
    check_target_pair(str(targets / "a"), cfg_a, str(targets / "b"), json.loads((targets / "b" / "config.json")
                                                                               .read_text()))


def test_the_fine_tune_opens_the_old_drafter_once(tiny_world, monkeypatch):
    """#57 item 3: `finetune --old-drafter` parsed the drafter's config and headers in the pre-flight check, again in
    load_inputs' own check, and again in load_drafter; the check now hands what it opened to the loader."""
    import eaglelab.checkpoints.drafters.preflight as preflight
    import eaglelab.jobs.finetune as finetune
    import eaglelab.model.drafter_files as drafter_files
    from eaglelab.checkpoints.files.sources import load_checkpoint

    opened = []

    def counting(source, *args, **kwargs):
        opened.append(str(source))
        return load_checkpoint(source, *args, **kwargs)

    for module in (preflight, finetune, drafter_files):
        monkeypatch.setattr(module, "load_checkpoint", counting)
    drafter = str(tiny_world.drafter_a)
    settings = finetune.FinetuneSettings(str(tiny_world.target_b), old_drafter=drafter, seq_len=32, train_sequences=4,
                                         eval_sequences=2, world_dir=str(tiny_world.root))
    checked = finetune.check_finetune(settings)  # what `eaglelab finetune` runs first, before the process group
    inputs = finetune.load_inputs(settings, progress=False, checked=checked)
    assert opened.count(drafter) == 1, opened
    assert inputs.old is not None and inputs.old.spec == preflight.check_drafter(drafter)[0]
