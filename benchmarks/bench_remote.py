"""Benchmark the remote path against a local NDIF server: what a request costs.

Needs a running server (``bindscope ndif up``); ``NDIF_HOST`` picks it (default
``http://127.0.0.1:8001``). Both sides run the same float32 weights on this machine's CPU,
so the differences are the remote path's own: serialising the body, the API and queue,
Ray, the result's way back.

* ``overhead``: ``logits`` on two short prompts, ``--repeats`` times, remote and local
  (medians; the first remote call is reported apart: it warms the server's caches).
* ``sessions``: ``generate_ids`` on 16 prompts in batches of 2 (8 batches): one session
  request for all 8 (bindscope's default, ``SESSION_BATCHES``) against one request each.
* ``c5``: ``c5.run`` on two terms of the small test prompt set (k=2, two random sets),
  remote and local wall time.
* ``scan``: the exact scan (``runners.scan.condition_scores``, every layer ablated in turn)
  on 8 sequences in batches of 4, remote (one session request per batch) and local.

Every figure of one run comes from the same machine and the same server; the JSON says
which server mode (``sandboxed``) it was.

Run from the repo root::

    .venv/bin/bindscope ndif up
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_remote.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROMPTS = ["The cat sat on the mat.", "Alice gave Bob a book."]


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def overhead(local, far, repeats: int) -> dict:
    """Median wall time of ``logits`` on two prompts, each side."""
    first = _timed(lambda: far.logits(PROMPTS))
    remote = [_timed(lambda: far.logits(PROMPTS)) for _ in range(repeats)]
    here = [_timed(lambda: local.logits(PROMPTS)) for _ in range(repeats)]
    return {
        "remote_first_s": round(first, 3),
        "remote_median_s": round(statistics.median(remote), 3),
        "local_median_s": round(statistics.median(here), 3),
        "overhead_s": round(statistics.median(remote) - statistics.median(here), 3),
    }


def sessions(far) -> dict:
    """Eight generation batches as one session request, and as eight requests."""
    from bindscope import batch

    texts = [f"Item {i}: the weather today is" for i in range(16)]
    out = {}
    default = batch.sessions.__defaults__
    for label, size in (("one_session_s", batch.SESSION_BATCHES), ("request_per_batch_s", 1)):
        batch.sessions.__defaults__ = (size,)
        try:
            out[label] = round(
                _timed(lambda: far.generate_ids(texts, max_new_tokens=4, batch_size=2)), 3
            )
        finally:
            batch.sessions.__defaults__ = default
    return out


def c5_times(local, far) -> dict:
    """C5 on two terms (20 records' worth of the small prompt set), each side."""
    from bindscope.experiments import c5
    from tests.experiments import prompts_tiny

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "prompts.jsonl"
        rows = [r for r in prompts_tiny.records() if r["term"] in ("screen reader", "skip link")]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = {}
        for label, model in (("remote_s", far), ("local_s", local)):
            out[label] = round(
                _timed(
                    lambda m=model, lab=label: c5.run(
                        m, prompts=path, out=Path(folder) / lab, k=2, n_random=2, progress=False
                    )
                ),
                1,
            )
        return out


def scan_times(local, far) -> dict:
    """The exact scan over every layer on 8 sequences, each side, and the requests sent."""
    from bindscope.remote import transport
    from bindscope.runners.scan import ScoredSequence, condition_scores

    texts = [f"Item {i}: the weather today is sunny and warm" for i in range(8)]
    sequences = [ScoredSequence(local.tokenize(t), 2) for t in texts]
    conditions = [[(layer, h) for h in range(local.n_heads)] for layer in range(local.n_layers)]
    sent = []
    send = transport._send
    transport._send = lambda m, t: sent.append(1) or send(m, t)
    try:
        out = {
            label: round(
                _timed(lambda m=model: condition_scores(m, sequences, conditions, batch_size=4)),
                2,
            )
            for label, model in (("remote_s", far), ("local_s", local))
        }
    finally:
        transport._send = send
    return {**out, "remote_requests": len(sent)}


def main() -> None:
    """Run the three measurements and print them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="embedded model")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("NDIF_HOST", "http://127.0.0.1:8001")
    os.environ.setdefault("NDIF_API_KEY", "local")  # auth is off on the local server
    import huggingface_hub
    from nnsight import CONFIG

    import bindscope
    from bindscope import local_ndif as server
    from bindscope.loading import SERVED, cache_dir

    huggingface_hub.constants.HF_HUB_OFFLINE = True  # the local server's models are cached
    CONFIG.APP.REMOTE_LOGGING = False
    local = bindscope.load_model(args.model)
    started = time.perf_counter()
    far = bindscope.load_model(SERVED[args.model], remote=True)
    load = time.perf_counter() - started
    results = {
        "host": os.environ["NDIF_HOST"],
        "model": args.model,
        "remote_load_s": round(load, 2),
        "overhead": overhead(local, far, args.repeats),
        "sessions": sessions(far),
        "c5": c5_times(local, far),
        "scan": scan_times(local, far),
        "sandboxed": server.status(home=cache_dir() / "ndif").get("sandboxed"),
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
