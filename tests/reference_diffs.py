"""Print the largest difference between eaglelab and each reference, per drafter variant.

The same builders and inputs as ``tests/test_reference_drafters.py`` (which asserts them below
1e-5); this prints the measured values: ``.venv/bin/python -m tests.reference_diffs``.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from tests import test_reference_drafters as t


def main() -> None:
    warnings.filterwarnings("ignore")
    print(f"{'variant':28s} {'reference':12s} {'logits (3 steps, rel.)':>23s} {'loss (rel.)':>12s} {'accuracy':>9s}")
    for ref in ("specforge", "speculators"):
        for name, (_, _, refs) in t.VARIANTS.items():
            if ref not in refs:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                side = t.run_both(name, ref, root, t.write_verifier(root / "verifier"))
            logit_diff = max(t.rel(a, b) for a, b in zip(side.ours, side.theirs, strict=True))
            loss_diff = max(abs(a - b) / abs(b) for a, b in zip(*side.losses, strict=True))
            acc_diff = max(abs(a - b) for a, b in zip(*side.accs, strict=True))
            print(f"{name:28s} {ref:12s} {logit_diff:23.2e} {loss_diff:12.2e} {acc_diff:9.2e}")


if __name__ == "__main__":
    main()
