"""FlexAttention as Triton builds it without Hopper's wgmma: the sm_80-class peer of
attnc's sm_80 kernels on an sm_90 GPU, timed in bench_variants.py's rounds.

On an H100/H200, torch.compile's FlexAttention kernels use wgmma (Triton's MMA v3),
which sm_80 code cannot; attnc's sm_80 kernels use mma.sync. Triton's DISABLE_MMA_V3=1
makes it emit mma.sync (MMA v2) for the same kernels, which is what FlexAttention runs
on an sm_80 GPU (its block sizes stay the ones it picks for the GPU it runs on). The
variable is read when Triton compiles, and neither torch.compile's caches nor Triton's
tell the two builds apart, so they run in a worker process of their own, with caches of
its own, driven a round at a time by the benchmark (`FlexMmaV2`):

    worker = FlexMmaV2(cases, iters)     # compiles, checks the PTX holds no wgmma
    worker.round()                       # {(head_dim, case): ms}, once per round
    worker.outputs()                     # {(head_dim, case): rows 0, ROW_STEP, ... of O}
    worker.close()

Inputs are bench_variants.py's (the same seeds), so the outputs are compared with the
benchmark's own FlexAttention run.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX = "@@flex_mma_v2 "
ROW_STEP = 61


class FlexMmaV2:
    """The worker process, from the benchmark's side."""

    def __init__(self, cases: list[tuple[int, str]], iters: int, warmup_ms: float = 0.0, min_ms: float = 0.0):
        self.dir = tempfile.mkdtemp(prefix="attnc_flex_mma_v2_")
        env = {**os.environ, "DISABLE_MMA_V3": "1", "TORCHINDUCTOR_CACHE_DIR": f"{self.dir}/inductor",
               "TRITON_CACHE_DIR": f"{self.dir}/triton"}
        self.proc = subprocess.Popen([sys.executable, __file__, self.dir, str(iters), json.dumps(cases),
                                      str(warmup_ms), str(min_ms)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready = self._reply()
        self.keys = [tuple(k) for k in ready["keys"]]
        self.wgmma = ready["wgmma"]           # PTX files that still hold wgmma (none expected)
        self.mma_sync = ready["mma_sync"]     # PTX files with mma.sync

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX):])
        raise RuntimeError(f"the FlexAttention MMA v2 worker exited ({self.proc.wait()})")

    def _ask(self, what: str) -> dict:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def round(self) -> dict:
        return {tuple(json.loads(k)): ms for k, ms in self._ask("round").items()}

    def outputs(self) -> dict:
        import torch
        saved = self._ask("outputs")
        return {tuple(json.loads(k)): torch.load(path) for k, path in saved.items()}

    def close(self) -> None:
        """End the worker and remove its caches and saved outputs."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _worker(folder: str, iters: int, cases: list, warmup_ms: float, min_ms: float) -> None:
    import torch
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_variants import SHAPES, M, N, flex_case, inputs, timed

    torch._dynamo.config.cache_size_limit = 1000
    torch._dynamo.config.recompile_limit = 1000
    flex = torch.compile(flex_attention, dynamic=False)
    runs, outputs = {}, {}
    for d, case in cases:
        b, h = SHAPES[d]
        q, k, v = inputs(d)
        score_mod, mask_mod = flex_case(case, h)
        block_mask = create_block_mask(mask_mod, None, None, M, N, device="cuda")

        def run(q=q, k=k, v=v, score_mod=score_mod, block_mask=block_mask):
            return flex(q, k, v, score_mod=score_mod, block_mask=block_mask)

        outputs[json.dumps([d, case])] = run()[:, :, ::ROW_STEP].float().cpu()
        runs[json.dumps([d, case])] = run
    ptx = [Path(p).read_text() for p in glob.glob(f"{folder}/**/*.ptx", recursive=True)]
    say = lambda value: print(PREFIX + json.dumps(value), flush=True)  # noqa: E731
    say({"keys": [list(json.loads(k)) for k in runs], "wgmma": sum("wgmma" in t for t in ptx),
         "mma_sync": sum("mma.sync" in t for t in ptx)})
    for line in sys.stdin:
        if line.strip() == "round":
            say({key: timed(fn, iters, warmup_ms, min_ms) * 1e3 for key, fn in runs.items()})
        elif line.strip() == "outputs":
            paths = {}
            for key, out in outputs.items():
                paths[key] = f"{folder}/{'_'.join(map(str, json.loads(key)))}.pt"
                torch.save(out, paths[key])
            say(paths)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
