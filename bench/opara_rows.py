"""Whether a row of the Python benchmarks labelled opara ran opara's compiled graphs.

torch.compile(backend="opara") runs a graph it cannot take eagerly (with a warning), and
kernels="inductor" compiles ATen's kernels where Inductor's cannot be had: a row labelled opara may
then time eager, or ATen's kernels. Every opara row of torch_compile_bench.py and
llm_decode_bench.py carries its counters and says so (`fell_back`, in its table and JSON).
"""

import collections
import contextlib
import warnings

COUNTERS = ("graphs", "compiles", "fallbacks", "regions")


def fallback_note(backend, counters):
    """None when an opara row ran as labelled; else why not, in words. counters: opara's counters
    over the row (graphs Dynamo handed over, opara's compiles, graphs run eagerly, regions Inductor
    compiled); rows of other backends have none."""
    if not backend.startswith("opara") or counters is None:
        return None
    graphs, compiles = counters.get("graphs", 0), counters.get("compiles", 0)
    fallbacks, regions = counters.get("fallbacks", 0), counters.get("regions", 0)
    notes = []
    if graphs == 0:
        notes.append("Dynamo handed opara no graph: it ran eagerly")
    elif fallbacks:
        notes.append(f"ran eagerly {fallbacks} time(s) ({graphs} graph(s), {compiles} compile(s))")
    elif compiles == 0:
        notes.append(f"nothing compiled ({graphs} graph(s))")
    # kernels="inductor" without a region: opara compiled ATen's kernels instead (a warning said why).
    if backend == "opara-inductor" and graphs and not regions:
        notes.append("no region compiled by Inductor: ATen's kernels")
    return "; ".join(notes) or None


def marked(backend, counters):
    """The words a table puts after an opara row: ' FELL BACK: why', or ''."""
    note = fallback_note(backend, counters)
    return f" FELL BACK: {note}" if note else ""


class Attribution:
    """opara's counters and warnings per backend, when several backends run in turn in one process
    (compiled, then timed in interleaved rounds): `with attribution.to(name):` around each stretch
    that runs `name` adds what moved meanwhile to its tally."""

    def __init__(self):
        self.counters = collections.defaultdict(collections.Counter)
        self.warnings = collections.defaultdict(dict)  # name -> {message: None}, in order, each once
        self.compiles = collections.defaultdict(list)  # name -> opara.describe_compile of each compile

    @contextlib.contextmanager
    def to(self, name):
        from opara import describe_compile, dynamo_compiles, dynamo_counters

        before = collections.Counter(dynamo_counters)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                moved = collections.Counter(dynamo_counters) - before
                self.counters[name].update(moved)
                made = list(dynamo_compiles)[-moved["compiles"]:] if moved["compiles"] else []
                self.compiles[name] += [describe_compile(entry) for entry in made]
                for w in caught:
                    if "opara" in str(w.message):
                        self.warnings[name][str(w.message)] = None

    def row(self, name):
        """The counters of `name` (every one of COUNTERS, zero if it never moved) and its fallback note."""
        counters = {key: int(self.counters[name].get(key, 0)) for key in COUNTERS}
        return {"counters": counters, "fell_back": fallback_note(name, counters),
                "warnings": list(self.warnings[name]), "compiles": self.compiles[name]}
