"""Predicted core cycles of a compiled kernel on a CPU we may not have: llvm-mca's scheduling
model of that CPU run over each innermost loop of the kernel, weighted by how often callgrind saw
the loop iterate. Used by instructions.py --mca.

What it predicts is the cores' side only: llvm-mca assumes every load hits L1, so the figure is a
compute ceiling (KV bytes per core cycle with the data in cache), comparable with the bench's
cache-resident rate (--reuse-blocks=8), not with a DRAM-bound run. Code outside the innermost
loops (a block's softmax, between its tile loops) is modelled the same way, as runs of
instructions that callgrind saw execute equally often, each repeated by llvm-mca as if alone.
"""
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

LLVM_MCA = "/usr/lib/llvm-22/bin/llvm-mca"  # the toolchain's, which knows znver3..5 and emeraldrapids
OBJDUMP = "objdump"

_INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(\S.*)$")
_BRANCH = re.compile(r"^(j[a-z]+)\s+([0-9a-f]+)\s*(<.*>)?$")


@dataclass
class Region:
    """Code llvm-mca models as one repeated block: an innermost loop's body, or a straight run."""
    start: int          # address of the first instruction (a loop's: its branch's target)
    body: list          # [(address, text)]
    iterations: int     # executions of the body, from callgrind
    instructions: int   # callgrind's instructions inside the body (all iterations)


def instruction_counts(callgrind_out: Path, object_path: str) -> dict:
    """Executions per instruction address of one object, from a callgrind file written with
    --dump-instr=yes. Addresses are the object's own (as objdump shows them)."""
    counts, names, in_object, address = {}, {}, False, 0
    skip_next = False
    for line in callgrind_out.read_text().splitlines():
        if line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)\s*(.*)", line)
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                in_object = names.get(m.group(1), "") == object_path
            continue
        if line.startswith("calls="):
            skip_next = True  # the next cost line is the call's inclusive cost, not this object's
            continue
        if not line or not (line[0] in "+-*0" or line[0].isdigit()):
            continue
        fields = line.split()
        position = fields[0]
        if position.startswith("0x"):
            address = int(position, 16)
        elif position[0] in "+-":
            address += int(position)
        if skip_next:
            skip_next = False
            continue
        if in_object and len(fields) >= 3:
            counts[address] = counts.get(address, 0) + int(fields[2])
    return counts


def disassemble(object_path: Path) -> list:
    """[(address, AT&T text)] of every instruction in the object's .text."""
    out = subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", "-M", "suffix", str(object_path)],
                         check=True, capture_output=True, text=True).stdout
    code = []
    for line in out.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            code.append((int(m.group(1), 16), m.group(2).split("#")[0].strip()))
    return code


def innermost_loops(code: list, counts: dict) -> list:
    """Loops closed by a backward branch that contain no other backward branch."""
    index = {address: i for i, (address, _) in enumerate(code)}
    loops = []
    for i, (address, text) in enumerate(code):
        m = _BRANCH.match(text)
        if not m or int(m.group(2), 16) >= address or int(m.group(2), 16) not in index:
            continue
        start = index[int(m.group(2), 16)]
        body = code[start:i + 1]
        nested = any(_is_backward(t, a) for a, t in body[:-1])
        if nested or counts.get(address, 0) == 0:
            continue
        loops.append(Region(start=body[0][0], body=body, iterations=counts[address],
                            instructions=sum(counts.get(a, 0) for a, _ in body)))
    return loops


def straight_runs(code: list, counts: dict, loops: list) -> list:
    """The executed instructions outside the loops, in runs of consecutive instructions that
    executed equally often."""
    inside = {address for loop in loops for address, _ in loop.body}
    runs = []
    for address, text in code:
        n = counts.get(address, 0)
        if n == 0 or address in inside:
            if runs and runs[-1].body:
                runs.append(Region(start=0, body=[], iterations=0, instructions=0))
            continue
        if not runs or (runs[-1].body and runs[-1].iterations != n):
            runs.append(Region(start=0, body=[], iterations=0, instructions=0))
        run = runs[-1]
        if not run.body:
            run.start, run.iterations = address, n
        run.body.append((address, text))
        run.instructions += n
    return [run for run in runs if run.body]


def _is_backward(text: str, address: int) -> bool:
    m = _BRANCH.match(text)
    return bool(m) and int(m.group(2), 16) < address


def cycles_per_iteration(loop: Region, mcpu: str) -> tuple:
    """(cycles per iteration, the resource llvm-mca names as the bottleneck or '')."""
    lines = []
    for address, text in loop.body:
        m = _BRANCH.match(text)
        if m:
            mnemonic = "jmp" if m.group(1) == "jmpq" else m.group(1)  # objdump's suffixed form
            text = f"{mnemonic} .Lloop" if int(m.group(2), 16) == loop.start else \
                f"{mnemonic} .Lout"
        elif text.startswith("call"):
            text = "call .Lout"
        lines.append(text)
    source = ".Lloop:\n" + "\n".join(lines) + "\n.Lout:\n"
    run = subprocess.run([LLVM_MCA, f"-mcpu={mcpu}", "-iterations=200", "-bottleneck-analysis",
                          "-skip-unsupported-instructions=lack-sched"],
                         input=source, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"llvm-mca failed on the loop at {loop.start:#x}:\n{run.stderr[-1500:]}")
    total = int(re.search(r"Total Cycles:\s+(\d+)", run.stdout).group(1))
    iterations = int(re.search(r"Iterations:\s+(\d+)", run.stdout).group(1))
    limit = re.search(r"Limited by (.*)", run.stdout)
    pressure = re.search(r"Cycles with backend pressure increase \[\s*([\d.]+)%", run.stdout)
    return total / iterations, (limit.group(1).strip() if limit else
                                (f"backend pressure {pressure.group(1)}%" if pressure else ""))


def predict(object_path: Path, callgrind_out: Path, mcpus: list) -> dict:
    """{mcpu: (predicted cycles, share of the instructions inside innermost loops)} for the whole
    collected run of the kernel's object."""
    counts = instruction_counts(callgrind_out, str(object_path))
    code = disassemble(object_path)
    loops = innermost_loops(code, counts)
    regions = loops + straight_runs(code, counts, loops)
    total = sum(counts.values())
    in_loops = sum(loop.instructions for loop in loops)
    result = {}
    for mcpu in mcpus:
        cycles = sum(r.iterations * cycles_per_iteration(r, mcpu)[0] for r in regions)
        result[mcpu] = (cycles, in_loops / total if total else 0.0)
    return result
