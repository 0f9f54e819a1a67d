"""One benchmark script of two checkouts, run in interleaved rounds (not a test): prints numbers.

    uv run python bench/compare.py BASE_DIR [--script runtime.py] [--rounds 4]
                                   [--args="--store memory"] [--base-args=""]

Runs BASE_DIR/bench/SCRIPT in BASE_DIR's own environment (`uv run --frozen` there: its code,
its lock file) and this checkout's bench/SCRIPT here, alternately (base, this, this, base,
base, ...: each side runs first as often as second), `--rounds` times each. A shared machine's
speed drifts over minutes, so only rounds taken side by side compare; the ratio of medians is
the number to read. `--args` go to this checkout's script, `--base-args` to the base's
(default: the same as `--args`); write them with "=" (`--args=--skip-startup`).

Every output line of the script is a row. Numbers that never change (labels such as "200
tasks") are printed as they are; each other number as base -> this: the median of the rounds
and their range, then this/base of the medians. Rows missing from some run are listed last.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
# A script's verdict on its own target flips between runs; rows compare without it.
VERDICT = re.compile(r"\s*\((?:target met|TARGET MISSED)\)")

Row = tuple[str, int]  # (the line with its numbers as "#", which occurrence of that line)


def uv_command() -> list[str]:
    uv = shutil.which("uv")
    return [uv] if uv else [sys.executable, "-m", "uv"]


def run_side(checkout: Path, script: str, args: list[str]) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    start = time.perf_counter()
    done = subprocess.run(
        [*uv_command(), "run", "--frozen", "python", f"bench/{script}", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"{checkout}/bench/{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout, time.perf_counter() - start


def rows_of(output: str) -> dict[Row, tuple[str, list[float]]]:
    """Each non-empty line as a row: its first text (for the literal numbers) and numbers."""
    rows: dict[Row, tuple[str, list[float]]] = {}
    seen: dict[str, int] = {}
    for raw in output.splitlines():
        # Column padding depends on the numbers' widths: rows compare without it.
        line = " ".join(VERDICT.sub("", raw).split())
        if not line:
            continue
        template = NUMBER.sub("#", line)
        index = seen.get(template, 0)
        seen[template] = index + 1
        rows[(template, index)] = (line, [float(n) for n in NUMBER.findall(line)])
    return rows


def describe(values: list[float]) -> str:
    return f"{statistics.median(values):g} [{min(values):g}..{max(values):g}]"


def merge(template: str, first: str, base: list[list[float]], this: list[list[float]]) -> str:
    literal = NUMBER.findall(first)
    parts = template.split("#")
    out = [parts[0]]
    for slot, text in enumerate(parts[1:]):
        b = [numbers[slot] for numbers in base]
        t = [numbers[slot] for numbers in this]
        if len(set(b + t)) == 1:
            out.append(literal[slot])
        else:
            ratio = statistics.median(t) / statistics.median(b) if statistics.median(b) else 0.0
            out.append(f"{{{describe(b)} -> {describe(t)}, x{ratio:.2f}}}")
        out.append(text)
    return "".join(out)


def uptime() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("base_dir", type=Path, help="the other checkout (its own uv.lock)")
    parser.add_argument("--script", default="runtime.py", help="a script under bench/")
    parser.add_argument("--rounds", type=int, default=4, help="runs per side")
    parser.add_argument("--args", default="", help="arguments for this checkout's script")
    parser.add_argument("--base-args", default=None, help="for the base's (default: --args)")
    args = parser.parse_args()
    base_dir = args.base_dir.resolve()
    if not (base_dir / "bench" / args.script).is_file():
        sys.exit(f"{base_dir}/bench/{args.script} does not exist")
    this_args = shlex.split(args.args)
    base_args = this_args if args.base_args is None else shlex.split(args.base_args)
    sides = {"base": (base_dir, base_args), "this": (HERE.parent, this_args)}
    outputs: dict[str, list[dict[Row, tuple[str, list[float]]]]] = {"base": [], "this": []}
    print(f"{args.script}: base {base_dir} {base_args}, this {HERE.parent} {this_args}")
    print(f"load average (1, 5, 15 min) at the start: {uptime()}")
    for round_no in range(args.rounds):
        order = ("base", "this") if round_no % 2 == 0 else ("this", "base")
        for side in order:
            checkout, script_args = sides[side]
            output, seconds = run_side(checkout, args.script, script_args)
            outputs[side].append(rows_of(output))
            print(f"  round {round_no + 1} {side}: {seconds:.0f} s, load {uptime()}", flush=True)
    print(f"load average at the end: {uptime()}\n")
    common = [row for row in outputs["this"][0] if all(row in run for run in outputs["base"])]
    common = [row for row in common if all(row in run for run in outputs["this"])]
    for row in common:
        template, _ = row
        first = outputs["this"][0][row][0]
        base = [run[row][1] for run in outputs["base"]]
        this = [run[row][1] for run in outputs["this"]]
        print(merge(template, first, base, this))
    for side in ("base", "this"):
        partial = {row for run in outputs[side] for row in run} - set(common)
        for template, _ in sorted(partial):
            print(f"[not in every run; {side}] {template}")


if __name__ == "__main__":
    main()
