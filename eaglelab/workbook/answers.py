"""Each notebook's answer for a choice of checkpoints, computed in one call (what a picker's button runs).

The notebooks compute the same answers cell by cell, with figures and the measured sections; these
functions give the headline for a new pick in place, with one progress bar per long step, and return
what to display (Markdown and tables). Errors are the package's typed errors (one line in the panel).
"""

from __future__ import annotations

from typing import Any


def _tag(paths: list[str], root: str) -> str:
    from eaglelab.planning import provenance as pv

    return pv.tag(pv.evidence_source(paths, root)) if root else ""


def comparison_answer(values: dict[str, str], root: str = "") -> list[Any]:
    """Notebook 02: the verdict of ``DRAFTER_A`` vs ``DRAFTER_B`` (and on ``TARGET``), from headers only.

    Returns:
        ``[Markdown verdict, config-diff table]``.
    """
    import pandas as pd
    from IPython.display import Markdown

    from eaglelab.checkpoints.inspection import compare_checkpoints

    a, b, target = values["DRAFTER_A"], values["DRAFTER_B"], values.get("TARGET") or None
    comparison = compare_checkpoints(a, b, target=target)
    report = comparison.to_json()
    vocab = comparison.vocab_maps
    lines = [f"**Verdict {_tag([a, b, target], root)}: {comparison.verdict.level}**",
             *(f"- {r}" for r in comparison.verdict.reasons),
             f"- vocabulary maps: **{vocab.level}** ({vocab.message})" if vocab else "- vocabulary maps: not readable",
             *(f"- {label.upper()} on the target: **{v.level}**" for label, v in comparison.target_verdicts.items())]
    diff = pd.DataFrame(report["config_diff"]) if report["config_diff"] else Markdown("*configs identical*")
    return [Markdown("\n".join(lines)), diff]


def probe_answer(values: dict[str, str], root: str = "", *, sequences: int = 24, seq_len: int = 64, steps: int = 3,
                 batch_size: int = 8, dtype: str = "float32", device: str | None = None,
                 device_map: str | None = None) -> list[Any]:
    """Notebook 03: how far ``TARGET_B`` moved from ``TARGET_A`` where ``DRAFTER`` reads, and its plug-in τ.

    ``DATA`` (optional): a text / JSONL file; else the world's conversations or built-in text.

    Returns:
        ``[Markdown verdict with teacher-forced τ on A and B, similarity table per layer]``.
    """
    import pandas as pd
    from IPython.display import Markdown

    from eaglelab.checkpoints.preflight import check_drafter, check_target, check_target_pair
    from eaglelab.data.sets import probe_set, world_of
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.plugin import run_probe
    from eaglelab.progress import progress

    a, b, d, data = values["TARGET_A"], values["TARGET_B"], values["DRAFTER"], values.get("DATA") or None
    with progress(total=4, desc="plug-in probe", leave=True) as bar:
        bar.set_postfix_str("checking configs and headers")
        _, cfg_a = check_drafter(d, a)
        check_target_pair(a, cfg_a, b, check_target(b))
        bar.update()
        bar.set_postfix_str("loading target A")
        model_a, tok = load_target(a, dtype=dtype, device=device, device_map=device_map)
        bar.update()
        bar.set_postfix_str("loading target B")
        model_b, _ = load_target(b, dtype=dtype, device=device, device_map=device_map)
        drafter = load_drafter(d).to(next(model_a.parameters()).device)
        bar.update()
        bar.set_postfix_str("capturing both targets")
        probe_data = probe_set(tok, sequences, seq_len, world_of(a), data)
        result = run_probe(model_a, model_b, drafter, probe_data.ids, steps=steps, batch_size=batch_size,
                           loss_mask=probe_data.counted)
        bar.update()
        bar.set_postfix_str("done")
    tag = _tag([a, b, d], root)
    tau_a, tau_b = result.eval_a["accept_len"], result.eval_b["accept_len"]
    text = (f"**Verdict {tag}: {result.decision.action.upper()}** · τ (teacher forced, k = {steps}) {tau_a:.2f} on A vs "
            f"**{tau_b:.2f} on B** · next-token agreement {100 * result.argmax_agreement:.1f}% · "
            f"{probe_data.positions} positions ({probe_data.source})\n\n"
            + "\n".join(f"- {r}" for r in result.decision.reasons))
    return [Markdown(text), pd.DataFrame(result.to_json()["layers"]).set_index("layer").round(4)]


def finetune_answer(values: dict[str, str], root: str = "", *, steps: int = 60, batch_size: int = 4, lr: float = 2e-3,
                    ttt_steps: int = 3, seq_len: int = 64, train_sequences: int = 128, eval_sequences: int = 32,
                    loss_convention: str = "specforge", dtype: str = "float32", device: str | None = None) -> list[Any]:
    """Notebook 04: the old drafter as is, warm-started and from scratch on ``TARGET``'s data, at equal budget.

    Returns:
        ``[Markdown recommendation, table of held-out τ and final loss per start]``.
    """
    import pandas as pd
    from IPython.display import Markdown

    from eaglelab.checkpoints.preflight import check_drafter
    from eaglelab.data.sets import finetune_set, world_of
    from eaglelab.decisions import recommend
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.progress import progress
    from eaglelab.train.finetune import finetune, initial_drafter
    from eaglelab.train.training import TrainConfig
    from eaglelab.train.ttt import evaluate_drafter

    target, old_path, data = values["TARGET"], values["OLD_DRAFTER"], values.get("DATA") or None
    cfg = TrainConfig.for_steps(steps, batch_size=batch_size, ttt_steps=ttt_steps, lr=lr, loss_convention=loss_convention)
    with progress(total=4, desc="warm start vs scratch", leave=True) as bar:
        bar.set_postfix_str("checking and loading the target")
        check_drafter(old_path, target)
        model, tok = load_target(target, dtype=dtype, device=device)
        old = load_drafter(old_path)
        bar.update()
        bar.set_postfix_str("capturing the new target's data")
        states, source = finetune_set(model, tok, old.spec, data, world_of(target), seq_len, train_sequences,
                                      eval_sequences)
        plugged = evaluate_drafter(initial_drafter(model, old_path, states.train.input_ids), states.held_out,
                                   model.lm_head, ttt_steps)["accept_len"]
        bar.update()
        bar.set_postfix_str("training the warm start")
        warm = finetune(model, old_path, states, cfg)
        bar.update()
        bar.set_postfix_str("training from scratch")
        scratch = finetune(model, None, states, cfg, draft_vocab_size=old.spec.draft_vocab_size)
        bar.update()
        bar.set_postfix_str("done")
    taus = {"plug in": float(plugged), "warm start": warm.metrics[-1]["eval_accept_len"],
            "from scratch": scratch.metrics[-1]["eval_accept_len"]}
    decision = recommend(taus)
    table = pd.DataFrame({"held-out τ": taus, f"final loss ({loss_convention})":
                          {"plug in": "not trained", "warm start": f"{warm.metrics[-1]['loss']:.3f}",
                           "from scratch": f"{scratch.metrics[-1]['loss']:.3f}"}})
    text = (f"**{decision.action.upper()} {_tag([target, old_path], root)}** on held-out τ (teacher forced, k = {ttt_steps}, "
            f"{steps} steps each; {source}): plugged in {taus['plug in']:.2f}, warm start {taus['warm start']:.2f}, "
            f"from scratch {taus['from scratch']:.2f}. Section 3 below measures real decoding.")
    return [Markdown(text), table.round(3)]
