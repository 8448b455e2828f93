"""Train the capstone chapter's language model and write its checkpoint.

    .venv/bin/python scripts/train_capstone.py              # the shipped run (minutes)
    .venv/bin/python scripts/train_capstone.py --steps 5 --out /tmp/x.safetensors

The run is attncore.lab.language.train_language_model with CAPSTONE_CONFIG below: CPU,
float64, one thread, seeded, so the same command gives the same losses on any machine (up
to the last bits of the CPU's kernels); tests/test_language.py checks that its first steps
reproduce the losses stored in the shipped file. The weights are stored as float32.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from attncore.lab.language import (
    CAPSTONE_CONFIG,
    save_checkpoint,
    shipped_checkpoint,
    train_language_model,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=CAPSTONE_CONFIG.steps,
                        help="training steps (default: the shipped run's)")
    parser.add_argument("--out", type=Path, default=shipped_checkpoint())
    args = parser.parse_args(argv)
    config = CAPSTONE_CONFIG
    start = time.perf_counter()
    # the schedule is the shipped run's even when fewer steps are taken
    model, losses = train_language_model(config, stop_step=args.steps)
    print(f"{len(losses)} steps in {time.perf_counter() - start:.0f} s, last loss "
          f"{losses[-1]:.3f}")
    save_checkpoint(args.out, model, config, losses)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
