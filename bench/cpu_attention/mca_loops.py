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
        if not _is_backward(text, address) or _target(text) not in index:
            continue
        body = code[index[_target(text)]:i + 1]
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
    runs, run = [], None
    for address, text in code:
        n = 0 if address in inside else counts.get(address, 0)
        if run is not None and n != run.iterations:
            runs.append(run)
            run = None
        if n == 0:
            continue
        if run is None:
            run = Region(start=address, body=[], iterations=n, instructions=0)
        run.body.append((address, text))
        run.instructions += n
    return runs + ([run] if run is not None else [])


def _target(text: str) -> int:
    """The address a direct branch goes to, or -1."""
    m = _BRANCH.match(text)
    return int(m.group(2), 16) if m else -1


def _is_backward(text: str, address: int) -> bool:
    return 0 <= _target(text) < address


def cycles_per_iteration(region: Region, mcpu: str) -> float:
    """llvm-mca's cycles per repetition of the region, simulated over 200 of them."""
    lines = []
    for address, text in region.body:
        m = _BRANCH.match(text)
        if m:
            mnemonic = "jmp" if m.group(1) == "jmpq" else m.group(1)  # objdump's suffixed form
            text = f"{mnemonic} .Lloop" if int(m.group(2), 16) == region.start else \
                f"{mnemonic} .Lout"
        elif text.startswith("call"):
            text = "call .Lout"
        lines.append(text)
    source = ".Lloop:\n" + "\n".join(lines) + "\n.Lout:\n"
    run = subprocess.run([LLVM_MCA, f"-mcpu={mcpu}", "-iterations=200",
                          "-skip-unsupported-instructions=lack-sched"],
                         input=source, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"llvm-mca failed on the code at {region.start:#x}:\n{run.stderr[-1500:]}")
    total = int(re.search(r"Total Cycles:\s+(\d+)", run.stdout).group(1))
    iterations = int(re.search(r"Iterations:\s+(\d+)", run.stdout).group(1))
    return total / iterations


def predict(object_path: Path, callgrind_out: Path, mcpus: list) -> tuple:
    """({mcpu: predicted cycles}, share of the instructions inside innermost loops) for the
    whole collected run of the kernel's object."""
    counts = instruction_counts(callgrind_out, str(object_path))
    code = disassemble(object_path)
    loops = innermost_loops(code, counts)
    regions = loops + straight_runs(code, counts, loops)
    total = sum(counts.values())
    share = sum(loop.instructions for loop in loops) / total if total else 0.0
    return {mcpu: sum(r.iterations * cycles_per_iteration(r, mcpu) for r in regions)
            for mcpu in mcpus}, share
