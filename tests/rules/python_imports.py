"""house_rules.py's import-circle rule: no circle among the Python modules of scripts/."""
import os
import re

from cycles import cycles, files_under, read_lines


IMPORT_LINE = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+import\s+(.+)|import\s+([\w., ]+))", re.M)


def python_modules(root):
    """{path: None} of every .py below scripts/, and {name: [paths]}: the names a module answers to
    (its stem, or its folder's name for an __init__.py)."""
    paths = [p for p in files_under(root, "scripts") if p.endswith(".py")]
    by_name = {}
    for p in paths:
        folder, name = os.path.split(p[:-3])
        key = os.path.basename(folder) if name == "__init__" else name
        by_name.setdefault(key, []).append(p)
    return paths, by_name


def resolve_import(path, dots, dotted, by_name, existing):
    """The scripts/ file an import names, or None (the standard library, a package, ambiguous)."""
    folder = os.path.dirname(path)
    if dots:
        for _ in range(len(dots) - 1):
            folder = os.path.dirname(folder)
        base = folder + ("/" + dotted.replace(".", "/") if dotted else "")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in existing:
                return cand
        return None
    parts = dotted.split(".")
    for cand in (f"{folder}/{'/'.join(parts)}.py", f"{folder}/{'/'.join(parts)}/__init__.py"):
        if cand in existing:  # beside the file (its folder is on sys.path)
            return cand
    found = [c for c in by_name.get(parts[-1], [])
             if c[:-3].endswith("/".join(parts)) or c.endswith("/".join(parts) + "/__init__.py")]
    return found[0] if len(found) == 1 else None


def check_python_imports(root):
    """No import circle among the Python modules of scripts/: `import b`, `from b import`, `from .b
    import`, `from . import b` of a module beside the file, in its package or (by sys.path) a module
    of that name elsewhere in scripts/, at any depth of the file (a lazy import inside a function closes
    a circle too). One line per circle, its shortest loop from its first module."""
    paths, by_name = python_modules(root)
    existing = set(paths)
    edges = {}
    for path in paths:
        text = "\n".join(read_lines(root, path))
        targets = set()
        for m in IMPORT_LINE.finditer(text):
            dots, base, names, plain = m.groups()
            if plain is not None:
                dotted = [n.strip().split(" as ")[0].strip() for n in plain.split(",")]
            else:
                names = [n.strip().split(" as ")[0].strip("() ") for n in names.split(",")]
                dotted = [f"{base}.{n}" if base else n for n in names if re.fullmatch(r"\w+", n)]
                resolved_base = resolve_import(path, dots, base, by_name, existing) if base else None
                if resolved_base and not resolved_base.endswith("__init__.py"):
                    dotted = []  # names of a module, not submodules
                    targets.add(resolved_base)
            for d in dotted:
                t = resolve_import(path, dots or "", d, by_name, existing)
                if t and t != path:
                    targets.add(t)
        edges[path] = sorted(targets)
    findings = []
    for _, loop in cycles(sorted(edges), edges):
        findings.append(f"scripts: import circle {' -> '.join(loop)} (move what both need into a module that "
                        "imports neither)")
    return findings
