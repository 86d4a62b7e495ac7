"""What the PyTorch-side benchmark scripts share: logging, the timed step loop, and the
environment facts each result records."""
import os
import resource
import sys
import time

import torch


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def tcmalloc_loaded():
    try:
        with open("/proc/self/maps") as f:
            return "tcmalloc" in f.read()
    except OSError:
        return False


def _cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_steps(train_step, warmup_steps, steps, tokens_per_step):
    """Runs warmup_steps untimed then steps timed calls of train_step() -> (loss, grad_norm);
    returns the timing and environment fields of the result JSON."""
    times, cpu_times, losses = [], [], []
    for i in range(warmup_steps + steps):
        t0, c0 = time.perf_counter(), _cpu_s()
        loss, gnorm = train_step()
        dt, dc = time.perf_counter() - t0, _cpu_s() - c0
        warm = i < warmup_steps
        if not warm:
            times.append(dt)
            cpu_times.append(dc)
        losses.append(loss)
        log(f"step {i + 1}{' (warm-up)' if warm else ''}: loss {loss:.4f} grad_norm {gnorm:.3f} "
            f"{dt:.2f} s  {tokens_per_step / dt:.1f} tok/s")
    total = sum(times)
    return {
        "tokens_per_s": tokens_per_step * len(times) / total if times else 0.0,
        "step_s": total / len(times) if times else 0.0,
        "best_step_s": min(times) if times else 0.0,
        # CPU seconds per wall second over the timed steps; well under the thread count means
        # the process waited for a CPU (another job on the machine) or for memory.
        "cpu_util": sum(cpu_times) / total if times else 0.0,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,  # KiB
        "steps": len(times),
        "warmup_steps": warmup_steps,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "tcmalloc": tcmalloc_loaded(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
