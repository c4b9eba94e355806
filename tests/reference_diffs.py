"""Print the largest difference between eaglelab and each reference, per drafter variant.

The same builders and inputs as ``tests/test_reference_drafters.py`` (which asserts them below
1e-5); this prints the measured values: ``.venv/bin/python -m tests.reference_diffs``.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from tests import references
from tests import test_reference_drafters as t


def main() -> None:
    warnings.filterwarnings("ignore")
    print(f"{'variant':28s} {'reference':12s} {'logits (3 steps, rel.)':>23s} {'loss (rel.)':>12s} {'accuracy':>9s}")
    for name, (_, _, refs) in t.VARIANTS.items():
        for ref in refs:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                verifier = t.write_verifier(root / "verifier")
                d, folders = t.write_variant(name, root, verifier)
                ids, aux, last, norm_w, head, mask = t.inputs(d, 2 if ref == "specforge" else 1, verifier)
                ours, out, logits = t.eaglelab_run(d, ids, aux, last, norm_w, head, mask, ref)
                if ref == "specforge":
                    theirs, losses, accs = references.specforge_ttt(folders[ref], ids, aux, logits, mask, t.STEPS)
                else:
                    theirs, _, m = references.speculators_ttt(folders[ref], ids, aux, last, mask, t.STEPS)
                    losses = [m[f"loss_{i}_sum"] for i in range(t.STEPS)]
                    accs = [m[f"full_acc_{i}_sum"] / m[f"full_acc_{i}_total"] for i in range(t.STEPS)]
                    ours = [o[:, :-1] for o in ours]  # speculators drops the last position
                logit_diff = max(t.rel(a, b) for a, b in zip(ours, theirs, strict=True))
                loss_diff = max(abs(a - b) / abs(b) for a, b in zip(out.step_losses, losses, strict=True))
                acc_diff = max(abs(a - b) for a, b in zip(out.convention_acc, accs, strict=True))
                print(f"{name:28s} {ref:12s} {logit_diff:23.2e} {loss_diff:12.2e} {acc_diff:9.2e}")


if __name__ == "__main__":
    main()
