# Prints, for the code objects of a few standard-library modules compiled
# by this interpreter, the raw line table and the line of each bytecode
# offset as CPython itself computes it: co_lines() (3.10+), or the line
# starts of dis.findlinestarts before.
import dis, importlib, json, sys, types

MODULES = ["json.decoder", "json.encoder", "textwrap", "string", "shlex", "fnmatch", "difflib", "tokenize"]


def walk(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            for x in walk(c):
                yield x


out = []
for name in MODULES:
    path = importlib.import_module(name).__file__
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    for co in walk(top):
        size = len(co.co_code)
        lines = [0] * (size // 2)
        if sys.version_info >= (3, 10):
            table = co.co_linetable
            for start, end, line in co.co_lines():
                for off in range(start, min(end, size), 2):
                    lines[off // 2] = line or 0
        else:
            table = co.co_lnotab
            line = co.co_firstlineno
            starts = dict(dis.findlinestarts(co))
            for off in range(0, size, 2):
                line = starts.get(off, line)
                lines[off // 2] = line
        out.append({"name": co.co_name, "first": co.co_firstlineno, "table": table.hex(), "lines": lines})
json.dump(out, sys.stdout)
