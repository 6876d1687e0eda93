# SPDX-License-Identifier: BSD-3-Clause
"""Writes docs/performance.md from one run of the benchmarks: `bash scripts/perf-table.sh`
builds them and calls this with the build folder.

    python3 bench/perf_page.py BUILD OUT.md [--processes N] [--filter REGEX] [--no-python]
                               [--sections REGEX]

Every C++ case is timed in alternation with its baseline (bench/paired.h). The call-hook cases
(`call_bench`) are run in N fresh processes (10 by default) and given as the median over them,
with the lowest and highest process; `jit_bench`, `aoti_bench` and `executorch_bench` in 5; the others in one process
of 5 repetitions. The Python scripts that time Python's side of the same cases follow, as they
print it; then the probe's two benchmarks, which time their own baselines (`modhooks::probe`'s
section). `--filter` keeps the C++ cases whose name matches (for a quick try of the page).
`--sections` runs only the sections whose title matches and puts them in place of those of
OUT.md, which must exist: each such section names its own run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (binary, processes: None for "the call-hook count", title, what the page says of it)
BENCHES = [
    ("call_bench", None, "Call hooks",
     "`modhooks::call` on `torch::nn` modules with each combination of hooks, against `forward` "
     "or against the hand-written floor the case names."),
    ("jit_bench", 5, "TorchScript modules",
     "`call` and inner hooks on a TorchScript model, against its `forward` without hooks."),
    ("aoti_bench", 5, "AOTInductor points",
     "Packages exported with points (`bench/aoti_bench.py`), against the same model compiled "
     "without points; `firing_ns` is the time added per point that fires."),
    ("executorch_bench", 5, "ExecuTorch points",
     "Programs exported with points (`bench/executorch_bench.py`), against the same model "
     "exported without points, with ExecuTorch's kernels and with XNNPACK; `firing_ns` is the "
     "time added per point that fires."),
    ("grad_bench", 1, "Gradient hooks (`modhooks::grad`)",
     "The device layer's gradient hooks, against the same operation written by hand."),
    ("nn_utils_bench", 1, "nn utils",
     "`weight_norm`, `spectral_norm`, parametrizations and pruning through hooks, against the "
     "same computation written by hand."),
    ("state_bench", 1, "State dicts and checkpoint files",
     "`state_dict`, `load_state_dict`, `load` and CRC-32 checks, against a `copy_` loop, a "
     "`memcpy` or a plain read of the same bytes."),
    ("model_io_bench", 1, "`load_model` and `save_model`",
     "Loads of 1 GiB files straight into a model, against reading the file and a `copy_` loop."),
]
# Python's side, each printing one line a case with its own baseline: (script, its arguments,
# whether it runs before the C++ benchmarks). python_state_bench.py writes the torch.save file
# state_bench loads; python_model_io_bench.py loads the files model_io_bench writes.
PYTHON = [
    ("python_state_bench.py", ["{checkpoint}"], True),
    ("python_hooks_bench.py", [], False),
    ("nn_utils_bench.py", [], False),
    ("python_model_io_bench.py", ["{bench_dir}"], False),
]
PAIRED = ("baseline_us", "measured_us", "added_us", "added_pct", "added_median_us")


def run_binary(binary: pathlib.Path, case_filter: str, repetitions: int) -> dict[str, dict]:
    """One process: each case's median aggregate, its counters by name."""
    done = subprocess.run(
        [str(binary), f"--benchmark_filter={case_filter}", "--benchmark_format=json",
         f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
         "--benchmark_min_time=0.2"],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if "Failed to match any benchmarks" in done.stderr:
        return {}
    sys.stderr.write(done.stderr)
    cases = {}
    for case in json.loads(done.stdout)["benchmarks"]:
        if case.get("aggregate_name") == "median":
            cases[case["run_name"]] = case
    return cases


def us(value: float) -> str:
    """A time given in microseconds, in the unit that reads best."""
    if abs(value) >= 1000:
        return f"{value / 1000:.3g} ms"
    if abs(value) >= 1:
        return f"{value:.3g} us"
    return f"{value * 1000:.3g} ns"


def signed(value: float) -> str:
    return ("+" if value >= 0 else "-") + us(abs(value))


def table(processes: list[dict[str, dict]]) -> list[str]:
    rows = ["| case | baseline | modhooks | added | other counters |", "| --- | --- | --- | --- | --- |"]
    spread = len(processes) > 1
    for name, first in processes[0].items():
        seen = [p[name] for p in processes if name in p]

        def median(counter: str) -> float:
            return statistics.median(case[counter] for case in seen)

        baseline = us(median("baseline_us")) if "baseline_us" in first else ""
        measured = us(median("measured_us")) if "measured_us" in first else ""
        counter = "added_median_us" if "added_median_us" in first else "added_us"
        added = ""
        if counter in first:
            values = [case[counter] for case in seen]
            added = signed(statistics.median(values))
            if spread:
                added += f" [{signed(min(values))}, {signed(max(values))}]"
            if "added_pct" in first:
                added += f" ({median('added_pct'):+.1f}%)"
        others = ", ".join(
            f"{key} {statistics.median(case[key] for case in seen):.4g}"
            for key, value in first.items()
            if isinstance(value, (int, float)) and key not in PAIRED and key[0].islower()
            and key not in ("iterations", "real_time", "cpu_time", "repetitions",
                            "repetition_index", "threads", "family_index",
                            "per_family_instance_index"))
        rows.append(f"| `{name}` | {baseline} | {measured} | {added} | {others} |")
    return rows


PROBE_TITLE = "Precision dumps (`modhooks::probe`)"
PYTHON_TITLE = "## Python, for comparison"


def probe_section(build: pathlib.Path, bench_dir: pathlib.Path) -> list[str]:
    """resnet18's step with the statistics dump beside msprobe's (bench/probe_step_bench.py, which
    alternates the C++ and the Python launches), and task "tensor"'s write rate beside a plain
    write (probe_write_bench, on every core: its files are written by a thread of their own)."""
    step_bin, write_bin = build / "bench" / "probe_step_bench", build / "bench" / "probe_write_bench"
    if not step_bin.exists():
        return ["", f"## {PROBE_TITLE}", "", "Not built here (`probe_step_bench`): its component is off."]
    print("perf_page: probe_step_bench.py, 3 launches a language", file=sys.stderr, flush=True)
    figures = bench_dir / "probe_step.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "probe_step_bench.py"), "--binary",
                    str(step_bin), "--dir", str(bench_dir / "probe_step"), "--launches", "3",
                    "--json", str(figures)], check=True, stdout=subprocess.DEVNULL)
    step = json.loads(figures.read_text())
    cpp, python = step["cpp"], step["python"]
    rows = ["| case | baseline | modhooks | added | beside it |", "| --- | --- | --- | --- | --- |",
            f"| resnet18 training step, task `statistics` | {us(cpp['plain_ms'] * 1e3)} | "
            f"{us(cpp['dump_ms'] * 1e3)} | {signed((cpp['dump_ms'] - cpp['plain_ms']) * 1e3)} | "
            f"msprobe adds {signed((python['dump_ms'] - python['plain_ms']) * 1e3)} to Python's "
            f"{us(python['plain_ms'] * 1e3)}: modhooks adds {step['ratio']:.2f} of it "
            f"(goal {step['goal']}) |"]
    if write_bin.exists():
        print("perf_page: probe_write_bench, every core", file=sys.stderr, flush=True)
        done = subprocess.run([str(write_bin), str(bench_dir / "probe_write"), "8"], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, range(os.cpu_count())))
        w = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            f"| task `tensor`, {w['files']} files of {w['bytes'] / 1e6:.1f} MB a step | plain write "
            f"{w['plain_MBps']:,.0f} MB/s | {w['dump_MBps']:,.0f} MB/s | {w['ratio']:.2f}x (goal "
            f"{w['goal']}x) | {w['dump_holds_bytes'] / 1e6:.1f} MB held beside the model (bound "
            f"{w['max_pending_bytes'] / 2**20:.0f} MiB) |")
    return ["", f"## {PROBE_TITLE}", "",
            "torchvision's resnet18 (batch 8x3x64x64, SGD) stepped with the statistics dump, against "
            "the same step without it in the same process, and msprobe's dump of the same step in "
            "Python against Python's step (`bench/probe_step_bench.py`, median over 3 launches a "
            "language, alternating); task `tensor`'s files for 8 Linear(512, 512) layers against "
            "writing the same bytes with `fwrite` (`probe_write_bench`, one process, 8 rounds, on "
            "every core: the dump writes on a thread of its own).", "", *rows]


def replace_sections(page: list[str], sections: list[str]) -> list[str]:
    """`page` with each "## " section of `sections` in place of its namesake, a new one before
    Python's section (where a whole run puts it) or at the end."""
    def split(lines: list[str]) -> dict[str, list[str]]:
        parts, title = {"": []}, ""
        for line in lines:
            if line.startswith("## "):
                title = line
                parts[title] = []
            parts[title].append(line)
        return parts

    parts, new = split(page), split(sections)
    new.pop("")
    python = parts.pop(PYTHON_TITLE, None)  # last on a whole run's page too
    for title, lines in new.items():
        parts[title] = lines
    if python is not None:
        parts[PYTHON_TITLE] = python
    out: list[str] = []
    for lines in parts.values():
        while lines and not lines[-1]:
            lines = lines[:-1]
        out += lines + [""]
    return out


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo")
                  if line.startswith("MemTotal")) / 2**20
    return f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB, Linux {platform.release()}"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=pathlib.Path)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--filter", default=".")
    parser.add_argument("--no-python", action="store_true")
    parser.add_argument("--sections", help="only the sections whose title matches, into OUT")
    args = parser.parse_args()
    bench = args.build / "bench"
    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with local changes"
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], check=True,
        stdout=subprocess.PIPE, text=True).stdout.strip()
    affinity = sorted(os.sched_getaffinity(0))
    date = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    page = [
        "# Performance", "",
        "<!-- Written by scripts/perf-table.sh (bench/perf_page.py); edit those, not this page. -->",
        "",
        "What modhooks costs, each figure beside the baseline timed with it. Every table below is "
        "from one run of `bash scripts/perf-table.sh`, unless its section names a later run of "
        "that section alone:", "",
        f"- date: {date};",
        f"- commit: {commit}; torch {torch_version}, on the CPU;",
        f"- machine: {machine()}; one intra-op thread, on CPU core(s) "
        f"{', '.join(map(str, affinity))}.", "",
        "## How it is measured", "",
        "- **In alternation.** Each case is timed in alternation with its baseline in the same "
        "process (`bench/paired.h`: the order flips every iteration), so that a shared machine's "
        "drift hits both alike. Compare a row with its own baseline only.",
        "- **Columns.** *baseline* and *modhooks* are the median time of one call (or load) of "
        "each; *added* is what modhooks adds: for the call hooks, the median over iterations of "
        "what a batch took more than the batch of the baseline beside it, per call "
        "(`added_median_us`), else the difference of the means (`added_us`), with the ratio in "
        "per cent where the case reports it.",
        "- **Across processes.** Between processes of one binary, a real layer's hooked call moves "
        "by more than the hooks cost (each process places its code and data at other addresses). "
        "The call hooks are therefore the median over several fresh processes, with the lowest "
        "and highest process in brackets; the other tables are one process, 5 repetitions, "
        "medians.",
        "- **Floors.** Cases ending in `_vs_HandWritten` or `_vs_IdentityFloor` are timed "
        "against a hand-written equivalent (two no-op callbacks called by hand after `forward`; a "
        "bare identity autograd node on each side of each layer): what any mechanism must pay. "
        "What a case adds over its floor is modhooks' own.",
        "- **Names.** A case's name says what runs and, after `_vs_`, its baseline; "
        "`grad:1` is grad mode on, `grad:0` off. `bench/*.cpp` holds each case.", "",
        "To rerun one case: `taskset -c 1 python3 bench/process_spread.py build/bench/call_bench "
        "--processes 10 --filter 'Conv2d'`.",
    ]
    values = {"checkpoint": os.environ.get("MODHOOKS_BENCH_CHECKPOINT", ""),
              "bench_dir": os.environ.get("MODHOOKS_BENCH_DIR", "")}
    python_lines: dict[str, list[str]] = {}

    def run_python(before: bool) -> None:
        for script, script_args, first in PYTHON:
            if args.no_python or first != before:
                continue
            print(f"perf_page: {script}", file=sys.stderr, flush=True)
            done = subprocess.run(
                [sys.executable, str(ROOT / "bench" / script),
                 *(a.format(**values) for a in script_args)],
                check=True, stdout=subprocess.PIPE, text=True)
            python_lines[script] = [line for line in done.stdout.splitlines()
                                    if line.startswith("python ")]

    wanted = re.compile(args.sections) if args.sections else None
    if wanted:
        args.no_python = True
    run_python(before=True)
    for binary, processes, title, what in BENCHES:
        if wanted and not wanted.search(title):
            continue
        path = bench / binary
        if not path.exists():
            page += ["", f"## {title}", "", f"Not built here (`{binary}`): its component is off."]
            continue
        count = processes or args.processes
        print(f"perf_page: {binary}, {count} process(es)", file=sys.stderr, flush=True)
        runs = [run_binary(path, args.filter, 3 if count > 1 else 5)]
        if not runs[0]:
            continue
        runs += [run_binary(path, args.filter, 3 if count > 1 else 5) for _ in range(count - 1)]
        label = (f"median over {count} processes [lowest, highest]" if count > 1
                 else "one process, median of 5 repetitions")
        page += ["", f"## {title}", "", f"{what} `{binary}`, {label}.", "", *table(runs)]
    run_python(before=False)
    if not wanted or wanted.search(PROBE_TITLE):
        page += probe_section(args.build, pathlib.Path(values["bench_dir"] or args.build / "bench"))
    if python_lines:
        page += ["", PYTHON_TITLE, "",
                 "Python's side of the same cases, on the same machine in the same run, each line "
                 "as the script prints it, with its own baseline.", "", "```text"]
        for script, _, _ in PYTHON:
            page += python_lines.get(script, [])
        page += ["```"]
    if wanted:
        header = page.index("## How it is measured")
        stamp = (f"_This section is from a later run (`perf-table.sh --sections "
                 f"'{args.sections}'`): {date}, commit {commit}, {machine()}._")
        body: list[str] = []
        for line in page[header + 1:]:
            body.append(line)
            if line.startswith("## "):
                body += ["", stamp]
        intro = next(line for line in page if line.startswith("What modhooks costs"))
        page = [intro if line.startswith("What modhooks costs") else line
                for line in replace_sections(args.out.read_text().splitlines(), body)]
    args.out.write_text("\n".join(page).rstrip("\n") + "\n")
    print(f"perf_page: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
