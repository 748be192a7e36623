#!/usr/bin/env python3
"""PyTorch reference for bench/train_bench: the same three workloads, the same
shapes and optimizer, and the same one-line JSON output ("framework": "torch").

    python3 bench/torch_reference.py --model cnn --device cpu --steps 20

Runs with Debian's python3-torch (CPU) on the build machines and with the
PyTorch installed on the GPU machine.

On CUDA PyTorch runs as its guides recommend for fixed shapes in eager mode:
cudnn.benchmark on (trial runs pick each convolution's algorithm during the
warm-up steps) and the fused AdamW (one kernel for all parameters, as loom's).
Its numerics are set to loom's, so that both do the same arithmetic: float32
products, convolutions and RNNs exact (PyTorch lets cuDNN use TF32 by
default; loom does not) unless --tf32 (then both use it), and 16-bit products
reduced in float32 (loom's cuBLAS handle forbids reduced-precision
reductions; PyTorch allows them by default).

Beyond eager mode, the two ways PyTorch users make small steps fast:
--compile MODE compiles the model's forward with torch.compile (its backward
follows; "reduce-overhead" also replays both as CUDA graphs), and
--cuda-graph captures the whole step, the fused AdamW with capturable=True
included, as one torch.cuda.CUDAGraph (PyTorch's recipe for whole-network
capture), as train_bench --cuda-graph does for loom.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def fashion_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: what users call
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, d):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class LSTMClassifier(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(64, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def workload(name, device):
    gpu = device.type == "cuda"
    if name == "cnn":
        model = fashion_cnn().to(device)
        x = torch.randn(256, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (256,), device=device)
        return model, lambda: F.cross_entropy(model(x), y), 256, 0
    if name == "gpt":
        vocab, block, layers, heads, d, batch = (65, 256, 6, 6, 384, 64) if gpu else (65, 64, 2, 4, 128, 8)
        model = GPT(vocab, block, layers, heads, d).to(device)
        idx = torch.randint(0, vocab, (batch, block), device=device)
        targets = torch.randint(0, vocab, (batch * block,), device=device)
        return model, lambda: F.cross_entropy(model(idx).view(-1, vocab), targets), batch, batch * block
    if name == "gpt_large":  # the same shape on every device
        vocab, block, layers, heads, d, batch = 65, 128, 4, 4, 256, 16
        model = GPT(vocab, block, layers, heads, d).to(device)
        idx = torch.randint(0, vocab, (batch, block), device=device)
        targets = torch.randint(0, vocab, (batch * block,), device=device)
        return model, lambda: F.cross_entropy(model(idx).view(-1, vocab), targets), batch, batch * block
    if name == "lstm":
        model = LSTMClassifier(512 if gpu else 128).to(device)
        x = torch.randn(64, 64, 64, device=device)
        y = torch.randint(0, 10, (64,), device=device)
        return model, lambda: F.cross_entropy(model(x), y), 64, 0
    raise SystemExit(f"unknown model {name}")


def convert_to_float8(model, args):
    """--precision fp8: torchao's float8 training (tensorwise dynamic scales,
    its default) for the Linear layers whose in and out features are multiples
    of 16, except the output layer ("head", as torchtitan leaves it), as
    train_bench does; the rest runs under bf16 autocast. Without torchao the
    reason goes into the JSON line and the run fails."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as e:
        print(json.dumps({"framework": "torch", "torch_version": torch.__version__, "model": args.model,
                          "device": args.device, "precision": "fp8", "error": f"torchao is not available: {e}"}))
        raise SystemExit(f"torch_reference: --precision fp8 needs torchao.float8 ({e})")

    def fits(module, name):
        return (isinstance(module, nn.Linear) and name != "head"
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    convert_to_float8_training(model, module_filter_fn=fits)


def blas():
    """The BLAS this PyTorch runs its CPU products on: the libblas.so.3 a
    Debian build links, or what a wheel bundles (from its build config)."""
    if torch.__file__.startswith("/usr/lib/python3"):
        return os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    config = torch.__config__.show()
    for name in ("mkl", "openblas"):
        if f"BLAS_INFO={name}" in config or f"USE_{name.upper()}=ON" in config:
            return f"{name} (bundled)"
    return "bundled"


def match_loom_numerics(tf32):
    """TF32 for float32 matmuls, convolutions and RNNs only if asked (loom's
    set_allow_tf32), and 16-bit GEMMs reduced in float32 (loom's cuBLAS math
    mode). In PyTorch 2.9+ the allow_tf32 switches also set fp32_precision for
    cuBLAS and cuDNN's conv and rnn; setting only the latter would leave
    cudnn.allow_tf32 contradicting them, and reading it then raises."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=["cnn", "gpt", "gpt_large", "lstm"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "fp8"],
                        help="bf16/fp16: the forward under torch.autocast (fp16 with a GradScaler); fp8: bf16 "
                             "with the Linear layers in torchao's float8 (gpt, gpt_large)")
    parser.add_argument("--tf32", action="store_true",
                        help="CUDA: TF32 for float32 matmuls, convolutions and RNNs (as train_bench --tf32)")
    parser.add_argument("--compile", default="none", choices=["none", "default", "reduce-overhead", "max-autotune"],
                        help="torch.compile the model's forward in this mode (its warm-up steps compile)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="CUDA: capture the whole step (forward, backward, capturable fused AdamW) once and replay it")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed steps, profile as many more with torch.profiler (CPU ops) and print "
                             "each op's self time a step to stderr, one JSON line per op, the longest first")
    args = parser.parse_args()
    if args.cuda_graph and (args.compile != "none" or args.precision == "fp16" or not args.device.startswith("cuda")):
        raise SystemExit("torch_reference: --cuda-graph needs a CUDA device, no --compile and no fp16 GradScaler")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if gpu:
        match_loom_numerics(args.tf32)
        torch.backends.cudnn.benchmark = True
    model, loss_fn, samples, tokens = workload(args.model, device)
    if args.precision == "fp8":
        convert_to_float8(model, args)
    # AdamW's default weight decay (0.01), as train_bench's; fused on CUDA.
    fused = {"fused": True, "capturable": args.cuda_graph} if gpu else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **fused)
    compiling = args.compile != "none"
    if compiling:
        # The workload's loss calls model(...): compiling the bound forward
        # compiles what it calls.
        model.forward = torch.compile(model.forward, mode=args.compile)
        args.warmup = max(args.warmup, 5)  # compilation, then cudagraph recording, happen in these

    low = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(args.precision)
    scaler = None
    if args.precision == "fp16":
        scaler = torch.amp.GradScaler(device.type) if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") \
            else torch.cuda.amp.GradScaler()

    def step():
        if args.compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: last step's outputs may be overwritten
        if low is None:
            loss = loss_fn()
        else:
            with torch.autocast(device_type=device.type, dtype=low):
                loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    warm_start = time.perf_counter()
    if args.cuda_graph:
        # Warm up on a side stream (the optimizer's state, cuDNN's choices), then capture one step.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(args.warmup, 3)):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()
        step = lambda: (graph.replay(), static_loss)[1]  # noqa: E731
        step()
    else:
        for _ in range(args.warmup):
            step()
    sync()
    warmup_seconds = time.perf_counter() - warm_start
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "torch", "torch_version": torch.__version__, "blas": blas(), "model": args.model,
                      "device": str(device), "gpu": torch.cuda.get_device_name(device) if gpu else "",
                      "precision": args.precision, "tf32": gpu and args.tf32, "optimizer": "AdamW fused" if gpu else "AdamW",
                      "compile": args.compile, "cuda_graph": args.cuda_graph,
                      "warmup_s": round(warmup_seconds, 2),
                      "steps": args.steps, "threads": torch.get_num_threads(),
                      "ms_per_step": round(1000 * seconds / args.steps, 3),
                      "samples_per_s": round(samples * args.steps / seconds, 1),
                      "tokens_per_s": round(tokens * args.steps / seconds, 1), "loss": round(loss.item(), 4)}))
    if args.profile:
        print_profile(step, args.steps, sync)


def print_profile(step, steps, sync):
    """Each op's self CPU time a step under torch.profiler, the longest first:
    what to set beside loom's perf profile, kernel by kernel."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        sync()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    for e in events:
        if e.self_cpu_time_total / total < 0.002:
            break
        print(json.dumps({"op": e.key, "self_ms_per_step": round(e.self_cpu_time_total / 1000 / steps, 3),
                          "share": round(e.self_cpu_time_total / total, 4), "calls_per_step": e.count // steps}),
              file=sys.stderr)


if __name__ == "__main__":
    main()
