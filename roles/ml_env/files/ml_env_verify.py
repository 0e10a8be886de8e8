"""Import modules inside the venv and report their versions as JSON (run by the ml_env role).

Usage: python ml_env_verify.py [--expect MODULE=VERSION]... [MODULE]...
Exit 1 with one readable line per problem on stderr when an import fails or a version differs.
"""

import importlib
import json
import sys
import traceback


def main(argv):
    expect = {}
    modules = []
    args = iter(argv)
    for arg in args:
        if arg == "--expect":
            name, _, version = next(args).partition("=")
            expect[name] = version
            modules.append(name)
        else:
            modules.append(arg)
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
        want = expect.get(name)
        # The CPU build reports the plain release; a CUDA build may add a local tag (0.22.0+cu130).
        if want and version.split("+")[0] != want.split("+")[0]:
            problems.append(f"{name}.__version__ is {version!r}, expected {want!r}")
    print(json.dumps({"python": sys.version.split()[0], "prefix": sys.prefix, "modules": found}))
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
