"""lightning-cpp beside the plain PyTorch loop and Lightning 2.6 on one device, in one run: each contestant in fresh
processes, taken in turns for --rounds rounds (the median reported). Two workloads:

  python compare.py lm --bench build/bench/gpu/lm_bench [--rounds 2] [--markdown F] [lm_bench's options...]
      the ~100 M-parameter language model (lm_bench.cpp, lm_torch.py): tokens/s, the ratio to the plain loop,
      and MFU: tokens/s times the FLOPs of a token over the device's matrix-product rate measured now (bf16
      8192^3 on a GPU, the best of 10). FLOPs of a token (PaLM's count): 6 N + 12 L w T, N the parameters
      that multiply (all but the two embeddings), L layers, w width, T the sequence length.
  python compare.py example --bench build/bench/gpu/example_gpu [--precisions 32-true,16-mixed,bf16-mixed]
                    [--rounds 1] [--markdown F] [example_gpu's options...]
      the Fashion-MNIST example's work (example_gpu.cpp, fashion_mnist_torch.py) at each precision: training
      steps/s, the ratio to the plain loop, and the test accuracy.

Prints the machine and a markdown table (also appended to --markdown); exit 0 when every contestant ran.
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def matmul_rate(device):
    """TFLOP/s of a bf16 8192^3 matrix product on a GPU (on a CPU: 1024^3 float32, for a dry run)."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(13):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e12, f"{n}^3 {str(dtype).replace('torch.', '')}"


def run_all(contestants, rounds):
    """{name: [{field: value}, ...]} from each contestant's last output line "field value field value ..."."""
    results = {name: [] for name, _ in contestants}
    for _ in range(rounds):
        for name, argv in contestants:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                raise RuntimeError(f"{name} failed ({run.returncode}): {' '.join(argv)}\n{run.stdout[-3000:]}\n"
                                   f"{run.stderr[-3000:]}")
            fields = run.stdout.strip().splitlines()[-1].split()
            results[name].append({fields[i]: float(fields[i + 1]) for i in range(0, len(fields) - 1, 2)})
            if not all(v > 0 for v in results[name][-1].values()):
                raise RuntimeError(f"{name} measured nothing: {' '.join(fields)}")
    return results


def median(runs, field):
    return statistics.median(r[field] for r in runs)


def contestants(bench, script, extra):
    return [("lightning-cpp Trainer", [bench] + extra),
            ("plain PyTorch loop", [sys.executable, f"{HERE}/{script}", "plain"] + extra),
            ("Lightning 2.6 Trainer", [sys.executable, f"{HERE}/{script}", "lightning"] + extra)]


def lm(a, extra, device):
    options = dict(zip(extra[::2], extra[1::2]))
    layers, width, seq, vocab = (int(options.get(k, d)) for k, d in
                                 [("--layers", 12), ("--width", 768), ("--seq", 512), ("--vocab", 8192)])
    peak, peak_what = matmul_rate(device)
    results = run_all(contestants(a.bench, "lm_torch.py", extra), a.rounds)
    plain = median(results["plain PyTorch loop"], "tokens/s")
    lines = [f"Language model: {layers} layers, width {width}, sequence {seq}, vocabulary {vocab} "
             f"({' '.join(extra) or 'defaults'}); matrix-product rate measured now {peak:.1f} TFLOP/s "
             f"({peak_what}); median of {a.rounds} rounds.", "",
             "| contestant | tokens/s | ms/step | vs plain loop | MFU |", "|---|---|---|---|---|"]
    for name, runs in results.items():
        rate = median(runs, "tokens/s")
        n = runs[0]["parameters"] - vocab * width - seq * width
        mfu = rate * (6 * n + 12 * layers * width * seq) / (peak * 1e12)
        lines.append(f"| {name} | {rate:,.0f} | {median(runs, 'step_ms'):.2f} | {rate / plain:.2f}x | "
                     f"{100 * mfu:.1f}% |")
    return lines


def example(a, extra, device):
    lines = [f"The Fashion-MNIST example's work ({' '.join(extra) or 'defaults'}); median of {a.rounds} rounds.", "",
             "| precision | contestant | steps/s | vs plain loop | test accuracy |", "|---|---|---|---|---|"]
    for precision in a.precisions.split(","):
        results = run_all(contestants(a.bench, "fashion_mnist_torch.py", extra + ["--precision", precision]),
                          a.rounds)
        plain = median(results["plain PyTorch loop"], "steps/s")
        for name, runs in results.items():
            rate = median(runs, "steps/s")
            lines.append(f"| {precision} | {name} | {rate:,.1f} | {rate / plain:.2f}x | "
                         f"{median(runs, 'accuracy'):.4f} |")
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["lm", "example"])
    p.add_argument("--bench", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--precisions", default="32-true,16-mixed,bf16-mixed")
    p.add_argument("--markdown")
    a, extra = p.parse_known_args()
    options = dict(zip(extra[::2], extra[1::2]))
    device = torch.device(options.get("--accelerator", "cuda"))
    where = (f"{torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
             if device.type == "cuda" else f"the CPU ({platform.processor() or 'x86-64'}, {os.cpu_count()} cores)")
    try:
        lines = (lm if a.workload == "lm" else example)(a, extra, device)
    except RuntimeError as e:
        print(e)
        return 1
    text = "\n".join([f"On {where}, torch {torch.__version__}, {datetime.date.today().isoformat()}:"] + lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write("\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
