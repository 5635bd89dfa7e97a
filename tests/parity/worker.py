#!/usr/bin/env python3
"""Runs parity cases, one after another, in one Python process (tests/parity/run_parity.sh).

Usage:  worker.py TMP

TMP/cases lists the cases, a line each: the case's name and the trainer's command, separated
by tabs. A worker takes the next case no worker has taken (it makes the directory
TMP/NAME.taken: one worker gets it), and for that case does what the three steps of
README.md do: the trainer's dump (a child process), reference.py on it and compare.py's
table, both called here, not as programs. Several workers share one list.

Why one process: a case's Python side was three programs, each importing JAX or numpy
again (1-2 s of a core each time), and the reference's element-wise operations, compiled
once per process, were compiled again for every case. In one process the cases take about a
quarter less CPU (make parity on 2 cores: 281 s where it took 368). The numbers are the same:
the same functions, compiled by the same XLA.

Each case writes TMP/NAME.out (everything it printed, the C and JAX sides' messages too),
TMP/NAME.losses (the step-0 loss of C and of JAX) and, last, TMP/NAME.result: "PASS seconds",
"FAIL reason", or "LATE" when the run's clock had passed PARITY_SECONDS (counted from
PARITY_START, a time.time()) before the case could start.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reference  # noqa: E402  (sets XLA's flags before JAX is imported)
import compare  # noqa: E402
import long_run  # noqa: E402
import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402


def count_drops(dump):
    """The (token, slot) assignments that capacity dropping removes in step 0 of a dump, from
    the C side's router choices (docs/model.md#dense-path-and-capacity-dropping): a capacity
    case must drop some, or it does not test dropping."""
    with safe_open(dump, framework="numpy") as f:
        cfg = json.loads(f.metadata()["config"])
        idx = [f.get_tensor(k) for k in f.keys() if k.startswith("c/router/") and k.endswith("/indices")]
    E, K, S, cf = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["max_target_length"], cfg["capacity_factor"]
    cap = int(max(math.ceil(S * K / E) * cf, cf))
    dropped = total = 0
    for a in idx:  # [A*B, S, K] per MoE layer
        for seq in a:
            counts = np.bincount(seq.reshape(-1), minlength=E)
            dropped += int(np.sum(np.maximum(counts - cap, 0)))
            total += seq.size
    print(f"capacity {cap} per expert and sequence: {dropped} of {total} assignments dropped in step 0")
    return dropped > 0


def run_case(tmp, name, command):
    """One case, start to end; returns its result line."""
    d = os.path.join(tmp, name)
    print(f"== {name}: {' '.join(command)}")
    log = os.path.join(tmp, name + ".train.log")
    with open(log, "w") as f:
        rc = subprocess.call(command + [f"dump_parity={d}"], stdout=f, stderr=subprocess.STDOUT)
    lines = open(log, errors="replace").read().splitlines()
    if rc != 0:
        print("\n".join(lines[-5:]))
        return f"FAIL {command[0]} failed"
    said = [x for x in lines if x.startswith("parity step") or x.startswith("wrote")]
    for x in said[:1] + said[1:][-1:]:
        print(x)
    dump, out = os.path.join(d, "dump.safetensors"), os.path.join(d, "jax.safetensors")
    if "parity_snapshots=false" in command:
        return long_case(tmp, name, command, dump)
    if "capacity" in name and not count_drops(dump):
        return "FAIL no assignment was dropped: lower capacity_factor"
    sys.stdout.flush()
    try:
        reference.main([dump, out])
    except Exception:
        traceback.print_exc(file=sys.stdout)
        return "FAIL reference.py failed"
    # the step-0 losses of both sides, for run_parity.sh's float32_weight_sum comparison
    with safe_open(dump, framework="numpy") as c, safe_open(out, framework="numpy") as j:
        losses = f"{float(c.get_tensor('c/loss'))} {float(j.get_tensor('jax/loss'))}"
    with open(os.path.join(tmp, name + ".losses"), "w") as f:
        print(losses, file=f)
    if compare.main([dump, out, "--case", name]) != 0:
        return "FAIL compare.py: tensors beyond tolerance, see the table"
    shutil.rmtree(d, ignore_errors=True)
    return "PASS"


# A long case's bound on each step's relative loss difference: the free-running bound of the
# 10-step cases (compare.py), over six times the steps. Measured (deepseek-tiny, the parity
# shapes, 60 steps, 2026-12-08, Intel Xeon with AVX-512): at most 4.6e-7 under this run's XLA
# level 0 and 3.7e-7 under XLA's default, where JAX's own trajectory moved 2.3e-7 under
# one-float32-ulp noise on its gradients (long_run.py's control).
LONG_STEP_BOUND = 1e-4


def long_case(tmp, name, command, dump):
    """A case of the free-running trajectory alone (parity_snapshots=false): the dump's step
    losses are a training run's of the same command, bit for bit (its metrics file), and
    long_run.py's JAX trajectory keeps every step's loss within LONG_STEP_BOUND of C's."""
    metrics = os.path.join(tmp, name + ".metrics.jsonl")
    train = [x for x in command if not x.startswith("parity_")] + [f"metrics_file={metrics}", "eval_interval=0",
                                                                    "sample_length=0"]
    with open(os.path.join(tmp, name + ".train2.log"), "w") as f:
        if subprocess.call(train, stdout=f, stderr=subprocess.STDOUT) != 0:
            return f"FAIL the training run of the same config failed: {' '.join(train)}"
    run_bits = [int(json.loads(x)["loss_bits"], 16) for x in open(metrics) if '"loss_bits"' in x]
    with safe_open(dump, framework="numpy") as f:
        dump_bits = f.get_tensor("c/step_losses").view(np.uint32).tolist()
    same = sum(a == b for a, b in zip(run_bits, dump_bits))
    print(f"the dump's {len(dump_bits)} step losses against the training run's {len(run_bits)}: {same} equal bit for bit")
    if same != len(dump_bits) or len(run_bits) != len(dump_bits):
        return "FAIL the dump's trajectory is not the training run's"
    sys.stdout.flush()
    if long_run.main([dump, "--control-bits", "0", "--step-bound", str(LONG_STEP_BOUND)]) != 0:
        return "FAIL long_run.py: a step's loss beyond the bound, see the table"
    shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    return "PASS"


def in_file(path, fn, *args):
    """fn(*args) with this process's standard output and error (file descriptors 1 and 2,
    so that XLA's and the trainer's messages go there too) into path; returns fn's value."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            return fn(*args)
        except Exception:
            traceback.print_exc(file=sys.stdout)
            return "FAIL the worker's exception, above"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def main(argv):
    tmp = argv[1]
    deadline = os.environ.get("PARITY_SECONDS")
    start = float(os.environ.get("PARITY_START", time.time()))
    for line in open(os.path.join(tmp, "cases")).read().splitlines():
        name, *command = line.split("\t")
        try:
            os.mkdir(os.path.join(tmp, name + ".taken"))
        except FileExistsError:
            continue
        t0 = time.time()
        if deadline and t0 - start >= float(deadline):
            result = "LATE"
        else:
            result = in_file(os.path.join(tmp, name + ".out"), run_case, tmp, name, command)
            if result == "PASS":
                result = f"PASS {round(time.time() - t0)}"
        with open(os.path.join(tmp, name + ".result.part"), "w") as f:
            print(result, file=f)
        os.rename(os.path.join(tmp, name + ".result.part"), os.path.join(tmp, name + ".result"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
