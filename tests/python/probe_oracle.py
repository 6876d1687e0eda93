# SPDX-License-Identifier: BSD-3-Clause
"""msprobe as the oracle of modhooks::probe (tests/probe_debugger_test.cpp, probe_program_test.cpp).

    probe_oracle.py models OUT            weights and inputs of the test models, as torch.save files,
                                           and each model scripted and traced
                                           (OUT/<model>_scripted.pt, <model>_traced.pt)
    probe_oracle.py program OUT BACKEND    the model "program" exported with hook points, compiled
                                           for BACKEND (aoti: OUT/program.pt2, executorch:
                                           OUT/program.pte), with its weights and inputs beside it;
                                           OUT is reused while this script, modhooks' Python
                                           package and torch stay the same (OUT/stamp)
    probe_oracle.py infer OUT MODEL CONFIG msprobe's own dump of MODEL's forward passes under
                                           no_grad, as a compiled program runs them (forward only:
                                           no backward entries)
    probe_oracle.py dump OUT MODEL CONFIG [SKEW]
                                           msprobe's own dump of MODEL's two training steps;
                                           with SKEW, of the model with one module computing
                                           otherwise (SKEWS)
    probe_oracle.py compare LIBTORCH OUT TARGET GOLDEN [TARGET GOLDEN ...]
                                           msprobe's compare of each pair of dump.json files;
                                           prints one line a row and fails on a row compare could
                                           not match or did not pass (compare itself passes those
                                           silently), or whose CRC, dtype, shape or
                                           requires_grad differ. LIBTORCH is the C++ side's
                                           version (2.15); where it is not this torch's, its
                                           kernels round otherwise, and a computed tensor's CRC
                                           (with md5's verdict on it) may differ
    probe_oracle.py marks LIBTORCH OUT TARGET GOLDEN SKEWED [TARGET GOLDEN SKEWED ...]
                                           msprobe's compare of each TARGET (a skewed C++ run)
                                           and of SKEWED (msprobe's dump of the same skew in
                                           Python) against GOLDEN; fails unless every TARGET row
                                           is matched and compare marks the same rows of both
                                           (their Result column equal); prints the first row
                                           not passed of each pair ("first marked: ...")

Exit status 77 where msprobe is not installed (the C++ test skips, saying so); 78 from `marks`
in md5 mode where LIBTORCH is not this torch's version (every computed CRC may differ).
"""
import concurrent.futures
import glob
import hashlib
import json
import os
import pathlib
import sys

import torch
from torch import nn

SKIP = 77
OTHER_KERNELS = 78
STEPS = 2


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))


class Nested(nn.Module):
    """A module called twice (`shared`), a user's class (`Block`) and a Sequential."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(3, 3)
        self.block = Block()
        self.seq = nn.Sequential(nn.Linear(3, 2), nn.ReLU())

    def forward(self, x):
        return self.seq(self.shared(self.block(self.shared(x))))


class Pair(nn.Module):
    """Returns a tuple."""

    def forward(self, x):
        return x * 2, x + 1


class Program(nn.Module):
    """What the compiled programs' test exports (`program`): a module called twice (`shared`), a
    user's class (`Block`), a tuple output (`pair`) and a Sequential; every submodule a point,
    on its inputs and its output, but `block.act` (its inputs only) and `seq.1` (its output
    only): output_points and input_points."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(3, 3)
        self.block = Block()
        self.pair = Pair()
        self.seq = nn.Sequential(nn.Linear(3, 2), nn.ReLU())

    def forward(self, x):
        u, v = self.pair(self.shared(self.block(self.shared(x))))
        return self.seq(u + v)


class InPlace(nn.Module):
    """torchvision ResNet's in-place operations on hooked modules' tensors: a ReLU(inplace=True)
    on a Linear's output, `out += identity` on another's, and the ReLU called twice."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        out = self.relu(self.fc1(x))
        out = self.fc2(out)
        out += x
        out = self.relu(out)
        return self.head(out)


MODELS = {"mlp": (MLP, 4), "nested": (Nested, 3), "program": (Program, 3), "inplace": (InPlace, 4)}


def output_points(name, module):
    """The modules whose output the program exports as a point: every submodule but `block.act`,
    whose record then has no output."""
    return name not in ("", "block.act")


def input_points(name, module):
    """The modules whose inputs the program exports as a point: every submodule but `seq.1`,
    whose record then has no inputs."""
    return name not in ("", "seq.1")


class SkewedReLU(nn.Module):
    """A port's bug: a module named ReLU that computes leaky_relu."""

    def forward(self, x):
        return nn.functional.leaky_relu(x, 0.1)


SkewedReLU.__name__ = "ReLU"  # msprobe names an entry after type(module).__name__


def skew_act(model):
    model.act = SkewedReLU()


def skew_weight(model):
    with torch.no_grad():
        model.block.fc.weight[0, 0] += 1e-2


# One module computing otherwise, applied after the weights are loaded; the C++ test does the same.
SKEWS = {"act": skew_act, "weight": skew_weight}


def fresh(name):
    """MODEL `name` with its weights, and its inputs, each step's: the same on every call."""
    cls, width = MODELS[name]
    torch.manual_seed(0)
    model = cls()
    inputs = {f"x{step}": torch.randn(5, width) for step in range(STEPS)}
    return model, inputs


def write_models(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("mlp", "nested", "inplace"):
        model, inputs = fresh(name)
        torch.save(model.state_dict(), out / f"{name}.pt")
        # The same model and weights scripted and traced, which the C++ test runs as a
        # TorchScript model against msprobe's eager run (msprobe cannot hook a ScriptModule).
        torch.jit.script(model).save(str(out / f"{name}_scripted.pt"))
        torch.jit.trace(model, inputs["x0"]).save(str(out / f"{name}_traced.pt"))
        torch.save(inputs, out / f"{name}_inputs.pt")


def program_stamp(backend):
    root = pathlib.Path(__file__).resolve().parent.parent.parent
    digest = hashlib.sha256(f"{torch.__version__} {backend}".encode())
    for path in [pathlib.Path(__file__)] + sorted((root / "python" / "modhooks").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def write_program(out, backend):
    """The model "program" exported with points as output_points and input_points say and
    compiled for `backend`, beside its weights and inputs (program.pt, program_inputs.pt);
    skipped where OUT's stamp says it is up to date."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "stamp"
    if stamp.exists() and stamp.read_text() == program_stamp(backend):
        print(f"{out}: up to date")
        return 0
    stamp.unlink(missing_ok=True)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent / "python"))
    import modhooks.export as mhx

    model, inputs = fresh("program")
    model.eval()
    torch.save(model.state_dict(), out / "program.pt")
    torch.save(inputs, out / "program_inputs.pt")
    ep = mhx.export(model, (inputs["x0"],), points=output_points, inputs=input_points,
                    backend=backend)
    if backend == "aoti":
        mhx.aoti_compile_and_package(ep, package_path=str(out / "program.pt2"))
    else:
        mhx.to_executorch(ep, str(out / "program.pte"))
    stamp.write_text(program_stamp(backend))
    print(f"{out}: {len(mhx.point_table(ep))} points")
    return 0


def train(model, inputs, debugger):
    """Two steps of SGD; the optimizer steps after debugger.step() (msprobe's md5 trap)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        debugger.start(model)
        loss = model(inputs[f"x{step}"]).pow(2).mean()
        loss.backward()
        debugger.stop()
        debugger.step()
        opt.step()
        opt.zero_grad()


class HookTimeExecutor(concurrent.futures.Executor):
    """Runs what is submitted at once, in the submitting thread."""

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: B036  (handed to the future, as a pool would)
            future.set_exception(e)
        return future


def crcs_at_hook_time():
    """msprobe 26.2.0 takes md5's CRCs on a thread pool from the live tensor, while its
    statistics are taken in the hook, so a CRC is of whatever the tensor holds when the pool gets
    to it: a module's input that the module then changes in place (ReLU(inplace=True)) hashed
    now before, now after the change; under DDP a gradient hashed now as the rank's own, now as
    the ranks' average DDP copies into it. Taking the CRCs in the hook, as the statistics are,
    makes them what the hook saw every time (what the statistics and the C++ run show)."""
    from msprobe.core.dump.data_dump.data_processor import pytorch_processor
    if hasattr(pytorch_processor, "ThreadPoolExecutor"):
        pytorch_processor.ThreadPoolExecutor = lambda *args, **kwargs: HookTimeExecutor()
    else:
        print("msprobe's pytorch_processor has no ThreadPoolExecutor: its CRCs may race")


def debugged(out, model_name, config_path):
    """The model of `model_name` with its weights, its inputs, and msprobe's debugger on
    config_path; None where msprobe is not installed."""
    try:
        from msprobe.pytorch import PrecisionDebugger
    except ImportError:
        print("msprobe (mindstudio-probe) is not installed")
        return None
    out = pathlib.Path(out)
    cls, _ = MODELS[model_name]
    model = cls()
    model.load_state_dict(torch.load(out / f"{model_name}.pt", weights_only=True))
    inputs = torch.load(out / f"{model_name}_inputs.pt", weights_only=True)
    config = json.loads(pathlib.Path(config_path).read_text())
    crcs_at_hook_time()
    debugger = PrecisionDebugger(config_path=str(config_path), dump_path=config["dump_path"])
    return model, inputs, debugger


def dump(out, model_name, config_path, skew=None):
    found = debugged(out, model_name, config_path)
    if found is None:
        return SKIP
    model, inputs, debugger = found
    if skew is not None:
        SKEWS[skew](model)
    train(model, inputs, debugger)
    return 0


def infer(out, model_name, config_path):
    """msprobe's dump of STEPS forward passes under no_grad, one a step: what a compiled program
    runs. The weights stay as loaded (no optimizer)."""
    found = debugged(out, model_name, config_path)
    if found is None:
        return SKIP
    model, inputs, debugger = found
    model.eval()
    for step in range(STEPS):
        debugger.start(model)
        with torch.no_grad():
            model(inputs[f"x{step}"])
        debugger.stop()
        debugger.step()
    return 0


def compare(libtorch, outdir, pairs):
    """msprobe's compare (`msprobe compare -tp TARGET -gp GOLDEN -o OUT` runs the same function),
    in this one process for every pair: importing msprobe once keeps the test short."""
    try:
        import pandas
        from msprobe.pytorch.compare.pt_compare import pt_compare
    except ImportError:
        print("msprobe (mindstudio-probe) is not installed")
        return SKIP
    bad = 0
    for n, (target, golden) in enumerate(pairs):
        table = run_compare(pt_compare, pandas, target, golden, os.path.join(outdir, f"compare{n}"))
        if table is None:
            bad += 1
            continue
        print(f"== {target} against {golden}")
        bad += check(table, same_kernels(libtorch)) + same_entries(target, golden)
    return 1 if bad else 0


def same_entries(target, golden):
    """compare's table has TARGET's rows only: an entry the C++ run missed would go unseen.
    Counts 1 unless both dumps hold the same entries in the same order."""
    names = [list(json.loads(pathlib.Path(p).read_text())["data"]) for p in (target, golden)]
    if names[0] == names[1]:
        return 0
    print(f"entries differ: only in the target {sorted(set(names[0]) - set(names[1]))}, only in "
          f"the golden run {sorted(set(names[1]) - set(names[0]))}, or in another order")
    return 1


def same_kernels(libtorch):
    return libtorch == ".".join(torch.__version__.split(".")[:2])


def run_compare(pt_compare, pandas, target, golden, out):
    """compare's table of TARGET against GOLDEN, or None where it wrote none."""
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "compare_result_*")):
        os.remove(old)
    pt_compare({"npu_path": target, "bench_path": golden, "is_print_compare_log": False}, out)
    results = glob.glob(os.path.join(out, "compare_result_*.csv"))
    if len(results) != 1:
        print(f"compare of {target} wrote no csv")
        return None
    return pandas.read_csv(results[0], keep_default_na=False, dtype=str)


def marks(libtorch, outdir, triples):
    """compare marks a skewed C++ run as it marks msprobe's run of the same skew in Python."""
    try:
        import pandas
        from msprobe.pytorch.compare.pt_compare import pt_compare
    except ImportError:
        print("msprobe (mindstudio-probe) is not installed")
        return SKIP
    bad = 0
    for n, (target, golden, skewed) in enumerate(triples):
        table = run_compare(pt_compare, pandas, target, golden, os.path.join(outdir, f"cpp{n}"))
        python = run_compare(pt_compare, pandas, skewed, golden, os.path.join(outdir, f"py{n}"))
        if table is None or python is None:
            bad += 1
            continue
        if "NPU MD5" in table.columns and not same_kernels(libtorch):
            print(f"libtorch {libtorch} is not torch {torch.__version__}: its kernels round "
                  "otherwise, and md5 marks every computed tensor")
            return OTHER_KERNELS
        # compare's verdicts near its thresholds follow the last bits, so they are compared only
        # where the C++ libtorch has Python's kernels; elsewhere every row must still match.
        same = same_kernels(libtorch)
        if not same:
            print(f"libtorch {libtorch} is not torch {torch.__version__}: its kernels round "
                  "otherwise, so the rows must match and their verdicts are not compared")
        print(f"== {target} and {skewed} against {golden}")
        expected = dict(zip(python["NPU Name"], python["Result"]))
        rows = 0
        for _, row in table.iterrows():
            line = f"{row['NPU Name']} | {row['Bench Name']} | {row['Result']}"
            problem = unmatched(row) or (
                f"python's {expected.get(row['NPU Name'])}"
                if same and expected.get(row["NPU Name"]) != row["Result"] else None)
            if problem:
                line += f"  <-- {problem}"
                bad += 1
            rows += 1
            print(line)
        if rows != len(python):
            print(f"{rows} rows, python's run has {len(python)}")
            bad += 1
        marked = table[table["Result"] != "pass"]
        print(f"first marked: {marked['NPU Name'].iloc[0] if len(marked) else 'none'}")
        python_marked = python[python["Result"] != "pass"]
        print(f"python's first marked: "
              f"{python_marked['NPU Name'].iloc[0] if len(python_marked) else 'none'}")
    return 1 if bad else 0


def unmatched(row):
    """Why compare could not have compared the row (it passes such rows), or None."""
    if row["Bench Name"] == "N/A":
        return "not matched"
    for column in ("Dtype", "Tensor Shape", "Requires_grad"):
        if row[f"NPU {column}"] != row[f"Bench {column}"]:
            return f"{column} differs"
    return None


def check(table, same_kernels):
    """Prints the table's rows; counts those compare could not match or did not pass. With
    other kernels than Python's (`same_kernels` false) a computed tensor's CRC may differ."""
    bad = 0
    for _, row in table.iterrows():
        verdict = row["Result"]
        line = f"{row['NPU Name']} | {row['Bench Name']} | {verdict}"
        if "NPU MD5" in table.columns:
            line += f" | {row['NPU MD5']} {row['BENCH MD5']}"
            if row["NPU MD5"] != row["BENCH MD5"]:
                verdict = "crc differs" if same_kernels else "pass"
                line += "" if same_kernels else "  (other kernels: not counted)"
        elif "Cosine" in table.columns:
            line += f" | cosine {row['Cosine']}"
            try:
                float(row["Cosine"])
            except ValueError:
                verdict = "no cosine"
        verdict = unmatched(row) or verdict
        if verdict != "pass":
            line += f"  <-- {verdict}"
            bad += 1
        print(line)
    print(f"{len(table)} rows, {bad} not matched or not pass")
    return bad + (1 if len(table) == 0 else 0)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "models":
        sys.exit(write_models(sys.argv[2]) or 0)
    if command == "program":
        sys.exit(write_program(sys.argv[2], sys.argv[3]))
    if command == "infer":
        sys.exit(infer(*sys.argv[2:5]))
    if command == "dump":
        sys.exit(dump(*sys.argv[2:6]))
    if command == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], list(zip(sys.argv[4::2], sys.argv[5::2]))))
    if command == "marks":
        sys.exit(marks(sys.argv[2], sys.argv[3], list(zip(*[iter(sys.argv[4:])] * 3))))
    sys.exit(f"unknown command {command}")
