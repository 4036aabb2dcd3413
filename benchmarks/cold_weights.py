"""Why an adapter costs more than its arithmetic at batch 1: its operators timed warm and cold, BERT-base shape.

In a batch-1 forward of BERT-base about 340 MB of backbone weights pass through the caches between one call of
an adapter and the next, so every adapter meets its weights in main memory. This script times each operator of
one Houlsby adapter (d = 768, r = 64, the weight layout ``BottleneckAdapter`` keeps, 25 tokens: an SST-2 dev
sentence) and the 768 × 768 dense layer it follows, each call alone: *warm* right after the same call, *cold*
after a pass over a buffer larger than the last-level cache (``--sweep-mb``). A plain copy of the
up-projection's weight shows how fast those bytes stream when read in order.

    python benchmarks/cold_weights.py            # 2 threads, about 15 s
    python benchmarks/cold_weights.py --quick    # smoke run
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import common
from adapterlab.adapter import BottleneckAdapter

D_MODEL, BOTTLENECK, TOKENS, THREADS = 768, 64, 25, 2


def operators(seed: int = 0) -> dict:
    """name -> (call, multiply-adds) for one adapter's operators and the dense layer before it."""
    torch.manual_seed(seed)
    adapter = BottleneckAdapter(D_MODEL, BOTTLENECK, init="bert").eval()
    dense = torch.nn.Linear(D_MODEL, D_MODEL).eval()
    h = torch.randn(1, TOKENS, D_MODEL)
    z = torch.randn(1, TOKENS, BOTTLENECK)
    down, up = adapter.down, adapter.up
    macs = TOKENS * D_MODEL * BOTTLENECK
    return {
        "dense 768 x 768 (the backbone's)": (lambda: F.linear(h, dense.weight, dense.bias), TOKENS * D_MODEL**2),
        "adapter: down-projection": (lambda: F.linear(h, down.weight, down.bias), macs),
        "adapter: GELU": (lambda: F.gelu(z), 0),
        "adapter: up-projection": (lambda: F.linear(z, up.weight, up.bias), macs),
        "adapter: residual add": (lambda: h + h, 0),
        "adapter: all of it": (lambda: h + adapter.plain_delta(h), 2 * macs),
        "copy of the up weight (streamed)": (lambda: up.weight.clone(), 0),
    }


def time_call(call, sweep: torch.Tensor | None, calls: int) -> float:
    """Median microseconds of ``calls`` single calls, each after a pass over ``sweep`` (cold) or after itself."""
    times = []
    call()
    for _ in range(calls):
        if sweep is not None:
            sweep.mul_(1.0)
        else:
            call()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0], default_threads=THREADS)
    p.add_argument("--sweep-mb", type=int, default=64, help="buffer passed over before a cold call (default 64 MB)")
    p.add_argument("--calls", type=int, default=400, help="timed calls per operator and state (default 400)")
    args = p.parse_args(argv)
    common.set_threads(args)
    calls = 5 if args.quick else args.calls
    sweep = torch.ones(args.sweep_mb * 2**20 // 4)
    rows = []
    with torch.inference_mode():
        for name, (call, macs) in operators().items():
            warm, cold = time_call(call, None, calls), time_call(call, sweep, calls)
            rows.append({"op": name, "mflop": 2 * macs / 1e6, "warm_us": warm, "cold_us": cold,
                         "extra_us": cold - warm, "gflops_warm": 2 * macs / warm / 1e3 if macs else None,
                         "gflops_cold": 2 * macs / cold / 1e3 if macs else None})
    payload = {"benchmark": "cold_weights", "machine": common.machine(), "threads": torch.get_num_threads(),
               "tokens": TOKENS, "d_model": D_MODEL, "bottleneck": BOTTLENECK, "sweep_mb": args.sweep_mb,
               "calls": calls, "quick": args.quick, "rows": rows}
    payload["machine"]["load_average_at_end"] = common.load_average()
    return common.publish("cold_weights", args, payload, report(payload))


def report(payload: dict) -> str:
    rows = [dict(row, gflops_warm=_rate(row["gflops_warm"]), gflops_cold=_rate(row["gflops_cold"]))
            for row in payload["rows"]]
    return "\n".join([
        common.machine_line(payload["machine"]),
        f"{payload['tokens']} tokens, d = {payload['d_model']}, r = {payload['bottleneck']}, "
        f"{payload['threads']} threads; cold = after a pass over {payload['sweep_mb']} MB; "
        f"medians of {payload['calls']} calls",
        "",
        common.table(rows, [("op", "operator", ""), ("mflop", "MFLOP", ".2f"), ("warm_us", "warm µs", ".1f"),
                            ("cold_us", "cold µs", ".1f"), ("extra_us", "cold - warm", "+.1f"),
                            ("gflops_warm", "GFLOP/s warm", ""), ("gflops_cold", "GFLOP/s cold", "")]),
    ])


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    sys.exit(main())
