#!/usr/bin/env python3
"""Runs README.md's commands as a newcomer would, so the front door stays true.

Every command in a fenced ```sh block of README.md is run here as written,
in order, except:
- `make test` is the run this script is part of (CI runs `make test`);
- a command whose comment says `# illustrative` is skipped;
- placeholders are filled from what earlier commands printed: `rk_live_…`
  with the API key that `make demo` or `bootstrap` printed, `evt_…` with the
  id of the event the block posted;
- the database in the URLs is a fresh one made for this run (dropped after),
  so the machine's `relayops` database is not touched.

`make demo` and `cargo run -p relayops -- all` keep running: they are
started in the background and awaited until the API answers; each serves
the blocks after it until the next one starts or the README ends, and is then
stopped with SIGINT, as Ctrl-C would. Each `curl` must answer JSON
that is not a problem (status < 400); a posted event's deliveries must
settle as delivered. A command this script does not know fails the run: run
it here, or mark it `# illustrative`.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API = "http://127.0.0.1:8080"
LONG_RUNNING = ("make demo", "cargo run -p relayops -- all")


def fail(message):
    print(f"readme-tour: {message}", file=sys.stderr)
    sys.exit(1)


def blocks(markdown):
    """The commands of each ```sh block: continuation lines joined, comment-only lines dropped."""
    found, current, inside = [], None, False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if inside:
                found.append(current)
                inside = False
            elif stripped == "```sh":
                current, inside = [], True
            continue
        if not inside or not stripped or stripped.startswith("#"):
            continue
        if current and current[-1].endswith("\\"):
            current[-1] = current[-1][:-1].rstrip() + " " + stripped
        else:
            current.append(stripped)
    return found


def without_comment(command):
    """`command  # comment` -> (command, comment); a `#` inside quotes is kept."""
    quote = None
    for index, char in enumerate(command):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or command[index - 1].isspace()):
            return command[:index].rstrip(), command[index + 1 :].strip()
    return command, ""


def port_free(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def wait_ready(process, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            fail(f"exited with {process.returncode} before the API answered")
        try:
            with urllib.request.urlopen(f"{API}/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    fail(f"the API did not answer at {API} within {seconds} s")


class Tour:
    def __init__(self, database_url):
        self.database_url = database_url
        self.env = dict(os.environ, RELAYOPS_DATABASE_URL=database_url)
        self.values = {}
        self.background = []
        self.ran = 0

    def shell(self, command):
        """Runs `command` as the README's reader would: bash, in the checkout, with the tour's environment."""
        return subprocess.run(["bash", "-c", command], env=self.env, cwd=ROOT, capture_output=True, text=True)

    def fill(self, command):
        command = re.sub(r"postgres://[^\s'\"]*/relayops\b", self.database_url, command)
        for placeholder, name in (("rk_live_…", "key"), ("evt_…", "event")):
            if placeholder in command:
                if name not in self.values:
                    fail(f"`{command}` needs a {name} that no earlier command printed")
                command = command.replace(placeholder, self.values[name])
        return command

    def run(self, raw):
        command, comment = without_comment(raw)
        if "illustrative" in comment or command == "make test":
            return
        command = self.fill(command)
        self.ran += 1
        print(f"$ {command}", flush=True)
        assignment = re.fullmatch(r"(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\S+)", command)
        if assignment:
            self.env[assignment.group(1)] = assignment.group(2)
            return
        if command in LONG_RUNNING:
            self.start(command)
            return
        result = self.shell(command)
        if result.returncode != 0:
            fail(f"`{command}` exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
        self.read(command, result.stdout)

    def start(self, command):
        self.stop_background()  # what an earlier block left running ends first
        if not port_free(8080) or not port_free(8090):
            fail("ports 8080 and 8090 must be free for the README's commands (is a demo running?)")
        log = open(f"/tmp/relayops-readme-tour-{len(self.background)}.log", "w")
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log,
            text=True, start_new_session=True,
        )
        self.background.append(process)
        wait_ready(process)
        if command == "make demo":
            # The demo prints its key first and its console line last; the tour uses both.
            for line in process.stdout:
                print(f"  {line.rstrip()}")
                if key := re.search(r"rk_live_\w+", line):
                    self.values["key"] = key.group(0)
                if line.startswith("console:"):
                    break
            else:
                fail(f"`make demo` ended without printing the console's sign-in (log: {log.name})")

    def read(self, command, output):
        """Remembers what the tour needs later and checks each answer is not a problem."""
        if key := re.search(r"rk_live_\w+", output):
            self.values["key"] = key.group(0)
        if not command.startswith("curl"):
            return
        try:
            answer = json.loads(output)
        except json.JSONDecodeError:
            fail(f"`{command}` did not answer JSON: {output!r}")
        if isinstance(answer, dict) and isinstance(answer.get("status"), int) and answer["status"] >= 400:
            fail(f"`{command}` answered a problem: {answer}")
        if re.search(r"/v1/events\s", command) and " -d " in command:
            if not str(answer.get("id", "")).startswith("evt_"):
                fail(f"`{command}` answered no event id: {answer}")
            self.repeat_is_idempotent(command, answer)
            self.values["event"] = answer["id"]
        if re.search(r"/v1/events/evt_\w+/deliveries", command):
            self.await_settled(command, answer)

    def repeat_is_idempotent(self, command, first):
        """README: posting again with the same Idempotency-Key answers 200 with the original."""
        again = self.shell(command + " -o /dev/null -w '%{http_code}'")
        if again.stdout.strip() != "200":
            fail(f"posting {first['id']} again answered {again.stdout!r}, not 200")

    def await_settled(self, command, answer):
        """The event reaches the simulator: its deliveries settle, at least one delivered
        (the demo's endpoints include one answering 400 and one whose deliveries die)."""
        deadline = time.time() + 60
        while True:
            deliveries = answer.get("data") or []
            statuses = [d.get("status") for d in deliveries]
            if "delivered" in statuses and all(s in ("delivered", "failed", "dead") for s in statuses):
                print(f"  deliveries settled: {', '.join(statuses)}")
                return
            if time.time() > deadline:
                fail(f"the event's deliveries did not settle with one delivered within 60 s: {answer}")
            time.sleep(0.5)
            answer = json.loads(self.shell(command).stdout)

    def stop_background(self):
        for process in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    fail("a long-running README command did not stop on Ctrl-C within 30 s")
        self.background.clear()
        for _ in range(100):
            if port_free(8080) and port_free(8090):
                return
            time.sleep(0.1)
        fail("ports 8080/8090 still taken after the README's processes stopped")


def main():
    base_url = os.environ.get("RELAYOPS_DATABASE_URL", "postgres://relayops:relayops@127.0.0.1:5432/relayops")
    database = f"relayops_readme_tour_{os.getpid()}"
    database_url = base_url.rsplit("/", 1)[0] + "/" + database
    subprocess.run(["psql", base_url, "-qc", f'CREATE DATABASE "{database}"'], check=True)
    tour = Tour(database_url)
    try:
        commands = blocks((ROOT / "README.md").read_text())
        if not commands:
            fail("README.md has no ```sh blocks")
        # What a block starts serves the blocks after it, until another
        # long-running command starts or the README ends.
        for block in commands:
            for command in block:
                tour.run(command)
        tour.stop_background()
    finally:
        for process in tour.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        subprocess.run(["psql", base_url, "-qc", f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'])
    print(f"readme-tour: {tour.ran} README commands ran as written")


if __name__ == "__main__":
    main()
