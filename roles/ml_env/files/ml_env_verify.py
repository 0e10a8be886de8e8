"""Check a venv from inside it (run by the ml_env role with the venv's python); print a JSON report.

Usage: python ml_env_verify.py [--files] [--expect MODULE=VERSION]... [--from MODULE=PREFIX]... [MODULE]...
  --files   check that every file the venv's own distributions recorded (RECORD) exists with its size:
            cheap (stat only), catches deleted or truncated files without importing anything. Packages of a
            base environment (seen through a .pth file) are not the venv's and are not checked.
  MODULE    import it and report its __version__; --expect also compares the version, --from checks that
            it is loaded from under PREFIX (a base environment's torch, not a second copy in the venv).
Exit 1 with one readable line per problem on stderr.
"""

import importlib
import importlib.metadata
import json
import os
import sys
import traceback

SHOWN = 5


def check_files():
    # Two distributions may install the same path (torch-c-dlpack-ext and another wheel both ship a top-level
    # build_backend.py): the last one installed wins, so a path is sound when it matches any RECORD naming it.
    claims = {}
    own = os.path.realpath(sys.prefix) + os.sep
    for dist in importlib.metadata.distributions():
        if not os.path.realpath(dist.locate_file("")).startswith(own):
            continue
        owner = f"{dist.metadata['Name']} {dist.version}"
        for f in dist.files or ():
            # RECORD lists itself without a size; byte code is a cache that Python may rewrite.
            if f.size is None or f.suffix == ".pyc":
                continue
            claims.setdefault(os.path.normpath(f.locate()), []).append((str(f), f.size, owner))
    bad = []
    for path, owners in claims.items():
        try:
            size = os.stat(path).st_size
        except OSError:
            bad.append(f"{owners[0][0]} missing ({', '.join(o for _, _, o in owners)})")
            continue
        if all(size != want for _, want, _ in owners):
            said = ", ".join(f"{want} ({o})" for _, want, o in owners)
            bad.append(f"{owners[0][0]} has {size} bytes, RECORD says {said}")
    problems = []
    if bad:
        problems.append(
            f"{len(bad)} of {len(claims)} installed files missing or changed: " + "; ".join(bad[:SHOWN])
        )
    return len(claims), problems


def loaded_from(module, prefix):
    where = os.path.realpath(getattr(module, "__file__", "") or "")
    return where.startswith(os.path.realpath(prefix) + os.sep), where


def import_modules(modules, expect, origins):
    found, problems = {}, []
    for name in dict.fromkeys(modules):
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # any import-time error is the finding
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
            problems.append(f"import {name} failed: {type(exc).__name__}: {exc}{where}")
            continue
        version = str(getattr(mod, "__version__", "") or "")
        found[name] = version
        if name in origins:
            inside, where = loaded_from(mod, origins[name])
            if not inside:
                problems.append(f"{name} is loaded from {where}, expected under {origins[name]}")
        want = expect.get(name)
        # The CPU build reports the plain release; a CUDA build may add a local tag (0.22.0+cu130).
        if want and version.partition("+")[0] != want.partition("+")[0]:
            problems.append(f"{name}.__version__ is {version!r}, expected {want!r}")
    return found, problems


def main(argv):
    expect, origins, modules, files = {}, {}, [], False
    args = iter(argv)
    for arg in args:
        if arg == "--files":
            files = True
        elif arg == "--expect":
            name, _, version = next(args).partition("=")
            expect[name] = version
            modules.append(name)
        elif arg == "--from":
            name, _, prefix = next(args).partition("=")
            origins[name] = prefix
            modules.append(name)
        else:
            modules.append(arg)
    checked, problems = check_files() if files else (0, [])
    found, import_problems = import_modules(modules, expect, origins)
    problems += import_problems
    report = {
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "files_checked": checked,
        "modules": found,
    }
    print(json.dumps(report))
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
