"""fp32 GEMM throughput of torch (its MKL / oneDNN path) for the shapes of bench/gemm_peak.c.

Prints the same columns as gemm_peak, so bench/gemm_peak.sh can put it in the same table:
    shape op M N K best_GF/s mean_GF/s best_ms reps
Usage: python bench/torch_gemm.py [--threads 2] [--min-time 0.5] [--shapes a,b,...]
"""
import argparse
import time

import torch

# (name, op, M, N, K, beta) -- keep in sync with SHAPES in bench/gemm_peak.c
SHAPES = [
    ("square2048", "NN", 2048, 2048, 2048, 0),
    ("fwd_q_o", "NT", 2048, 512, 512, 0),
    ("fwd_k_v", "NT", 2048, 256, 512, 0),
    ("fwd_w1_w3", "NT", 2048, 1536, 512, 0),
    ("fwd_w2", "NT", 2048, 512, 1536, 0),
    ("fwd_lm_head", "NT", 256, 151936, 512, 0),
    ("dx_q_o", "NN", 2048, 512, 512, 0),
    ("dx_w1_w3", "NN", 2048, 512, 1536, 0),
    ("dx_w2", "NN", 2048, 1536, 512, 0),
    ("dx_lm_head", "NN", 256, 512, 151936, 0),
    ("dw_q_o", "TN", 512, 512, 2048, 1),
    ("dw_w1_w3", "TN", 1536, 512, 2048, 1),
    ("dw_w2", "TN", 512, 1536, 2048, 1),
    ("dw_lm_head", "TN", 151936, 512, 256, 1),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--shapes", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    want = set(args.shapes.split(",")) if args.shapes else None
    print(f"# torch {torch.__version__} cpu_capability={torch.backends.cpu.get_cpu_capability()} "
          f"threads={torch.get_num_threads()} mkl={torch.backends.mkl.is_available()}")
    print(f"{'shape':<12} {'op':<2} {'M':>7} {'N':>7} {'K':>7} {'best_GF/s':>10} {'mean_GF/s':>10} "
          f"{'best_ms':>9} {'reps':>5}")
    peak = 0.0
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, op, M, N, K, beta in SHAPES:
            if want and name not in want:
                continue
            # Same storage layouts as the C benchmark (row-major; 'T' = stored transposed).
            A = torch.rand(M, K, generator=g) if op[0] == "N" else torch.rand(K, M, generator=g)
            B = torch.rand(K, N, generator=g) if op[1] == "N" else torch.rand(N, K, generator=g)
            A = A * 2 - 1
            B = B * 2 - 1
            a = A if op[0] == "N" else A.t()
            b = B if op[1] == "N" else B.t()
            C = torch.empty(M, N)

            if beta:
                def run():
                    C.addmm_(a, b)
            else:
                def run():
                    torch.mm(a, b, out=C)

            run()
            best, total, reps = 1e30, 0.0, 0
            while reps < 3 or total < args.min_time:
                t0 = time.perf_counter()
                run()
                dt = time.perf_counter() - t0
                best = min(best, dt)
                total += dt
                reps += 1
                if reps >= 1000:
                    break
            flops = 2.0 * M * N * K
            gb, gm = flops / best * 1e-9, flops * reps / total * 1e-9
            peak = max(peak, gb)
            print(f"{name:<12} {op:<2} {M:>7} {N:>7} {K:>7} {gb:>10.1f} {gm:>10.1f} "
                  f"{best * 1e3:>9.3f} {reps:>5}", flush=True)
    print(f"peak_gflops={peak:.1f}")


if __name__ == "__main__":
    main()
