#!/usr/bin/env python3
"""docs/install.md (moved there from README.md) says what scripts/setup.sh installs, and it stays true (ctest `docs_in_step`, label unit).

  docs_in_step.py SOURCE_DIR

Checks: the Debian packages docs/install.md lists ("the Debian packages A, B, ...;") are exactly setup.sh's
PACKAGES, and every Python package setup.sh pip-installs (torch==..., PY_PACKAGES, wheel==...) is
named in docs/install.md with its pinned version. Prints each difference, one a line; exit 1 when there is one.
"""
import os
import re
import sys


def setup_packages(text):
    """(Debian packages, {python package: version}) that setup.sh installs."""
    m = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M)
    debian = m.group(1).split() if m else []
    pins = dict(re.findall(r"\b([A-Za-z][A-Za-z0-9_.-]*)==([0-9][0-9A-Za-z.+]*)", text))
    version = re.search(r"^TORCH_VERSION=(\S+)", text, re.M)
    if version:
        pins["torch"] = version.group(1)
    pins.pop("NAME", None)
    return debian, pins


def readme_debian(text):
    m = re.search(r"the Debian packages\s+(.*?);", text, re.S)
    if not m:
        return None
    return [p.strip().strip("`") for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", " ".join(m.group(1).split()))
            if p.strip()]


# The page that says what setup.sh installs (README.md until issue 52 moved the text).
PAGE = "docs/install.md"


def check(root):
    with open(os.path.join(root, "scripts", "setup.sh")) as f:
        setup = f.read()
    with open(os.path.join(root, PAGE)) as f:
        readme = f.read()
    findings = []
    debian, pins = setup_packages(setup)
    listed = readme_debian(readme)
    if listed is None:
        return [f"{PAGE}: no sentence 'the Debian packages A, B, ...;' saying what scripts/setup.sh installs"]
    for p in debian:
        if p not in listed:
            findings.append(f"{PAGE}: setup.sh installs the Debian package {p}; the page's list lacks it")
    for p in listed:
        if p not in debian:
            findings.append(f"{PAGE}: lists the Debian package {p}, which setup.sh does not install")
    flat = " ".join(readme.split())
    for name, version in sorted(pins.items()):
        if f"{name}=={version}" not in flat and not (name == "torch" and f"torch=={version}" in flat):
            findings.append(f"{PAGE}: setup.sh pip-installs {name}=={version}; the page does not name it")
    return findings


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    findings = check(argv[1])
    for line in findings:
        print(line)
    if findings:
        print(f"{len(findings)} difference(s) between {PAGE} and scripts/setup.sh")
        return 1
    print(f"{PAGE} names every package scripts/setup.sh installs, and no other Debian package")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
