"""The report folder: gpu-report.md, gpu-report.json and logs.tar.gz (each command's log, its head
and its last LOG_TAIL_BYTES), nothing else, rewritten after every command (temporary file in the
same folder, then os.replace), so a check killed at any moment leaves the report of everything
finished before it: the section that was running shows RUNNING, the ones not reached PENDING."""
import io
import json
import os
import tarfile
import time

LOG_HEAD_BYTES = 4 * 1024      # the command line and the first lines of every log
LOG_TAIL_BYTES = 200 * 1024    # and its end: what failed is at the end
ARCHIVE_LIMIT = 15 * 2 ** 20   # the return channel takes files of at most 16 MiB
REPORT_FILES = ("gpu-report.md", "gpu-report.json", "logs.tar.gz")

# A section's status: PASS, FAIL, PARTIAL (it ran; part of what it measures could not be, the
# reason says which), SKIPPED (with the reason), RUNNING (the check was killed while it ran),
# INTERRUPTED (SIGTERM/SIGINT during it), PENDING (not reached).
FINAL = ("PASS", "FAIL", "PARTIAL", "SKIPPED", "INTERRUPTED")


class Section:
    """One section of the check. `status` judges the GPU work; `rehearsal` the CPU rehearsal of
    the same plumbing that runs without CUDA (never a GPU figure: the GPU status stays SKIPPED)."""

    def __init__(self, num, sid, title):
        self.num, self.sid, self.title = num, sid, title
        self.status, self.reason = "PENDING", ""
        self.state = "pending"  # running, then done; a report written during the section says running
        self.rehearsal, self.rehearsal_reason = "n/a", ""
        self.figures, self.rehearsal_figures = {}, {}
        self.commands, self.notes = [], []
        self.estimate_s, self.estimate_basis = None, ""
        self.measured_s, self.started = None, None

    def fail(self, why):
        self.reason = (self.reason + "; " if self.reason and self.status == "FAIL" else "") + why
        self.status = "FAIL"

    def partial(self, why):
        """Part of the section could not be measured; a FAIL stays a FAIL (the why becomes a note)."""
        if self.status == "FAIL":
            self.notes.append("not measured: " + why)
            return
        self.reason = (self.reason + "; " if self.reason and self.status == "PARTIAL" else "") + why
        self.status = "PARTIAL"

    def rehearsal_fail(self, why):
        self.rehearsal_reason = (self.rehearsal_reason + "; " if self.rehearsal == "FAIL" else "") + why
        self.rehearsal = "FAIL"

    def rehearsal_verdict(self, problems):
        """The rehearsal FAILs with each of `problems`, or PASSes when there is none."""
        for p in problems:
            self.rehearsal_fail(p)
        if not problems:
            self.rehearsal = "PASS"

    def skip(self, why):
        self.status, self.reason = "SKIPPED", why

    def to_json(self):
        return {"num": self.num, "id": self.sid, "title": self.title, "state": self.state, "status": self.status,
                "reason": self.reason, "rehearsal": self.rehearsal, "rehearsal_reason": self.rehearsal_reason,
                "estimate_s": self.estimate_s, "estimate_basis": self.estimate_basis,
                "measured_s": self.measured_s, "figures": self.figures,
                "rehearsal_figures": self.rehearsal_figures, "commands": self.commands, "notes": self.notes}


def overall(sections, cuda, finished):
    """FAIL when any section or rehearsal failed; RUNNING while the check runs (what a killed check
    leaves); PASS only on a CUDA machine where every section that ran passed; REHEARSAL PASS
    without CUDA (no GPU figure was taken); else PARTIAL."""
    if any(s.status == "FAIL" or s.rehearsal == "FAIL" for s in sections):
        return "FAIL"
    if not finished:
        return "RUNNING"
    if any("INTERRUPTED" in (s.status, s.rehearsal) for s in sections):
        return "INTERRUPTED"
    if not cuda:
        return "REHEARSAL PASS"
    ran = [s for s in sections if s.status != "SKIPPED"]
    return "PASS" if ran and all(s.status == "PASS" for s in ran) else "PARTIAL"


def _atomic_write(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _trimmed(path, tail):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size <= LOG_HEAD_BYTES + tail:
            return f.read()
        head = f.read(LOG_HEAD_BYTES)
        f.seek(size - tail)
        return head + f"\n[gpu-check: {size - LOG_HEAD_BYTES - tail} bytes trimmed]\n".encode() + f.read()


def pack_logs(log_dir, tail=LOG_TAIL_BYTES):
    """logs.tar.gz's bytes: every file of log_dir (flat), each trimmed to its head and tail."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
            p = os.path.join(log_dir, name)
            if not os.path.isfile(p):
                continue
            data = _trimmed(p, tail)
            info = tarfile.TarInfo("logs/" + name)
            info.size, info.mtime, info.mode = len(data), int(os.path.getmtime(p)), 0o644
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    if len(data) > ARCHIVE_LIMIT and tail > 8 * 1024:
        return pack_logs(log_dir, tail // 4)
    return data


def _fmt_s(v):
    return "-" if v is None else f"{v:.0f} s"


def _value(v):
    return f"`{json.dumps(v)}`" if isinstance(v, (dict, list)) else f"`{v}`"


def markdown(rep, sections):
    m = rep["machine"]
    lines = [f"# {rep.get('title') or 'gpu-check report'}", ""] + list(rep.get("header") or []) + [
             f"- date: {rep['date']}; {rep['seconds']} s of "
             f"{'no deadline' if rep['deadline_s'] is None else str(rep['deadline_s']) + ' s (--deadline)'}",
             f"- commit: {rep['commit']}",
             f"- machine: {m['hostname']}, {m['os']}, {m['cpu']}, {m['cores']} cores, "
             f"{(m['memory_bytes'] or 0) / 2 ** 30:.0f} GiB RAM; {m['layout']} at {m['root']}",
             f"- GPU: {rep['gpu'] or 'none'}; CUDA device: {'yes' if rep['cuda'] else 'no (every GPU section SKIPPED)'}",
             f"- overall: **{rep['overall']}**" + ("" if rep["finished"] else
                                                   " (report written while the check ran: a section shown RUNNING "
                                                   "was running when it stopped; PENDING ones were not reached)"),
             "- logs: logs.tar.gz (each command's output, its head and its last "
             f"{LOG_TAIL_BYTES // 1024} KB)", "",
             "| # | section | GPU | reason | CPU rehearsal | estimate | measured |", "|---|---|---|---|---|---|---|"]
    for s in sections:
        reason = (s.reason or "").replace("|", "/").replace("\n", " ")
        status = s.status if s.state != "running" or s.status == "RUNNING" else f"RUNNING (so far {s.status})"
        lines.append(f"| {s.num} | {s.title} | **{status}** | {reason} | {s.rehearsal} | "
                     f"{_fmt_s(s.estimate_s)} | {_fmt_s(s.measured_s)} |")
    lines += workflow_table(sections)
    for s in sections:
        if s.status == "PENDING" or not (s.commands or s.figures or s.rehearsal_figures or s.notes):
            continue  # the table row says it all
        lines += ["", f"## {s.num}. {s.title}", "",
                  f"GPU: **{s.status}**{': ' + s.reason if s.reason else ''}  ",
                  f"CPU rehearsal: {s.rehearsal}{': ' + s.rehearsal_reason if s.rehearsal_reason else ''}  ",
                  f"Estimate {_fmt_s(s.estimate_s)} ({s.estimate_basis or 'n/a'}); measured {_fmt_s(s.measured_s)}", ""]
        for label, figs in (("Figures", s.figures), ("CPU rehearsal figures (plumbing, not speed)",
                                                     s.rehearsal_figures)):
            if figs:
                lines += [f"{label}:", ""] + [f"- {k}: {_value(v)}" for k, v in figs.items()] + [""]
        lines += [f"Note: {n}  " for n in s.notes]
        if s.commands:
            lines += ["", "Commands:", "", "```"] + s.commands + ["```"]
    lines += list(rep.get("tail") or [])
    return "\n".join(lines) + "\n"


def _pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def _num(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def workflow_table(sections):
    """One row per workflow section that has one (sections_workflows.py): the GPU's, else the CPU
    rehearsal's (marked: plumbing, never a speed figure)."""
    rows = []
    for s in sections:
        for where, figs in (("GPU", s.figures), ("CPU rehearsal", s.rehearsal_figures)):
            r = figs.get("row") if isinstance(figs, dict) else None
            if not r:
                continue
            score = ", ".join(f"{k} {v:.4g}" if isinstance(v, (int, float)) else f"{k} {v}"
                              for k, v in (r.get("score") or {}).items())
            peak = r.get("peak_gpu_reserved") or r.get("peak_host") or "-"
            ratio = "" if r.get("vs_seed") is None else f" (x{r['vs_seed']})"
            cells = [f"{s.num}. {r['workflow']} ({where})", _num(r.get("minutes")), str(r.get("epochs", "-")),
                     _num(r.get("samples_per_s")), _num(r.get("steady_epoch_s"), "{:.2f}"),
                     _num(r.get("first_step_s")), _pct(r.get("gpu_busy")), _pct(r.get("data_wait")), peak,
                     score or "-", r.get("seed", "") + ratio]
            rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "## Workflows", "",
            "| workflow | minutes | epochs | samples/s | steady epoch s | first step s | GPU busy | data wait | "
            "peak memory | score | the seed's figure (ours / theirs) |", "|---|---|---|---|---|---|---|---|---|---|---|"] + rows


def write(report_dir, log_dir, rep_fields, sections, cuda, finished):
    """Rewrites the three files of the report folder; returns the overall status."""
    rep = dict(rep_fields)
    rep["overall"] = overall(sections, cuda, finished)
    rep["finished"] = finished
    rep["written"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rep["sections"] = [s.to_json() for s in sections]
    _atomic_write(os.path.join(report_dir, "gpu-report.json"), json.dumps(rep, indent=2).encode())
    _atomic_write(os.path.join(report_dir, "gpu-report.md"), markdown(rep, sections).encode())
    _atomic_write(os.path.join(report_dir, "logs.tar.gz"), pack_logs(log_dir))
    return rep["overall"]


def prepare(report_dir):
    """Creates the report folder and removes the temporaries a killed earlier check left. A folder
    holding other files was refused before (gpu_check.py check_paths: it must stay at most 8 files
    and travel back as is)."""
    os.makedirs(report_dir, exist_ok=True)
    for name in os.listdir(report_dir):
        if name.startswith(".") and name.endswith(".tmp"):
            os.remove(os.path.join(report_dir, name))
