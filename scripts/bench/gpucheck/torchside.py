"""The client of scripts/bench/torch_side.py: one process, torch imported once, for the roofline,
the PyTorch eager steps, the profile and torch.compile. Its stderr streams into one log; each
request is a command of the section that sends it; a request that fails or times out ends the
process (a sticky CUDA error must not spoil the next one: the next request starts a new one)."""
import json
import os
import select
import subprocess
import time

from .procs import BENCH, DeadlineHit, _child_setup, _kill_group


class TorchSide:
    def __init__(self, check, section):
        self.check, self.n, self.buf = check, 0, b""
        if not check.python:
            raise RuntimeError("no Python for the PyTorch side; set U3D_PYTHON")
        cmd = [check.python, os.path.join(BENCH, "torch_side.py")]
        if check.left() < 5:
            raise DeadlineHit("no time left to start the PyTorch side")
        self.log = check._log_path(section, "torch-side")
        section.commands.append(" ".join(cmd) + f"  # the one torch process (log {os.path.basename(self.log)})")
        with open(self.log, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n")
        self.logf = open(self.log, "a")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.logf,
                                  cwd=check.work, preexec_fn=_child_setup)
        t0 = time.time()
        try:
            hello = self._read(0, min(120.0, check.left()))
        except RuntimeError as ex:
            self.close(kill=True)
            raise RuntimeError(f"torch_side.py did not start ({ex}); see {os.path.basename(self.log)}")
        self.info = hello
        self.info["start_s"] = round(time.time() - t0, 1)
        check.write_report()

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def _read(self, rid, timeout):
        end = time.time() + timeout
        fd = self.p.stdout.fileno()
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                msg = json.loads(line)
                if msg.get("id") != rid:
                    continue
                if not msg.get("ok"):
                    raise RuntimeError(msg.get("error") or "failed")
                return msg.get("result")
            left = end - time.time()
            if left <= 0:
                raise RuntimeError(f"no answer in {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"the process ended (exit {self.p.wait()})")
                self.buf += chunk

    def request(self, section, op, timeout=600, **fields):
        """Sends one request; returns its result; RuntimeError (and the process ended) on failure."""
        if self.check.left() < 2:
            raise DeadlineHit(f"no time left before the deadline for torch_side {op}")
        self.n += 1
        req = dict(fields, id=self.n, op=op)
        shown = json.dumps(req)
        section.commands.append(f"torch_side.py <- {shown}  (log {os.path.basename(self.log)})")
        limit = max(1.0, min(timeout, self.check.left()))
        t0, error = time.time(), None
        try:
            self.p.stdin.write((shown + "\n").encode())
            self.p.stdin.flush()
            result = self._read(self.n, limit)
        except (RuntimeError, OSError, ValueError) as ex:
            error = f"torch_side {op}: {ex}"
        self.logf.write(f"[gpu-check] request {self.n} ({op}) {'failed' if error else 'answered'} after "
                        f"{time.time() - t0:.1f} s\n")
        self.logf.flush()
        if error:
            self.close(kill=True)
        self.check.write_report()
        if error:
            raise RuntimeError(error)
        return result

    def close(self, kill=False):
        if self.p is not None:
            if self.p.poll() is None and kill:
                _kill_group(self.p)
                self.p.wait()
            elif self.p.poll() is None:
                try:
                    self.p.stdin.write(b'{"id": -1, "op": "quit"}\n')
                    self.p.stdin.flush()
                    self.p.wait(timeout=5)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    _kill_group(self.p)
                    self.p.wait()
            self.p = None
            self.logf.close()
