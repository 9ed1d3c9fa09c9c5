"""``python -m harness [overrides]``: the Hydra entry point (``-m`` for multirun sweeps). A sweep runs every job
even when some fail; the process exits with the worst job's code: 0 ok, 1 a run failed or stalled, 2 bad input,
128 + the signal's number when interrupted (130 Ctrl-C, 143 SIGTERM; it also stops the sweep)."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from .signals import (
    AT_ONCE,
    as_interrupt,
    exit_interrupted,
    install,
    interrupted_code,
    interrupted_line,
    outlive_stdout_reader,
)

if __name__ == "__main__":
    install()  # the signal handlers first: Ctrl-C, SIGTERM, SIGHUP end even the imports below (exit 130, 143, 129)
    outlive_stdout_reader()  # before Hydra's log handler takes sys.stdout
    # `kill -USR1 <pid>`: every thread's stack to stderr, and go on, from here on (torchrun's ranks too; spawned
    # workers take it once started: runtime/launch.py); ignored, never fatal, once exit unregisters faulthandler
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
import hydra  # a stop signal from here until the first job exits at once, in one line (signals.AT_ONCE)
from omegaconf import DictConfig

from . import preflight
from .conf_paths import CONF_DIR, task_overrides

EXIT_CODES: list[int] = []
FAILED_JOBS: list[str] = []  # a sweep's jobs that did not exit 0, for its summary
STOPPED_AFTER: list[str] = []  # a stop signal once the jobs were done (shutdown, summary): not a job's exit


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """One Hydra job: run it and record its exit code (130: Ctrl-C)."""
    AT_ONCE.clear()  # set by the checks, through Hydra's composition: a stop signal now stops the job in order
    try:
        from .app import run_job

        code = run_job(cfg)
    except BaseException as e:  # before a run could write its row (imports, materialising the preset)
        if not isinstance(as_interrupt(e), KeyboardInterrupt):
            raise
        print(interrupted_line(), file=sys.stderr)
        code = 130
    EXIT_CODES.append(code)
    if code:  # the exit code the shell sees: an interruption (130 here) exits 128 + the first stop signal's number
        shell_code = interrupted_code() if code == 130 else code
        FAILED_JOBS.append(f"job {len(EXIT_CODES) - 1} (exit {shell_code}): {' '.join(task_overrides())}")
    if code == 130:
        sys.exit(130)


def release_engine() -> None:
    """Shut the sweep's kept engine down; a stop signal during it ends the run as interrupted, in one line."""
    # only an imported engine cache holds an engine; importing it now could re-import an interrupted torch
    try:
        if "harness.engine_cache" in sys.modules:
            sys.modules["harness.engine_cache"].release()
    except KeyboardInterrupt:
        stopped_after_the_jobs()


def stopped_after_the_jobs() -> None:
    """A stop signal after the last job (its engine's shutdown, the sweep's summary): said once, exits 128 + N."""
    if 130 not in EXIT_CODES and not STOPPED_AFTER:
        print(interrupted_line(), file=sys.stderr)
    STOPPED_AFTER.append("stopped")


if __name__ == "__main__":
    problem, sys.argv[1:] = preflight.check_command(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
    except KeyboardInterrupt:  # while Hydra composes the configuration
        print(interrupted_line(), file=sys.stderr)
        EXIT_CODES.append(130)
    except SystemExit as e:  # a job's 130 (it stops a sweep: recorded), or Hydra's own error exit
        if e.code != 130:
            if not isinstance(as_interrupt(e), KeyboardInterrupt):
                raise
            print(interrupted_line(), file=sys.stderr)  # Hydra reported what a stop signal broke as its error
            EXIT_CODES.append(130)
    finally:
        release_engine()
        # rank 0 writes the rows, the others serve it; an interrupted sweep sums up the jobs it finished
        sweep = "-m" in sys.argv or "--multirun" in sys.argv
        report = sys.modules.get("harness.report")  # repeats of one job: their medians and spread too
        repeats = report is not None and len(report.SWEEP_ROWS) > 1
        if (len(EXIT_CODES) > 1 or repeats or (sweep and 130 in EXIT_CODES)) and os.environ.get("RANK", "0") == "0":
            try:
                from .analyze import print_sweep_summary
                from .report import SWEEP_ROWS

                print_sweep_summary(SWEEP_ROWS, len(EXIT_CODES), 130 in EXIT_CODES, len(FAILED_JOBS))
                for line in FAILED_JOBS:
                    print(f"  not ok: {line}")
                if 130 in EXIT_CODES:
                    stopped = EXIT_CODES.index(130)
                    after = preflight.JOB_COUNT - stopped - 1
                    print(f"  the sweep stopped at job {stopped}" + (f": the {after} job(s) after it did not run"
                                                                     if after > 0 else " (its last job)"))
            except KeyboardInterrupt:  # the summary is cut short; the signal still decides the exit code
                stopped_after_the_jobs()
            except ImportError:  # one that a stop signal broke
                pass
    if 130 in EXIT_CODES or STOPPED_AFTER:
        exit_interrupted()
    sys.exit(max(EXIT_CODES, default=0))
