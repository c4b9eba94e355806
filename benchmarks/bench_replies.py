"""The demo world's replies: one batch size against another, in the same process, and whether they agree.

A target's greedy replies with the drafter's states recorded
(:func:`eaglelab.data.responses.generate_training_data`, as the world's ``replies`` stages run it), first at
the candidate batch size, then at the baseline batch size, over the same prompts. Prints the
reply tokens per second of each, their ratio, how many replies are identical, and the largest difference
between the recorded states.

    python benchmarks/bench_replies.py [--world tiny|demo] [--prompts 128] [--batch 128] [--baseline 32]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="demo", choices=["tiny", "demo"])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--batch", type=int, default=128, help="the candidate batch size")
    ap.add_argument("--baseline", type=int, default=32, help="the batch size it is measured against")
    ap.add_argument("--tokens", type=int, default=96, help="reply length limit (the demo world's)")
    args = ap.parse_args()

    from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
    from eaglelab.checkpoints.drafters.spec import drafter_spec_from_config
    from eaglelab.data.responses import generate_training_data
    from eaglelab.model.targets import Target, load_target
    from eaglelab.worlds.build import build_world
    from eaglelab.worlds.demo import demo_prompts

    world = build_world(args.world)
    model, tok = load_target(world.target_a, device="cpu")
    target = Target.for_drafter(model, drafter_spec_from_config(drafter_config_for_target(model.config.to_dict())))
    prompts = demo_prompts(args.prompts, 0)["train"]
    runs = {}
    try:
        for batch in (args.batch, args.baseline):
            t = time.perf_counter()
            replies, states = generate_training_data(target, tok, prompts, args.tokens, batch, 16, f"batch {batch}")
            runs[batch] = (replies, states, time.perf_counter() - t)
    finally:
        target.close()
    (new, new_states, new_s), (old, old_states, old_s) = runs[args.batch], runs[args.baseline]
    same = sum(a == b for a, b in zip(new.replies, old.replies))
    print(f"{args.world} world, {len(prompts)} prompts, {old.reply_tokens} reply tokens at batch {args.baseline}:")
    print(f"  batch {args.batch}: {new.reply_tokens / new_s:.0f} tok/s; batch {args.baseline}: "
          f"{old.reply_tokens / old_s:.0f} tok/s: {old_s / new_s:.2f}x")
    print(f"  identical replies: {same} of {len(prompts)}", end="")
    if same == len(prompts):
        diff = max(float((new_states.aux - old_states.aux).abs().max()), float((new_states.last - old_states.last).abs().max()))
        print(f"; states within {diff:.1e}")
    else:
        print(" (the states are compared only when every reply is)")


if __name__ == "__main__":
    main()
