"""The speed report's tables that compare ways of running one network (gpucheck/sections_speed.py
fills the figures, SpeedReport lays them out): the fused step's profile categories against the unfused
step's, the norm layers three ways (norm_bench.py), and the OpenKBP baseline's stride-2 convolutions as
space-to-depth (conv_floor.py)."""

KERNEL_CATEGORIES = ("normalisation", "loss", "activation", "copy/cast")  # what the fused kernels replace


def cell(v, fmt="{:.2f}"):
    return "not measured" if v is None else fmt.format(v)


def fused_vs_unfused(name, figs):
    """Table rows: per batch and category, the fused step's profiled ms against the unfused step's (the
    kernels' own categories first); a fused category slower than ATen's says so (keep auto off for it)."""
    rows = []
    for b, f in figs.get("profiles", {}).items():
        u = figs.get("unfused_profiles", {}).get(b)
        if not u:
            continue
        fc, uc = f.get("categories") or {}, u.get("categories") or {}
        for cat in sorted(set(fc) | set(uc), key=lambda c: (c not in KERNEL_CATEGORIES, c)):
            a, z = fc.get(cat), uc.get(cat)
            if not a and not z:
                continue
            ratio = f"{a / z:.2f}" if a is not None and z else "-"
            slower = " (slower fused)" if a is not None and z and a > z * 1.02 and cat in KERNEL_CATEGORIES else ""
            rows.append(f"| {name} | {b} | {cat} | {cell(a, '{:.3f}')} | {cell(z, '{:.3f}')} | {ratio}{slower} |")
        rows.append(f"| {name} | {b} | all | {cell(f.get('total_ms_per_step'), '{:.3f}')} | "
                    f"{cell(u.get('total_ms_per_step'), '{:.3f}')} | - |")
    return rows


def norm_figures(n):
    """What the report keeps of norm_bench.py's JSON: per way the summed ms and the sites it covers, the
    worst difference from ATen, and why a way did not run."""
    sites = n.get("sites") or []
    out = {"layers": n.get("layers"), "sites": len(sites), "cudnn_version": n.get("cudnn"), "sum_ms": n.get("sum_ms"),
           "sum_sites": n.get("sum_sites"), "worst_diff": {}, "not_run": {}}
    for way in ("ours", "cudnn"):
        diffs = [max(v for k, v in site[way].items() if k.endswith("_diff") and v is not None)
                 for site in sites if site.get(way, {}).get("status") == "ok" and "y_diff" in site[way]]
        out["worst_diff"][way] = max(diffs) if diffs else None
        why = sorted({site[way]["status"] for site in sites if site.get(way, {}).get("status") != "ok"})
        if why:
            out["not_run"][way] = why
    return out


def norms_rows(name, figs):
    """Table rows: per batch, the network's norm layers (fwd + bwd, summed over the layers) three ways."""
    rows = []
    for b, n in figs.get("norms", {}).items():
        ms, cov = n.get("sum_ms") or {}, n.get("sum_sites") or {}
        cells = [f"{cell(ms.get(w), '{:.3f}')} ({cov.get(w, 0)}/{n.get('sites')})" for w in ("aten", "ours", "cudnn")]
        timed = {w: ms[w] for w in ("aten", "ours", "cudnn") if ms.get(w) is not None and cov.get(w) == n.get("sites")}
        best = min(timed, key=timed.get) if timed else "-"
        notes = "; ".join(f"{w}: {', '.join(v)[:160]}" for w, v in (n.get("not_run") or {}).items())
        diffs = ", ".join(f"{w} {v:.1e}" for w, v in (n.get("worst_diff") or {}).items() if v is not None)
        rows.append(f"| {name} | {b} | {n.get('layers')} | {' | '.join(cells)} | {best} | {diffs or '-'} | "
                    f"{notes.replace('|', '/') or '-'} |")
    return rows


def space_to_depth_rows(name, figs):
    """Table rows: per batch, the stride-2 4^3 convolutions' floor as they are and as space-to-depth +
    stride-1 convolutions (conv_floor.py); "pays" when the rewrite's sum is the smaller."""
    rows = []
    for b, f in figs.get("conv_floor", {}).items():
        s = f.get("space_to_depth")
        if not s:
            continue
        a, z = s.get("strided_ms"), s.get("s2d_ms")
        verdict = "-" if not a or not z else f"{z / a:.2f} ({'pays' if z < a else 'does not pay'})"
        rows.append(f"| {name} | {b} | {s.get('convolutions')} | {cell(a, '{:.3f}')} | {cell(z, '{:.3f}')} | "
                    f"{verdict} | {cell(s.get('max_rel_diff'), '{:.1e}')} |")
    return rows
