#!/usr/bin/env python3
"""gpu-check: one call that shows a machine runs every GPU path of `trainer` and how fast, against
PyTorch on the same GPU. Run through scripts/gpu-check.sh [--out DIR] [--quick] [--openkbp DIR].

Works from the release bundle (bin/trainer, libexec/tests/) or a build tree (build/release). Each
section has a GPU part (PASS / FAIL / SKIPPED with the reason, or PARTIAL: it ran, but part of what
it should measure could not be, and the reason says what) and, where one exists, a CPU part that
runs everywhere (CI runs `--quick` on CPU machines, so the plumbing cannot rot). Writes
DIR/gpu-report.md and DIR/gpu-report.json (date, commit, machine, every command) and DIR/logs/.
Exit status: 0 when nothing FAILed, 1 otherwise, 2 on bad arguments. Standard library only.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Section:
    def __init__(self, sid, title):
        self.sid, self.title = sid, title
        self.status, self.reason = "SKIPPED", ""
        self.cpu_status, self.cpu_reason = "n/a", ""
        self.figures, self.cpu_figures, self.commands, self.notes = {}, {}, [], []

    def fail(self, why):
        self.reason = (self.reason + "; " if self.reason and self.status == "FAIL" else "") + why
        self.status = "FAIL"

    def to_json(self):
        return {"id": self.sid, "title": self.title, "status": self.status, "reason": self.reason,
                "cpu_status": self.cpu_status, "cpu_reason": self.cpu_reason, "figures": self.figures,
                "cpu_figures": self.cpu_figures, "commands": self.commands, "notes": self.notes}


class Check:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.work = os.path.join(self.out, "work")
        os.makedirs(self.work, exist_ok=True)
        self.n = 0
        self.bundle = os.path.exists(os.path.join(ROOT, "libexec", "u3d-run"))
        if self.bundle:
            self.trainer = [os.path.join(ROOT, "bin", "trainer")]
            self.prefix = [os.path.join(ROOT, "libexec", "u3d-run")]
            self.tests_dir = os.path.join(ROOT, "libexec", "tests")
        else:
            build = os.environ.get("U3D_BUILD_DIR", os.path.join(ROOT, "build", "release"))
            self.build = build
            self.trainer = [os.path.join(build, "trainer")]
            self.prefix = []
            self.tests_dir = os.path.join(build, "tests")
        if args.trainer:
            self.trainer = [args.trainer]
        self.python = args.python
        self.cuda = False
        self.gpus = 0
        self.peak_tflops = None
        self.sections = []
        self.commit = self.source_commit()

    def source_commit(self):
        """The bundle's commit (bundle.env) or the checkout's; replaced by `trainer --version`'s."""
        env = os.path.join(ROOT, "share", "unet3d-trainer", "bundle.env")
        if os.path.exists(env):
            with open(env) as f:
                m = re.search(r"^U3D_BUNDLE_COMMIT=(\S+)", f.read(), re.M)
                if m:
                    return m.group(1)
        try:
            return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                  text=True, timeout=30).stdout.strip() or "unknown"
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"

    # ---- running commands -------------------------------------------------------------------
    def run(self, section, cmd, timeout=600, env=None, cwd=None, log_name=None):
        """Runs cmd, records it in the section, keeps its output in logs/; returns (rc, output)."""
        self.n += 1
        log = os.path.join(self.logs, f"{self.n:02d}-{section.sid}{'-' + log_name if log_name else ''}.log")
        shown = " ".join(shlex.quote(c) for c in cmd)
        section.commands.append(shown)
        e = dict(os.environ)
        e.update(env or {})
        t0 = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               timeout=timeout, env=e, cwd=cwd or self.work)
            rc, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired as ex:
            rc, out = 124, (ex.stdout or "") if isinstance(ex.stdout, str) else ""
            out += f"\n[gpu-check] timed out after {timeout} s"
        except OSError as ex:
            rc, out = 127, f"[gpu-check] cannot run: {ex}"
        with open(log, "w") as f:
            f.write(f"$ {shown}\n# exit {rc}, {time.time() - t0:.1f} s\n{out}")
        print(f"[gpu-check] {section.sid}: exit {rc} in {time.time() - t0:.1f} s: {shown[:160]}", file=sys.stderr,
              flush=True)
        return rc, out

    @staticmethod
    def json_lines(out, kind):
        res = []
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("{") and f'"benchmark": "{kind}"' in line:
                try:
                    res.append(json.loads(line))
                except ValueError:
                    pass
        return res

    @staticmethod
    def last_line(out):
        lines = [l for l in out.strip().splitlines() if l.strip()]
        return lines[-1][:300] if lines else "(no output)"

    def python_has_torch(self):
        if not self.python:
            return False
        try:
            return subprocess.run([self.python, "-c", "import torch"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def synth(self, section, name, size, cases, task="dose"):
        path = os.path.join(self.work, name)
        if os.path.exists(path):
            return path
        rc, out = self.run(section, self.trainer + ["synth", "--task", task, "--cases", str(cases), "--size", str(size),
                                                    "--seed", "0", "--out", path])
        if rc != 0:
            raise RuntimeError(f"trainer synth failed (exit {rc}): {self.last_line(out)}")
        return path

    # ---- 1. machine facts -------------------------------------------------------------------
    def machine(self):
        s = Section("1-machine", "Machine facts and roofline")
        rc, out = self.run(s, self.trainer + ["--version"], timeout=120)
        if rc != 0:
            s.cpu_status, s.cpu_reason = "FAIL", f"trainer --version exit {rc}: {self.last_line(out)}"
            s.fail("trainer does not start")
            self.version_text = ""
            return s
        self.version_text = out
        s.cpu_status = "PASS"
        m = re.search(r"^trainer (\S+) \((\S+)\)", out, re.M)
        s.cpu_figures["trainer"] = m.group(1) if m else None
        self.commit = m.group(2) if m else self.commit
        m = re.search(r"^LibTorch (\S+)", out, re.M)
        s.cpu_figures["libtorch_built_against"] = m.group(1) if m else None
        m = re.search(r"^CUDA runtime (\S+): (\d+) device", out, re.M)
        s.cpu_figures["cuda_runtime"] = m.group(1) if m else None
        devices = int(m.group(2)) if m else 0
        s.cpu_figures["cuda_devices"] = devices
        m = re.search(r"^cuDNN (\S+)", out, re.M)
        s.cpu_figures["cudnn"] = m.group(1) if m else None
        if self.prefix:
            rc, out = self.run(s, self.prefix + ["--print"], timeout=120)
            if rc != 0:
                s.cpu_status, s.cpu_reason = "FAIL", self.last_line(out)
            for line in out.splitlines():
                if line.startswith(("torch_version=", "torch_cuda=", "torch_lib=", "torch_source=")):
                    k, v = line.split("=", 1)
                    s.cpu_figures[k] = v
        self.cuda = devices > 0
        self.gpus = devices
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device (trainer --version: 0 devices or a CPU-only LibTorch)"
            return s
        s.status = "PASS"
        if shutil.which("nvidia-smi"):
            rc, out = self.run(s, ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
            if rc == 0 and out.strip():
                f = [x.strip() for x in out.strip().splitlines()[0].split(",")]
                s.figures.update({"gpu": f[0], "memory": f[1] if len(f) > 1 else None,
                                  "driver": f[2] if len(f) > 2 else None})
        else:
            s.notes.append("nvidia-smi not on PATH: driver version not read")
        if not self.python_has_torch():
            s.fail(f"no Python with torch ({self.python}) for the roofline; set U3D_PYTHON")
            return s
        rc, out = self.run(s, [self.python, os.path.join(HERE, "roofline.py")] + (["--reps", "5"] if self.args.quick else []))
        r = self.json_lines(out, "roofline")
        if rc != 0 or not r:
            s.fail(f"roofline.py exit {rc}: {self.last_line(out)}")
            return s
        r = r[0]
        self.peak_tflops = r["bf16_tflops"]
        s.figures.update({"gpu": s.figures.get("gpu") or r["gpu"], "gpu_memory_bytes": r["memory_bytes"],
                          "torch": r["torch"], "cuda": r["cuda"], "cudnn": r["cudnn"],
                          "bf16_matmul_tflops": round(r["bf16_tflops"], 1),
                          "bandwidth_gb_s": round(r["bandwidth_gb_s"], 0)})
        return s

    # ---- 2. GPU tests -----------------------------------------------------------------------
    def test_manifest(self, s):
        """(label, executable, test) of every test: the bundle's tests.tsv, or ctest in a build tree."""
        rows = []
        tsv = os.path.join(ROOT, "share", "unet3d-trainer", "tests.tsv")
        if self.bundle:
            with open(tsv) as f:
                rows = [tuple(l.rstrip("\n").split("\t")) for l in f if l.strip()]
            return rows
        rc, out = self.run(s, ["ctest", "--test-dir", self.build, "--show-only=json-v1"], timeout=300)
        if rc != 0:
            raise RuntimeError(f"ctest --show-only failed: {self.last_line(out)}")
        for t in json.loads(out[out.index("{"):])["tests"]:
            cmd = t.get("command") or []
            labels = [p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"]
            flt = next((a.split("=", 1)[1] for a in cmd if a.startswith("--gtest_filter=")), "")
            if cmd and flt:
                rows.append((labels[0][0] if labels and labels[0] else "none", os.path.basename(cmd[0]), flt))
        return rows

    def gpu_tests(self):
        s = Section("2-gpu-tests", "GPU tests (ctest label gpu)")
        try:
            rows = [r for r in self.test_manifest(s) if r[0] == "gpu"]
        except (RuntimeError, OSError, ValueError) as ex:
            s.cpu_status, s.cpu_reason = "FAIL", str(ex)
            s.fail(str(ex))
            return s
        if not rows:
            s.cpu_status, s.cpu_reason = "FAIL", "the test manifest lists no test labelled gpu"
            s.fail(s.cpu_reason)
            return s
        by_exe = {}
        for _, exe, name in rows:
            by_exe.setdefault(exe, []).append(name)
        # CPU part: each executable loads (LibTorch found) and lists exactly the tests of the manifest.
        s.cpu_status = "PASS"
        for exe, names in by_exe.items():
            rc, out = self.run(s, self.prefix + [os.path.join(self.tests_dir, exe), "--gtest_list_tests"], timeout=300)
            listed, suite = set(), ""
            for line in out.splitlines():
                if not line.strip() or line.startswith(("[", "Running")):
                    continue
                if not line.startswith(" "):
                    suite = line.split("#")[0].strip()
                else:
                    listed.add(suite + line.split("#")[0].strip())
            missing = set(names) - listed
            if rc != 0 or missing:
                s.cpu_status = "FAIL"
                s.cpu_reason = f"{exe}: exit {rc}, {len(missing)} manifest tests not listed: {self.last_line(out)}"
        s.cpu_figures["gpu_tests"] = len(rows)
        # The test executables find the trainer, configs/ and the shared data relative to themselves
        # (build tree layout); in the bundle the configs sit at its root.
        env = {"U3D_SOURCE_DIR": ROOT} if self.bundle else {}
        if self.args.openkbp and os.path.basename(self.args.openkbp) == "openkbp-sample.tar.xz":
            env["U3D_SHARED_DATA"] = os.path.dirname(self.args.openkbp)
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device; the executables load and list their tests (CPU part)"
            return s
        s.status = "PASS"
        results = {}
        for exe, names in by_exe.items():
            js = os.path.join(self.logs, f"{exe}.json")
            rc, out = self.run(s, self.prefix + [os.path.join(self.tests_dir, exe), "--gtest_filter=" + ":".join(names),
                                                 f"--gtest_output=json:{js}"], timeout=900, env=env, log_name=exe)
            got = {}
            if os.path.exists(js):
                with open(js) as f:
                    for suite in json.load(f).get("testsuites", []):
                        for t in suite.get("testsuite", []):
                            name = f"{suite['name']}.{t['name']}"
                            if t.get("failures"):
                                got[name] = "FAIL"
                            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                                got[name] = "SKIPPED"
                            else:
                                got[name] = "PASS"
            for n in names:
                results[n] = got.get(n, f"FAIL (no result; {exe} exit {rc})")
            if rc != 0 and all(v == "PASS" for k, v in got.items()):
                s.fail(f"{exe} exit {rc} with no failing test: {self.last_line(out)}")
        s.figures["tests"] = results
        failed = [n for n, v in results.items() if v.startswith("FAIL")]
        skipped = [n for n, v in results.items() if v == "SKIPPED"]
        s.figures["passed"] = sum(v == "PASS" for v in results.values())
        s.figures["failed"] = len(failed)
        s.figures["skipped"] = len(skipped)
        if failed:
            s.fail(f"{len(failed)} of {len(results)} GPU tests failed: {', '.join(failed[:10])}")
        if skipped:
            s.notes.append(f"skipped on this CUDA machine: {', '.join(skipped)}")
        if s.figures["passed"] == 0:
            s.fail("no GPU test passed")
        return s

    # ---- 3. step benchmark ------------------------------------------------------------------
    def step_bench(self, s, config, sets, steps, warmup, log_name, nproc=None):
        """trainer --benchmark's JSON; with nproc, under torch.distributed.run with that many ranks."""
        trainer, env = self.trainer, None
        if nproc:
            trainer = [self.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                       "--no-python", self.trainer[0]]
            env = {"OMP_NUM_THREADS": "1"}
        cmd = trainer + ["--config", config, "--benchmark", "--steps", str(steps), "--warmup", str(warmup)]
        for k in sets:
            cmd += ["--set", k]
        rc, out = self.run(s, cmd, timeout=900, log_name=log_name, env=env)
        r = self.json_lines(out, "step")
        if rc != 0 or not r:
            errors = [l for l in out.splitlines() if "] [error] " in l]  # the trainer's line, not torchrun's summary
            raise RuntimeError(f"trainer --benchmark exit {rc}: {errors[0][:300] if errors else self.last_line(out)}")
        return r[-1]

    def step_figures(self, r):
        f = {k: r.get(k) for k in ("step_ms_median", "step_ms_p10", "step_ms_p90", "samples_per_s", "tflops",
                                   "peak_gpu_mem_bytes", "cuda_graph", "cuda_graph_note", "skipped_steps")}
        if self.peak_tflops and r.get("tflops"):
            f["share_of_peak"] = round(r["tflops"] / self.peak_tflops, 3)
        return f

    def step(self):
        s = Section("3-step", "Step benchmark, OpenKBP baseline (64 filters, 128^3, batch 2)")
        cfg = os.path.join(ROOT, "configs", "openkbp_baseline.yaml")
        # CPU part: the same command on a tiny network (plumbing: config, model, FLOP count, JSON).
        try:
            r = self.step_bench(s, cfg, ["model.base_filters=2", "data.patch_size=64", "data.batch_size=1"],
                                2, 1, "cpu-smoke")
            s.cpu_status = "PASS"
            s.cpu_figures = {"device": r.get("device"), "step_ms_median": r.get("step_ms_median"),
                             "flops_per_step": r.get("flops_per_step"), "note": "base_filters 2, 64^3, batch 1"}
        except RuntimeError as ex:
            s.cpu_status, s.cpu_reason = "FAIL", str(ex)
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device"
            return s
        s.status = "PASS"
        steps, warmup = (20, 5) if self.args.quick else (50, 10)
        combos = [(p, cl, g) for p in ("bf16", "fp16") for cl in ("on", "off") for g in ("on", "off")]
        if self.args.quick:
            combos = [("bf16", "on", "on"), ("bf16", "on", "off")]
        runs = {}
        for p, cl, g in combos:
            key = f"{p} channels_last={cl} cuda_graph={g}"
            try:
                r = self.step_bench(s, cfg, [f"training.precision={p}", f"model.channels_last={cl}",
                                             f"training.cuda_graph={g}"], steps, warmup, f"{p}-cl{cl}-graph{g}")
                runs[key] = self.step_figures(r)
                if g == "on" and not r.get("cuda_graph"):
                    s.fail(f"{key}: the CUDA graph was not used ({r.get('cuda_graph_note')})")
                if r.get("skipped_steps"):
                    s.fail(f"{key}: {r['skipped_steps']} steps skipped (non-finite)")
            except RuntimeError as ex:
                runs[key] = {"error": str(ex)}
                s.fail(f"{key}: {ex}")
        s.figures["runs"] = runs
        self.step_runs = runs
        # Memory after many steps against after 10: a leak or a growing cache shows here.
        long_steps = 200 if self.args.quick else 1000
        try:
            a = self.step_bench(s, cfg, ["training.precision=bf16", "training.cuda_graph=on"], 10, 5, "mem-10")
            b = self.step_bench(s, cfg, ["training.precision=bf16", "training.cuda_graph=on"], long_steps, 5,
                                f"mem-{long_steps}")
            ma, mb = a.get("peak_gpu_mem_bytes"), b.get("peak_gpu_mem_bytes")
            s.figures["peak_mem_after_10"] = ma
            s.figures[f"peak_mem_after_{long_steps}"] = mb
            if not ma or not mb:
                s.fail("peak GPU memory not reported")
            elif mb > ma * 1.05:
                s.fail(f"peak GPU memory grew from {ma} to {mb} bytes between 10 and {long_steps} steps")
        except RuntimeError as ex:
            s.fail(f"memory run: {ex}")
        return s

    # ---- 8. data-parallel ---------------------------------------------------------------------
    def distributed(self):
        s = Section("8-distributed", "Data-parallel step under torchrun: all-reduce time, hidden share, scaling")
        if not self.python_has_torch():
            s.cpu_status, s.cpu_reason = "SKIPPED", f"no torch in {self.python} (torch.distributed.run)"
            s.reason = s.cpu_reason
            return s
        cfg = os.path.join(ROOT, "configs", "openkbp_baseline.yaml")
        keys = ("world_size", "dist_backend", "gradient_bytes", "buckets", "step_ms_median", "local_step_ms",
                "allreduce_ms", "exposed_ms", "hidden_share", "scaling_efficiency", "samples_per_s")
        try:  # CPU: 2 ranks over Gloo on a tiny network (the plumbing of the whole path)
            r = self.step_bench(s, cfg, ["training.device=cpu", "model.base_filters=2", "data.patch_size=64",
                                         "data.batch_size=1"], 3, 1, "gloo-2", nproc=2)
            s.cpu_status = "PASS" if r.get("world_size") == 2 and r.get("dist_backend") == "gloo" else "FAIL"
            s.cpu_figures = {k: r.get(k) for k in keys}
        except RuntimeError as ex:
            s.cpu_status, s.cpu_reason = "FAIL", str(ex)
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device"
            return s
        s.status = "PASS"
        n = max(1, min(8, self.gpus))
        steps, warmup = (20, 5) if self.args.quick else (50, 10)
        try:  # every GPU of this machine over NCCL (one GPU: world size 1, the all-reduce's fixed cost)
            r = self.step_bench(s, cfg, ["training.precision=bf16"], steps, warmup, f"nccl-{n}", nproc=n)
            s.figures = {k: r.get(k) for k in keys}
            if r.get("dist_backend") != "nccl":
                s.fail(f"backend {r.get('dist_backend')}, expected nccl")
        except RuntimeError as ex:
            s.fail(str(ex))
        try:  # the same step captured in a CUDA graph with its NCCL all-reduces (training.cuda_graph=on)
            g = self.step_bench(s, cfg, ["training.precision=bf16", "training.cuda_graph=on"], steps, warmup,
                                f"nccl-{n}-graph", nproc=n)
            s.figures["graph_step_ms_median"] = g.get("step_ms_median")
            s.figures["graph_samples_per_s"] = g.get("samples_per_s")
            if not g.get("cuda_graph"):
                s.fail(f"training.cuda_graph=on under NCCL: the graph was not replayed ({g.get('cuda_graph_note')})")
        except RuntimeError as ex:
            s.fail(str(ex))
        return s

    # ---- 4. PyTorch side by side ------------------------------------------------------------
    def compare(self):
        s = Section("4-pytorch", "Same step in PyTorch (eager, torch.compile), ratio; nnU-Net-like network")
        has_torch = self.python_has_torch()
        compare = [self.python, os.path.join(HERE, "compare.py"), "--trainer", self.trainer[0],
                   "--python", self.python or "python3"]
        nnunet_cfg = os.path.join(ROOT, "configs", "segmentation_nnunet_like.yaml")

        def seg_data():
            # The trainer's step benchmark reads the dataset's header alone (channels, classes, task):
            # a small segmentation phantom gives the nnU-Net-like config its Dice + CE step.
            return self.synth(s, "seg32.h5", 32, 4, task="segmentation")

        if not has_torch:
            s.cpu_status, s.cpu_reason = "SKIPPED", f"no Python with torch ({self.python}); set U3D_PYTHON"
        else:
            s.cpu_status = "PASS"
            rc, out = self.run(s, compare + ["--config", os.path.join(ROOT, "configs", "openkbp_baseline.yaml"),
                                             "--filters", "2", "--steps", "2", "--warmup", "1", "--variants", "eager",
                                             "--set", "data.patch_size=64", "--set", "data.batch_size=1",
                                             "--set", "model.base_filters=2"],
                               timeout=600, log_name="cpu-smoke")
            r = self.json_lines(out, "compare")
            if rc != 0 or not r:
                s.cpu_status, s.cpu_reason = "FAIL", f"compare.py exit {rc}: {self.last_line(out)}"
            else:
                s.cpu_figures = {"speedup_vs_best_pytorch": r[-1].get("speedup_vs_best_pytorch"),
                                 "note": "base_filters 2, 64^3, batch 1, eager only"}
            # The nnU-Net-like network, tiny: the PyTorch mirror must have the trainer's parameters.
            try:
                rc, out = self.run(s, compare + ["--config", nnunet_cfg, "--steps", "1", "--warmup", "0",
                                                 "--variants", "eager", "--set", "training.device=cpu",
                                                 "--set", f"data.path={seg_data()}", "--set", "data.patch_size=16",
                                                 "--set", "data.batch_size=1", "--set", "model.levels=3",
                                                 "--set", "model.base_filters=2", "--set", "model.max_filters=8"],
                                   timeout=600, log_name="cpu-nnunet-like")
                r = self.json_lines(out, "compare")
                if rc != 0 or not r:
                    raise RuntimeError(f"compare.py (nnU-Net-like) exit {rc}: {self.last_line(out)}")
                s.cpu_figures["nnunet_like_tiny"] = {k: r[-1].get(k) for k in (
                    "parameters", "pytorch_parameters", "parameters_equal", "flops_equal")}
                s.cpu_figures["nnunet_like_tiny_note"] = "levels 3, base 2, max 8 filters, 16^3, batch 1, CPU"
            except RuntimeError as ex:
                s.cpu_status = "FAIL"
                s.cpu_reason = (s.cpu_reason + "; " if s.cpu_reason else "") + str(ex)
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device"
            return s
        if not has_torch:
            s.fail(f"no Python with torch ({self.python}) for the PyTorch side; set U3D_PYTHON")
            return s
        s.status = "PASS"
        steps, warmup = ("20", "5") if self.args.quick else ("50", "10")
        variants = "eager" if self.args.quick else "eager,compile"
        if self.args.quick:
            s.notes.append("--quick: PyTorch eager only; torch.compile runs without --quick")
        rc, out = self.run(s, compare + ["--config", os.path.join(ROOT, "configs", "openkbp_baseline.yaml"),
                                         "--filters", "64", "--steps", steps, "--warmup", warmup,
                                         "--variants", variants], timeout=900, log_name="openkbp")
        r = self.json_lines(out, "compare")
        steps_json = self.json_lines(out, "step")
        if rc != 0 or not r:
            s.fail(f"compare.py exit {rc}: {self.last_line(out)}")
        else:
            s.figures["openkbp_baseline"] = r[-1]
            s.figures["openkbp_steps"] = [{k: j.get(k) for k in ("tool", "step_ms_median", "tflops",
                                                                   "peak_gpu_mem_bytes")} for j in steps_json]
        # nnU-Net-like segmentation network at its default patch (128^3, batch 2), both sides.
        try:
            rc, out = self.run(s, compare + ["--config", nnunet_cfg, "--steps", steps, "--warmup", warmup,
                                             "--variants", variants, "--set", f"data.path={seg_data()}"],
                               timeout=900, log_name="nnunet-like")
            r = self.json_lines(out, "compare")
            steps_json = self.json_lines(out, "step")
            if rc != 0 or not r:
                raise RuntimeError(f"compare.py exit {rc}: {self.last_line(out)}")
            s.figures["nnunet_like"] = r[-1]
            s.figures["nnunet_like_steps"] = [{k: j.get(k) for k in ("tool", "step_ms_median", "tflops",
                                                                       "peak_gpu_mem_bytes")} for j in steps_json]
            ours = next((j for j in steps_json if j.get("tool") == "trainer"), None)
            if ours:
                s.figures["nnunet_like_trainer"] = self.step_figures(ours)
            if not r[-1].get("flops_equal"):
                s.notes.append("nnU-Net-like: FLOPs per step differ between the trainer and PyTorch")
            s.notes.append("nnU-Net-like: configs/segmentation_nnunet_like.yaml at its patch and batch on a "
                           "segmentation phantom's channels and classes (1 -> 4); PyTorch mirror "
                           "scripts/bench/pytorch_step.py --arch unet (same parameter count, checked)")
        except RuntimeError as ex:
            s.fail(f"nnU-Net-like: {ex}")
        return s

    # ---- 5. top kernels ---------------------------------------------------------------------
    @staticmethod
    def ncu_top(out, top=15):
        """Per-kernel GPU time from `ncu --csv --metrics gpu__time_duration.sum` (one row per launch:
        "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"), summed by kernel name."""
        import csv
        import io
        lines = out.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
        if start is None:
            return None, 0
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                 "second": 1e3, "s": 1e3}
        by, launches = {}, 0
        for row in csv.DictReader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"')))):
            if row.get("Metric Name") != "gpu__time_duration.sum":
                continue
            try:
                ms = float(row["Metric Value"].replace(",", "")) * scale.get(row.get("Metric Unit", "").strip(), 1e-6)
            except (KeyError, ValueError):
                continue
            name = row.get("Kernel Name", "?")
            t, n = by.get(name, (0.0, 0))
            by[name] = (t + ms, n + 1)
            launches += 1
        total = sum(t for t, _ in by.values()) or 1.0
        rows = sorted(by.items(), key=lambda kv: kv[1][0], reverse=True)[:top]
        return [{"name": k[:120], "gpu_ms": round(t, 3), "share": round(t / total, 3), "launches": n}
                for k, (t, n) in rows], launches

    def kernels(self):
        s = Section("5-kernels", "Top kernels of one training step by GPU time")
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device"
            return s
        s.status = "PASS"
        missing = []  # what could not be measured; the section is PARTIAL (not PASS) when not empty
        if not self.python_has_torch():
            s.fail(f"no Python with torch ({self.python}); set U3D_PYTHON")
        else:
            rc, out = self.run(s, [self.python, os.path.join(HERE, "profile_step.py"), "--filters", "64", "--batch", "2",
                                   "--size", "128", "--steps", "3", "--top", "15"], timeout=600, log_name="pytorch")
            r = self.json_lines(out, "kernels")
            if rc != 0 or not r:
                s.fail(f"profile_step.py exit {rc}: {self.last_line(out)}")
            else:
                s.figures["pytorch_eager_top"] = r[-1]["top"]
                s.figures["pytorch_eager_gpu_ms_per_step"] = r[-1].get("time_per_step_ms")
        # Trainer side, always: what the step benchmark itself splits without a profiler. Eager
        # against CUDA-graph replay of the same step (section 3) is the host launch overhead; the
        # convolution FLOPs split 1 : 2 between forward and backward by construction.
        step_runs = getattr(self, "step_runs", {})
        g = step_runs.get("bf16 channels_last=on cuda_graph=on", {}).get("step_ms_median")
        e = step_runs.get("bf16 channels_last=on cuda_graph=off", {}).get("step_ms_median")
        if g and e:
            s.figures["trainer_step_ms_graph"] = g
            s.figures["trainer_step_ms_eager"] = e
            s.figures["trainer_host_overhead_ms"] = round(e - g, 3)
            s.figures["trainer_host_overhead_share_eager"] = round((e - g) / e, 3)
        else:
            missing.append("trainer eager/graph step times (section 3 did not measure both)")
        ncu = shutil.which("ncu")
        if not ncu:
            missing.append("trainer kernels: ncu (Nsight Compute) is not on PATH, and the trainer has no "
                           "built-in per-kernel or forward/backward/optimizer timing; only the whole-step "
                           "figures above (graph vs eager) are available for the trainer")
        else:
            # Eager steps (ncu does not attribute the kernels of a CUDA graph replay per launch);
            # skip the first 300 launches (FLOP count and the first warm-up step with cuDNN's
            # autotuning, roughly: not measured on a GPU yet) and profile the next 600.
            cmd = [ncu, "--target-processes", "all", "--launch-skip", "300", "--launch-count", "600",
                   "--csv", "--metrics", "gpu__time_duration.sum"] + self.trainer + [
                   "--config", os.path.join(ROOT, "configs", "openkbp_baseline.yaml"), "--benchmark", "--steps", "3",
                   "--warmup", "2", "--set", "training.cuda_graph=off"]
            rc, out = self.run(s, cmd, timeout=900, log_name="ncu")
            top, launches = self.ncu_top(out)
            if "ERR_NVGPUCTRPERM" in out:
                missing.append("trainer kernels: ncu has no permission for the GPU performance counters "
                               "(ERR_NVGPUCTRPERM; needs NVreg_RestrictProfilingToAdminUsers=0 or root)")
            elif rc != 0 or not top:
                s.fail(f"ncu exit {rc}, {launches} kernel rows parsed: {self.last_line(out)}")
            else:
                s.figures["trainer_ncu_top"] = top
                s.figures["trainer_ncu_launches"] = launches
                s.notes.append("trainer kernels: ncu gpu__time_duration.sum of launches 300-900 of an eager "
                               "OpenKBP-baseline benchmark (kernels serialised by ncu; shares, not step time)")
        if missing and s.status == "PASS":
            s.status = "PARTIAL"
            s.reason = "not measured: " + "; ".join(missing)
        elif missing:
            s.notes += ["not measured: " + m for m in missing]
        return s

    # ---- 6. data benchmark ------------------------------------------------------------------
    def openkbp_import(self, s):
        """Unpacks (a .tar.xz) and imports --openkbp once: (provided-data folder, HDF5 path). The first
        section that needs it runs the commands (section 6 with CUDA, else section 7)."""
        if getattr(self, "openkbp_ready", None):
            return self.openkbp_ready
        src, data = self.args.openkbp, self.args.openkbp
        if os.path.isfile(src):
            rc, out = self.run(s, ["tar", "-xJf", src, "-C", self.work])
            if rc != 0:
                raise RuntimeError(f"unpacking {src}: {self.last_line(out)}")
            data = os.path.join(self.work, "provided-data")
        h5 = os.path.join(self.work, "openkbp.h5")
        if not os.path.exists(h5):
            rc, out = self.run(s, self.trainer + ["import", "openkbp", "--source", data, "--out", h5])
            if rc != 0:
                raise RuntimeError(f"import openkbp exit {rc}: {self.last_line(out)}")
        self.openkbp_ready = (data, h5)
        return self.openkbp_ready

    def data(self):
        s = Section("6-data", "--benchmark data: gpu and pinned placements, 128^3, 11 channels, batch 2, flips / affine")

        def bench(cfg, path, size, batch, aug, secs, log):
            cmd = self.trainer + ["--config", cfg, "--benchmark", "data", "--benchmark-seconds", str(secs),
                                  "--set", f"data.path={path}", "--set", f"data.patch_size={size}",
                                  "--set", f"data.batch_size={batch}", "--set", f"experiment.output_dir={self.work}/runs"]
            cmd += ["--set", "augment.flip_prob=0.5"] if aug == "flips" else ["--set", "augment.affine_prob=0.5"]
            rc, out = self.run(s, cmd, timeout=900, log_name=log)
            r = self.json_lines(out, "data")
            if rc != 0 or not r:
                raise RuntimeError(f"--benchmark data exit {rc}: {self.last_line(out)}")
            return r[-1]

        quick_cfg = os.path.join(ROOT, "configs", "quickstart.yaml")
        try:
            small = self.synth(s, "phantom32.h5", 32, 8)
            r = bench(quick_cfg, small, 32, 2, "flips", 1, "cpu-smoke")
            s.cpu_status = "PASS"
            s.cpu_figures = {row["placement"] + "/" + row["stage"] + f"/{row['workers']}t":
                             round(1000 / row["batches_per_s"], 2) for row in r["results"] if row["batches_per_s"]}
            s.cpu_figures["unit"] = "ms per batch, 32^3 phantom, 5 channels, batch 2, flips"
        except RuntimeError as ex:
            s.cpu_status, s.cpu_reason = "FAIL", str(ex)
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device (gpu and pinned placements need one)"
            return s
        s.status = "PASS"
        try:
            # 11 channels: `trainer synth` makes 5-channel dose phantoms only (CT + 4 structures; no
            # channel-count option), so the 11-channel OpenKBP layout needs the imported sample.
            if self.args.openkbp:
                _, path = self.openkbp_import(s)
                cfg = os.path.join(ROOT, "configs", "openkbp.yaml")
                s.figures["dataset"] = "OpenKBP sample (--openkbp), 11 channels (CT + 10 structures), 128^3"
            else:
                path, cfg = self.synth(s, "phantom128.h5", 128, 8), quick_cfg
                s.figures["dataset"] = "dose phantoms (trainer synth), 5 channels, 128^3"
                s.status = "PARTIAL"
                s.reason = ("measured at 5 channels, not 11: `trainer synth` makes 5-channel phantoms only; "
                            "give --openkbp DIR for the 11-channel OpenKBP layout")
            for aug in ("flips", "affine"):
                r = bench(cfg, path, 128, 2, aug, 3 if self.args.quick else 10, aug)
                rows = {}
                for row in r["results"]:
                    rows[f"{row['placement']}/{row['stage']}/{row['workers']}t"] = \
                        round(1000 / row["batches_per_s"], 2) if row["batches_per_s"] else None
                for want in ("gpu", "pinned"):
                    if not any(k.startswith(want + "/") for k in rows):
                        s.fail(f"{aug}: placement {want} not measured")
                s.figures[f"ms_per_batch_{aug}"] = rows
        except RuntimeError as ex:
            s.fail(str(ex))
        return s

    # ---- 7. OpenKBP real run ----------------------------------------------------------------
    def openkbp(self):
        s = Section("7-openkbp", "Real run on the OpenKBP sample: train, SIGKILL, --resume, predict (TTA), evaluate")
        src = self.args.openkbp
        if not src:
            s.status, s.reason = "SKIPPED", "no --openkbp DIR given"
            return s
        try:
            data, h5 = self.openkbp_import(s)
        except RuntimeError as ex:
            s.cpu_status, s.cpu_reason = "FAIL", str(ex)
            s.fail(s.cpu_reason)
            return s
        s.cpu_status = "PASS"
        s.cpu_figures["imported"] = h5
        if not self.cuda:
            s.status, s.reason = "SKIPPED", "no CUDA device (the import ran: CPU part)"
            return s
        s.status = "PASS"
        cfg = os.path.join(ROOT, "configs", "openkbp.yaml")
        steps = 40 if self.args.quick else 100
        base = ["--set", f"data.path={h5}", "--set", f"experiment.output_dir={self.work}/runs",
                "--set", "data.cache=gpu", "--set", "training.cuda_graph=on",
                "--set", f"training.steps_per_epoch={steps}", "--set", "training.val_every=1",
                "--set", "checkpoint.every_epochs=1", "--set", "predict.split=val", "--set", "predict.tta=flips",
                "--set", "training.deterministic=true"]
        runs = os.path.join(self.work, "runs")
        # A fixed time, not a fixed step count: the trainer has no wall-clock limit, so one calibration
        # epoch (same settings; validation, graph capture and cuDNN set-up included, so it errs long)
        # gives the epoch time and training.epochs = --minutes / epoch time (at least 3: the kill comes
        # in epoch 2 and the resumed run must still finish one; at most 100).
        shutil.rmtree(os.path.join(runs, "gpucheck_calib"), ignore_errors=True)
        rc, out = self.run(s, self.trainer + ["--config", cfg, "--set", "experiment.name=gpucheck_calib",
                                              "--set", "training.epochs=1"] + base, timeout=900, log_name="calibrate")
        calib = self.read_metrics(os.path.join(runs, "gpucheck_calib", "metrics.csv"))
        if rc != 0 or not calib or not calib[0].get("epoch_seconds"):
            s.fail(f"calibration epoch exit {rc}: {self.last_line(out)}")
            return s
        epoch_s = float(calib[0]["epoch_seconds"])
        epochs = int(min(100, max(3, (self.args.minutes * 60) // max(epoch_s, 1e-3))))
        s.figures["minutes_per_run_requested"] = self.args.minutes
        s.figures["calibration_epoch_seconds"] = round(epoch_s, 2)
        s.figures["steps_per_epoch"] = steps
        s.figures["epochs_chosen"] = epochs
        s.notes.append(f"fixed time: --minutes {self.args.minutes} per run; one calibration epoch of {steps} steps "
                       f"took {epoch_s:.1f} s, so training.epochs={epochs} (min 3, max 100)")
        common = base + ["--set", f"training.epochs={epochs}"]
        killed_name, plain_name = "gpucheck_killed", "gpucheck_plain"
        for n in (killed_name, plain_name):
            shutil.rmtree(os.path.join(runs, n), ignore_errors=True)
        # Run A: killed with SIGKILL in its second epoch, then resumed to the end.
        cmd = self.trainer + ["--config", cfg, "--set", f"experiment.name={killed_name}"] + common
        s.commands.append(" ".join(shlex.quote(c) for c in cmd) + "  # SIGKILL in epoch 2")
        log = open(os.path.join(self.logs, "openkbp-killed.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        ckdir = os.path.join(runs, killed_name, "checkpoints")
        t0, killed = time.time(), False
        while p.poll() is None and time.time() - t0 < 900:
            if os.path.isdir(ckdir) and any(f.startswith("epoch_0001") for f in os.listdir(ckdir)):
                # Half an epoch into epoch 2 (epoch 1's time from metrics.csv, validation included).
                rows = self.read_metrics(os.path.join(runs, killed_name, "metrics.csv"))
                half = float(rows[0]["epoch_seconds"]) / 2 if rows and rows[0].get("epoch_seconds") else 2.0
                time.sleep(min(max(half, 0.5), 60))
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)
                    killed = True
                break
            time.sleep(0.5)
        p.wait()
        log.close()
        if not killed:
            s.fail(f"the run ended (exit {p.returncode}) before it could be killed in epoch 2; see logs/openkbp-killed.log")
            return s
        if any(f.startswith("epoch_0002.") for f in os.listdir(ckdir)):
            s.fail("epoch 2 had ended when SIGKILL came: not a mid-epoch kill")
        s.figures["killed_after_checkpoints"] = sorted(os.listdir(ckdir))
        rc, out = self.run(s, self.trainer + ["--config", cfg, "--set", f"experiment.name={killed_name}", "--resume"] +
                           common, timeout=1800, log_name="resume")
        if rc != 0:
            s.fail(f"--resume exit {rc}: {self.last_line(out)}")
            return s
        # Run B: the same, uninterrupted, for the loss curve.
        if not self.args.quick:
            rc, out = self.run(s, self.trainer + ["--config", cfg, "--set", f"experiment.name={plain_name}"] + common,
                               timeout=1800, log_name="plain")
            if rc != 0:
                s.fail(f"uninterrupted run exit {rc}: {self.last_line(out)}")
        rows_a = self.read_metrics(os.path.join(runs, killed_name, "metrics.csv"))
        if not rows_a:
            s.fail("no metrics.csv rows after the resumed run")
            return s
        s.figures["epochs"] = len(rows_a)
        s.figures["epoch_seconds"] = [float(r["epoch_seconds"]) for r in rows_a]
        s.figures["training_seconds_resumed_run"] = round(sum(s.figures["epoch_seconds"]), 1)
        s.figures["data_share"] = [float(r["data_share"]) for r in rows_a]
        s.figures["train_loss"] = [float(r["train_loss"]) for r in rows_a]
        if not self.args.quick:
            rows_b = self.read_metrics(os.path.join(runs, plain_name, "metrics.csv"))
            la, lb = [float(r["train_loss"]) for r in rows_a], [float(r["train_loss"]) for r in rows_b]
            diff = max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb)), default=None)
            s.figures["loss_curve_max_rel_diff_resumed_vs_uninterrupted"] = diff
            s.figures["loss_curve_equal"] = la == lb
            if len(la) != len(lb) or diff is None or diff > 1e-4:
                s.fail(f"the resumed loss curve differs from the uninterrupted one: {la} vs {lb}")
        else:
            s.notes.append("--quick: no uninterrupted run; the loss-curve comparison runs without --quick")
        rc, out = self.run(s, self.trainer + ["--config", cfg, "--set", f"experiment.name={killed_name}",
                                              "--predict-only"] + common, timeout=1800, log_name="predict")
        if rc != 0:
            s.fail(f"--predict-only exit {rc}: {self.last_line(out)}")
            return s
        rc, out = self.run(s, self.trainer + ["evaluate", "openkbp", "--reference",
                                              os.path.join(data, "validation-pats"), "--predictions",
                                              os.path.join(runs, killed_name, "predictions", "openkbp")],
                           timeout=900, log_name="evaluate")
        m1 = re.search(r"dose score ([0-9.]+)", out)
        m2 = re.search(r"DVH score ([0-9.]+)", out)
        if rc != 0 or not m1 or not m2:
            s.fail(f"evaluate openkbp exit {rc}: {self.last_line(out)}")
        else:
            s.figures["dose_score_gy"] = float(m1.group(1))
            s.figures["dvh_score_gy"] = float(m2.group(1))
        return s

    @staticmethod
    def read_metrics(path):
        import csv
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return list(csv.DictReader(f))

    # ---- report -----------------------------------------------------------------------------
    def machine_facts(self):
        cpu = platform.processor()
        try:
            with open("/proc/cpuinfo") as f:
                m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
                cpu = m.group(1) if m else cpu
        except OSError:
            pass
        mem = None
        try:
            with open("/proc/meminfo") as f:
                mem = int(re.search(r"MemTotal:\s*(\d+)", f.read()).group(1)) * 1024
        except (OSError, AttributeError):
            pass
        osname = platform.platform()
        try:
            with open("/etc/os-release") as f:
                m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
                osname = m.group(1) if m else osname
        except OSError:
            pass
        return {"hostname": socket.gethostname(), "os": osname, "kernel": platform.release(), "cpu": cpu,
                "cores": os.cpu_count(), "memory_bytes": mem, "layout": "bundle" if self.bundle else "build tree",
                "root": ROOT}

    def write(self, started):
        overall = "FAIL" if any(x.status == "FAIL" or x.cpu_status == "FAIL" for x in self.sections) else "PASS"
        rep = {"report": "gpu-check", "date": started.isoformat(timespec="seconds"),
               "seconds": round(time.time() - self.t0, 1), "commit": self.commit,
               "quick": self.args.quick, "machine": self.machine_facts(), "cuda": self.cuda, "overall": overall,
               "sections": [x.to_json() for x in self.sections]}
        with open(os.path.join(self.out, "gpu-report.json"), "w") as f:
            json.dump(rep, f, indent=2)
        m = rep["machine"]
        md = [f"# gpu-check report", "",
              f"- date: {rep['date']} ({rep['seconds']} s{', --quick' if self.args.quick else ''})",
              f"- commit: {rep['commit']}",
              f"- machine: {m['hostname']}, {m['os']}, {m['cpu']}, {m['cores']} cores, "
              f"{(m['memory_bytes'] or 0) / 2**30:.0f} GiB RAM; {m['layout']} at {m['root']}",
              f"- CUDA device: {'yes' if self.cuda else 'no (every GPU section SKIPPED)'}",
              f"- overall: **{overall}**", "",
              "| section | GPU | CPU part | reason |", "|---|---|---|---|"]
        for x in self.sections:
            md.append(f"| {x.title} | **{x.status}** | {x.cpu_status} | {(x.reason or x.cpu_reason).replace('|', '/')} |")
        for x in self.sections:
            md += ["", f"## {x.title}", "", f"GPU: **{x.status}**{': ' + x.reason if x.reason else ''}  ",
                   f"CPU part: {x.cpu_status}{': ' + x.cpu_reason if x.cpu_reason else ''}", ""]
            for label, figs in (("Figures", x.figures), ("CPU figures", x.cpu_figures)):
                if figs:
                    md.append(f"{label}:")
                    md.append("")
                    for k, v in figs.items():
                        md.append(f"- {k}: `{json.dumps(v) if isinstance(v, (dict, list)) else v}`")
                    md.append("")
            for n in x.notes:
                md.append(f"Note: {n}")
            if x.commands:
                md += ["", "Commands:", "", "```"] + x.commands + ["```"]
        with open(os.path.join(self.out, "gpu-report.md"), "w") as f:
            f.write("\n".join(md) + "\n")
        return overall

    def main(self):
        started = datetime.datetime.now(datetime.timezone.utc)
        self.t0 = time.time()
        for fn in (self.machine, self.gpu_tests, self.step, self.compare, self.kernels, self.data, self.openkbp,
                   self.distributed):
            try:
                sec = fn()
            except Exception as ex:  # a crash in one section is that section's FAIL, not a lost report
                sec = Section(fn.__name__, fn.__name__)
                sec.fail(f"gpu-check error: {type(ex).__name__}: {ex}")
            self.sections.append(sec)
            self.write(started)
            if fn == self.machine and sec.cpu_status == "FAIL":
                break  # nothing else can run without a working trainer
        overall = self.write(started)
        print(f"[gpu-check] {overall}: {os.path.join(self.out, 'gpu-report.md')} and gpu-report.json "
              f"({time.time() - self.t0:.0f} s)", file=sys.stderr)
        return 0 if overall == "PASS" else 1


def main():
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="report folder (default gpu-check-<UTC date and time>)")
    p.add_argument("--quick", action="store_true", help="fewer variants and steps (inside 4 minutes on one H100)")
    p.add_argument("--openkbp", default=None, help="OpenKBP data: provided-data folder or openkbp-sample.tar.xz")
    p.add_argument("--minutes", type=float, default=None,
                   help="section 7: training minutes per run, turned into training.epochs from a measured "
                        "epoch (default 1, 0.5 with --quick: the whole check inside 10 (4) minutes on one H100, "
                        "an estimate not yet measured)")
    p.add_argument("--trainer", default=None, help="trainer to check (default: the bundle's or build/release's)")
    p.add_argument("--python", default=os.environ.get("U3D_PYTHON") or shutil.which("python3") or sys.executable,
                   help="Python with torch for the PyTorch side (default U3D_PYTHON or python3)")
    a = p.parse_args()
    if a.openkbp and not os.path.exists(a.openkbp):
        print(f"gpu-check: --openkbp {a.openkbp}: no such file or folder; expected provided-data/ or "
              "openkbp-sample.tar.xz", file=sys.stderr)
        sys.exit(2)
    if a.openkbp:
        a.openkbp = os.path.abspath(a.openkbp)
    if a.minutes is None:
        a.minutes = 0.5 if a.quick else 1.0
    if a.minutes <= 0:
        print("gpu-check: --minutes must be positive", file=sys.stderr)
        sys.exit(2)
    if a.out is None:
        a.out = "gpu-check-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Check(a).main()


if __name__ == "__main__":
    sys.exit(main())
