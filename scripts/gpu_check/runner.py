"""The step runner: one clock, a time limit on every command, one result line per step.

The device tool ends a command that overruns its call with SIGKILL: nothing runs after that, so the
results cannot wait for the end. After every result line the step table (steps.tsv) and the summary
(summary.txt: the table so far, the checks, the goals) are written into the output folder and
copied into $OUT, and, unless the line says SKIPPED, the logs' tarball too; each file is written
beside its place and renamed into it, so that a kill leaves the previous whole file, never half of
one.

Every command runs in a process group of its own under a limit: its own, or what is left before the
call's deadline if that is less. One that reaches it is killed with its group (SIGTERM, then
SIGKILL 5 s later) and its result line reads "killed (time)", not FAILED: it ran out of time, it
did not fail a check.
"""

import os
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import report

OK, FAILED, SKIPPED, KILLED = "ok", "FAILED", "SKIPPED", "killed (time)"
GRACE_S = 5  # between SIGTERM and SIGKILL when a command is killed
LEAST_S = 5  # a command always gets this long, even past the deadline (0 would mean no limit)


class Stopped(BaseException):
    """SIGTERM (the wrapper's `timeout`) or SIGINT arrived: stop now, keep what is done.

    A BaseException, so that no `except Exception` of a step swallows it."""

    def __init__(self, signame):
        super().__init__(signame)
        self.signame = signame


@dataclass
class Outcome:
    """How a command ended. rc is None when it was killed for time."""

    rc: int | None
    killed: bool
    by_deadline: bool  # killed because the call's deadline came before the command's own limit
    seconds: float
    limit_s: float
    log: Path

    @property
    def ok(self):
        return self.rc == 0

    def text(self):
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines=1):
        return "\n".join(self.text().splitlines()[-lines:])


def write_atomically(path, data):
    """Writes data (str or bytes) beside path, then renames it into place."""
    path = Path(path)
    part = path.with_name(f".{path.name}.part")
    part.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(part, path)


def copy_atomically(source, target):
    target = Path(target)
    part = target.with_name(f".{target.name}.part")
    shutil.copyfile(source, part)
    os.replace(part, target)


class _NotStarted:
    """A command that could not start (exit 127, as a shell says)."""

    pid = None
    returncode = 127

    def wait(self, timeout=None):
        return self.returncode


def _signal_group(pid, sig):
    if pid is None:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Runner:
    """Runs the steps of one call and keeps their result lines.

    out: the output folder (logs, JSON, steps.tsv, summary.txt); publish_to: $OUT or None.
    budget_s: no step starts after it; hard_s: no command runs past it (both from the start).
    goal_models: the models whose opara rows the summary checks against issue 4's goals.
    title: the summary's first words ("gpu_check cold", ...).
    """

    def __init__(self, out, publish_to=None, budget_s=540, hard_s=570, goal_models=(), title="gpu_check"):
        self.started = time.monotonic()
        self.wall_started = time.time()  # files older than this were made by an earlier call
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.publish_to = Path(publish_to) if publish_to else None
        if self.publish_to:
            self.publish_to.mkdir(parents=True, exist_ok=True)
        self.budget_s = budget_s
        self.hard_s = hard_s
        self.goal_models = list(goal_models)
        self.title = title
        # name -> (status, detail): the lines an earlier call on this (warm) machine left, then ours.
        self.lines = self._read_lines()
        self.mine = set()  # the names this call noted
        self.hints = []  # the calls that run what was skipped or killed for time
        self.hint_order = []  # the order of the not-reached line's steps (the cold path's)
        self.running = None  # the step a command runs for, while it runs
        self.state = "in progress"
        self._procs = {}  # pid -> Popen, every command still running (the background ones too)

    # ---- the clock --------------------------------------------------------------------------------
    def elapsed(self):
        return time.monotonic() - self.started

    def seconds(self):
        return int(self.elapsed())

    def in_time(self, name, hint, least_s=0):
        """True while a step needing least_s seconds fits; otherwise notes it as skipped and says,
        once per hint, which call runs it."""
        now = self.elapsed()
        if now < self.budget_s and now + least_s < self.hard_s:
            return True
        self.add_hint(hint, f"SKIPPED (out of time after {int(now)} s) from {name} on")
        self.note(name, SKIPPED, f"out of time after {int(now)} s")
        return False

    def add_hint(self, hint, why):
        """Names the call that runs hint's steps on the not-reached line (published with the next line).
        A task has one call (scripts/README.md): the line says what this one did not reach."""
        if hint not in self.hints:
            self.hints.append(hint)
            print(f"{why}: not reached (scripts/gpu_check.sh {hint} runs it)", flush=True)

    # ---- commands ---------------------------------------------------------------------------------
    def start(self, cmd, log, env=None, cwd=None):
        """Starts a command in a process group of its own, its output into log; see wait()."""
        log = Path(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as sink:
            try:
                proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=sink,
                                        stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
            except OSError as error:  # no such program: a failed step, not a crashed check
                sink.write(f"gpu_check: cannot run {cmd[0]}: {error}\n".encode())
                proc = _NotStarted()
        proc.log = log
        proc.began = time.monotonic()
        if proc.pid is not None:
            self._procs[proc.pid] = proc
        return proc

    def wait(self, proc, limit_s):
        """Waits for a started command at most limit_s from its start, and never past the call's
        deadline (LEAST_S at least); kills its group when it overruns. Returns its Outcome."""
        own_end = proc.began + limit_s
        call_end = self.started + self.hard_s
        end = max(min(own_end, call_end), proc.began + LEAST_S)
        killed = False
        try:
            rc = proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed = True
            rc = None
            self._kill(proc, GRACE_S)
        except BaseException:
            self._kill(proc, 0)
            raise
        else:
            _signal_group(proc.pid, signal.SIGKILL)  # what it left running in its group
        self._procs.pop(proc.pid, None)
        return Outcome(rc, killed, killed and call_end < own_end, time.monotonic() - proc.began,
                       end - proc.began, proc.log)

    def run(self, cmd, log, limit_s, env=None, cwd=None, step=None):
        """Runs a command to its end or its limit (see wait()); step: the result line it is for,
        named as the one running in a summary written meanwhile or after a stop."""
        self.running = step
        outcome = self.wait(self.start(cmd, log, env=env, cwd=cwd), limit_s)
        self.running = None  # not on Stopped: the step it stopped in is noted as killed (paths.main)
        return outcome

    def output(self, cmd, limit_s, env=None):
        """A short command's output (stdout and stderr) and its Outcome. Through a file, not a
        pipe: a pipe kept open by a child left behind would make reading it wait forever."""
        log = self.out / ".output.log"
        outcome = self.run(cmd, log, limit_s, env=env)
        text = outcome.text()
        log.unlink(missing_ok=True)
        return text, outcome

    def _kill(self, proc, grace_s):
        if grace_s > 0:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=10)  # a process in uninterruptible sleep (a GPU driver call) may linger
        except subprocess.TimeoutExpired:
            print(f"gpu_check: pid {proc.pid} survived SIGKILL for 10 s; going on without it", flush=True)
        self._procs.pop(proc.pid, None)

    def kill(self, proc):
        """Kills a command started in the background (start()) at once, with its group."""
        self._kill(proc, 0)

    def kill_all(self):
        """Kills every command still running (background exports), at once."""
        for proc in list(self._procs.values()):
            self._kill(proc, 0)

    # ---- result lines -----------------------------------------------------------------------------
    def note(self, name, status, detail=""):
        """One step's result line; written and published at once."""
        detail = " ".join(str(detail).split())  # one line, no tabs
        self.lines.pop(name, None)  # a line noted again moves to the end, as it ran last
        self.lines[name] = (status, detail)
        self.mine.add(name)
        if status != SKIPPED:
            print(f"[{self.seconds():>4} s] {status}: {name}{': ' + detail if detail else ''}", flush=True)
        self.publish(logs=status != SKIPPED)

    def note_outcome(self, name, outcome, log_name="", ok_detail="", hint=None, failed_detail="", passed=None):
        """The line of a step that is one command: ok, killed (time) or FAILED (see log_name).
        passed: whether its check held (default: it exited 0); failed_detail: what a FAILED line
        says after the exit code. Returns whether it passed."""
        see = f"; see {log_name}" if log_name else ""
        passed = outcome.ok if passed is None else passed
        if passed:
            self.note(name, OK, ok_detail)
        elif outcome.killed:
            if outcome.by_deadline and hint:
                self.add_hint(hint, f"killed at the deadline ({name})")
            self.note(name, KILLED, killed_detail(outcome, self) + see)
        else:
            self.note(name, FAILED, f"exit {outcome.rc}" + (f", {failed_detail}" if failed_detail else "") + see)
        return passed

    def forget_earlier(self):
        """Drops the lines an earlier call left (its results were made by another build)."""
        self.lines = {name: line for name, line in self.lines.items() if name in self.mine}
        self.publish()

    def _read_lines(self):
        lines = {}
        steps = self.out / "steps.tsv"
        if steps.exists():
            for row in steps.read_text(errors="replace").splitlines():
                name, status, detail = (row.split("\t") + ["", ""])[:3]
                if name:
                    lines[name] = (status, detail)
        return lines

    # ---- what comes back --------------------------------------------------------------------------
    def summary(self):
        # A warm machine's earlier call left results this call reuses: their lines say so.
        rows = [(name, status, detail if name in self.mine else f"{detail} [an earlier call]".lstrip())
                for name, (status, detail) in self.lines.items()]
        head = f"{self.title}: {self.state} after {self.seconds()} s"
        if self.running and self.state == "in progress":
            head += f" (running: {self.running})"
        table, goals = report.runs_table(self.out, self.goal_models)
        text = [head, table]
        compared = report.compare_table(self.out)
        if compared:
            text.append(compared)
        text += [report.checks(rows), goals]
        if self.hints:
            text.append(not_reached(self.hints, self.hint_order))
        return "\n".join(text) + "\n"

    def publish(self, logs=True):
        """steps.tsv and summary.txt into the output folder, and with the profiles and (logs) the
        tarball of the folder into $OUT."""
        tsv = "".join(f"{name}\t{status}\t{detail}\n" for name, (status, detail) in self.lines.items())
        write_atomically(self.out / "steps.tsv", tsv)
        write_atomically(self.out / "summary.txt", self.summary())
        if not self.publish_to:
            return
        for name in ("steps.tsv", "summary.txt"):
            copy_atomically(self.out / name, self.publish_to / name)
        profiles = sorted((self.out / "profiles").glob("*.json"))
        if profiles:
            (self.publish_to / "profiles").mkdir(exist_ok=True)
            for path in profiles:
                copy_atomically(path, self.publish_to / "profiles" / path.name)
        if logs:
            self.pack_logs()

    def pack_logs(self):
        """$OUT/gpu_check.tar.gz: the output folder (every log and JSON)."""
        part = self.publish_to / ".gpu_check.tar.gz.part"
        with tarfile.open(part, "w:gz", compresslevel=6) as tar:
            for path in sorted(self.out.iterdir()):
                if not path.name.endswith(".part") and path.name != ".output.log":
                    tar.add(path, arcname=f"./{path.name}")
        os.replace(part, self.publish_to / "gpu_check.tar.gz")

    def finish(self, state="finished"):
        self.state = state
        self.running = None
        self.publish()


def killed_detail(outcome, runner):
    why = "the call's deadline" if outcome.by_deadline else "its limit"
    return f"after {outcome.seconds:.0f} s, {why} (at {runner.seconds()} s of the call)"


def not_reached(hints, order=()):
    """The last line when steps were skipped or killed for time: the call that runs them (the cold
    steps in the order given, else the stages), for a session that has device time left."""
    cold = [hint.split()[1] for hint in hints if hint.startswith("cold ")]
    if cold:
        cold.sort(key=lambda step: order.index(step) if step in order else len(order))
        return "not reached: scripts/gpu_check.sh cold " + " ".join(cold)
    return "not reached: " + "; ".join(f"scripts/gpu_check.sh {hint}" for hint in hints)


def install_signal_handlers():
    """SIGTERM and SIGINT raise Stopped in the main thread (see Runner.stop in paths.main)."""

    def stop(signum, _frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
