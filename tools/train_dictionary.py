"""Train the TopK dictionary of docs/dictionaries.md and print its quality (`make dictionary`).

Every tenth text is held out: FVU, L0, dead latents and the spliced loss are read on it.
The dictionary goes to ``<cache>/dictionaries/<model>-<site>-<layer>-topk`` in SAELens'
format, with ``quality.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import bindscope
from bindscope.dictionaries.quality import reconstruction, spliced_loss
from bindscope.dictionaries.train import (
    TrainOptions,
    site_activations,
    train_topk,
    training_texts,
)
from bindscope.loading.cache import cache_dir


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="default", help="an embedded model's short name")
    parser.add_argument("--site", default="resid_post")
    parser.add_argument("--layer", type=int, default=15)
    parser.add_argument("--samples", type=int, default=64, help="sampled texts")
    parser.add_argument("--new-tokens", type=int, default=96, help="tokens per sampled text")
    parser.add_argument("--splice-texts", type=int, default=48, help="held-out texts spliced")
    parser.add_argument("--out", default=None, help="folder (default: in the model cache)")
    for field, value in asdict(TrainOptions()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    options = TrainOptions(**{k: getattr(args, k) for k in asdict(TrainOptions())})
    model = bindscope.load_model(None if args.model == "default" else args.model)
    clock = {"start": time.perf_counter()}
    texts = training_texts(model, samples=args.samples, new_tokens=args.new_tokens)
    clock["texts"] = time.perf_counter()
    train, held = [t for i, t in enumerate(texts) if i % 10], texts[::10]
    where = {"site": args.site, "layer": args.layer}
    train_x = site_activations(model, train, **where)
    held_x = site_activations(model, held, **where)
    clock["capture"] = time.perf_counter()
    sae = train_topk(train_x, options)
    clock["train"] = time.perf_counter()
    fit = reconstruction(sae, held_x)
    loss = spliced_loss(model, held[: args.splice_texts], sae, **where)
    clock["quality"] = time.perf_counter()
    steps = ["texts", "capture", "train", "quality"]
    seconds = {s: round(clock[s] - clock[p], 1) for p, s in zip(["start", *steps], steps)}
    quality = {
        "seconds": seconds,
        "train_tokens": len(train_x),
        "texts": len(texts),
        **asdict(fit),
        "explained_variance": fit.explained_variance,
        **{f"loss_{k}": v for k, v in asdict(loss).items()},
        "delta_loss": loss.delta,
        "loss_recovered": loss.recovered,
        "options": asdict(options),
    }
    name = f"{model.name.split('/')[-1]}-{args.site}-{args.layer}-topk"
    folder = Path(args.out) if args.out else cache_dir() / "dictionaries" / name
    sae.to_dictionary(model_name=model.name, **where).save(folder)
    (folder / "quality.json").write_text(json.dumps(quality, indent=2) + "\n")
    print(json.dumps(quality, indent=2))
    print(f"saved to {folder}")


if __name__ == "__main__":
    main()
