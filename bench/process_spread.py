# SPDX-License-Identifier: BSD-3-Clause
"""Runs one Google Benchmark binary in several fresh processes and prints, for each case, one
counter's median over those processes with its lowest and highest value.

Why: on a real layer, what a hooked call adds over `forward` moves between processes of one
binary by more than the hooks cost (each process places its heap, stack and libraries at other
addresses), so one run's figure is one draw. Usage:

    python3 bench/process_spread.py BUILD/bench/call_bench --processes 10 \
        --filter 'Conv2d' [--counter added_median_us] [--no-aslr] [-- EXTRA BENCHMARK FLAGS]

Each process runs with `--benchmark_repetitions=3 --benchmark_report_aggregates_only=true` and
the counter is read from the repetitions' median, printed in ns when its name gives its unit
(`_us`, `_ns`) and as reported otherwise; `--no-aslr` runs each under `setarch -R`, to tell the
spread that addresses cause from the rest. Pin the runs yourself (`taskset -c 1 python3
...`): the processes inherit the affinity.
"""
import argparse
import json
import statistics
import subprocess
import sys

# A counter's unit is the end of its name (`added_median_us`, `firing_ns`); the others (`ratio`,
# `added_pct`) have none to convert.
NS_PER_UNIT = {"_us": 1000.0, "_ns": 1.0}


def one_process(args):
    command = [args.binary, f"--benchmark_filter={args.filter}", "--benchmark_format=json",
               "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
               f"--benchmark_min_time={args.min_time}", *args.extra]
    if args.no_aslr:
        command = ["setarch", "-R", *command]
    # Only stdout is the report: the benchmark's own errors (a flag it refuses) reach the terminal.
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    report = json.loads(done.stdout)
    values = {}
    for case in report["benchmarks"]:
        if case.get("aggregate_name") == "median" and args.counter in case:
            values[case["run_name"]] = case[args.counter]
    if not values:
        sys.exit(f"process_spread: no case matching {args.filter!r} reports {args.counter}")
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--filter", default=".")
    parser.add_argument("--counter", default="added_median_us")
    parser.add_argument("--min-time", default="0.2")
    parser.add_argument("--no-aslr", action="store_true")
    parser.add_argument("extra", nargs="*", help="more flags for the benchmark binary")
    args = parser.parse_intermixed_args()
    runs = [one_process(args) for _ in range(args.processes)]
    scale = next((f for unit, f in NS_PER_UNIT.items() if args.counter.endswith(unit)), None)
    width = max(len(name) for name in runs[0])
    print(f"{'case':{width}}  {args.counter} over {args.processes} processes: "
          f"median [lowest, highest], {'in ns' if scale else 'as reported'}")
    form = "7.1f" if scale else "7.4g"  # a ratio near 1 needs its digits
    for name in runs[0]:
        v = [run[name] * (scale or 1.0) for run in runs if name in run]
        print(f"{name:{width}}  {statistics.median(v):{form}} [{min(v):{form}}, {max(v):{form}}]")


if __name__ == "__main__":
    main()
