"""Small vector trees the driver tests build by hand: a case that misbehaves among passing ones, and a subset of a
generated tree."""

import json
import shutil
from pathlib import Path

from kpurgatory.conformance.tools import vectors
from kpurgatory.model import vocabulary as v


def boom_tree(out: Path) -> Path:
    """A tree of five timer cases; the second adds the task "boom" and advances past it."""
    normal = [v.TimerAdd("t1", 5), v.Advance(3), v.Advance(5), v.Size(), v.Shutdown()]
    boom = [v.TimerAdd("t1", 2), v.TimerAdd("boom", 4), v.Advance(10), v.Size()]
    cases = [vectors.vector_trace(f"{n}.{name}", "timer", v.Params(), commands, "scenarios")
             for n, (name, commands) in enumerate([("before", normal), ("boom", boom), ("after", normal),
                                                    ("later", normal), ("last", normal)])]
    vectors.write_tree(out, vectors.tree_of(cases))
    return out


def subtree(tree: Path, out: Path, keep) -> Path:
    """The cases of ``tree`` whose index entry ``keep`` accepts, as a tree of their own."""
    index = json.loads((tree / "index.json").read_text())
    index["cases"] = [entry for entry in index["cases"] if keep(entry)]
    for entry in index["cases"]:
        (out / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tree / entry["path"], out / entry["path"])
    (out / "index.json").write_text(json.dumps(index))
    return out
