"""Train chapter 19's three small models (plain, gated attention, QK-norm) and write them.

    .venv/bin/python scripts/train_head_options.py            # the shipped run (minutes)
    .venv/bin/python scripts/train_head_options.py --steps 5 --out /tmp

Each is attncore.lab.language.train_language_model with HEAD_OPTIONS_CONFIG, from the
same seed and on the same batches: CPU, float64, one thread. Weights stored as float32.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from attncore.lab.head_options import (
    HEAD_OPTIONS_CONFIG,
    VARIANTS,
    checkpoint_path,
    init_variant,
)
from attncore.lab.language import save_checkpoint, train_language_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=HEAD_OPTIONS_CONFIG.steps)
    parser.add_argument("--out", type=Path, default=None,
                        help="a folder (default: next to attncore.lab.head_options)")
    args = parser.parse_args(argv)
    for name in VARIANTS:
        start = time.perf_counter()
        model, losses = train_language_model(HEAD_OPTIONS_CONFIG, model=init_variant(name),
                                             stop_step=args.steps)
        path = checkpoint_path(name)
        if args.out is not None:
            path = args.out / path.name
        save_checkpoint(path, model, HEAD_OPTIONS_CONFIG, losses)
        print(f"{name}: {len(losses)} steps in {time.perf_counter() - start:.0f} s, "
              f"last loss {losses[-1]:.3f}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
