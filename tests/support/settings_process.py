"""Python code run in a new process per environment, as `python -c CODE` would run it, for a
tenth of the CPU: a parent that has imported Django once forks a child for each run.

    with ForkingRunner(cwd=ROOT) as runner:
        result = runner.run(CODE, env={...})  # a subprocess.CompletedProcess

Each child is a process of its own: it takes the environment and working directory it is given,
imports crawlhub's modules (which read the environment) for the first time, and exits with 1 and
the traceback on stderr when the code raises, as `python -c` does. The parent imports only
third-party modules that read no environment at import, so nothing a child reads was decided
before it. A new interpreter costs 0.5 s of CPU (Django's import); a fork a few milliseconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import processes

# The parent: imports what every child needs and reads nothing of the environment, then runs one
# child per line of stdin ({"code", "env", "cwd", "stdout", "stderr"}) and answers its exit code.
PARENT = r"""
import json, os, sys, traceback
import django, django.conf, django.core.exceptions, dj_database_url, redis
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.environ.clear()
        os.environ.update(job["env"])
        os.chdir(job["cwd"])
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        code = 0
        try:
            exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (exit.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class ForkingRunner:
    def __init__(self, *, cwd: Path) -> None:
        self.cwd = cwd
        self.folder = Path(tempfile.mkdtemp(prefix="crawlhub-forking-"))
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ForkingRunner:
        # Started by a fixture wider than one test, which stops it (the guard still checks).
        self.proc = processes.spawn(
            [sys.executable, "-c", PARENT],
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            outlives_the_test=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"
        return self

    def run(self, code: str, *, env: dict[str, str]) -> subprocess.CompletedProcess:
        out, err = self.folder / "stdout", self.folder / "stderr"
        job = {
            "code": code,
            "env": env,
            "cwd": str(self.cwd),
            "stdout": str(out),
            "stderr": str(err),
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the forking parent ended ({self.proc.poll()})"
        return subprocess.CompletedProcess(
            ["python", "-c", code], int(answer), out.read_text(), err.read_text()
        )

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            processes.stop(self.proc)
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()
