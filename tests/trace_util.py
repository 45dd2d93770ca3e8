"""Run a Dynamo graph rewrite through aot_autograd (Inductor's front end) in a child process, without a GPU."""

import os
import subprocess
import sys
import textwrap

_SCRIPT = """
import torch
from torch._dynamo.backends.common import aot_autograd
{prelude}

class Stop(Exception):
    pass

codes = []

def fw(gm, example_inputs):
    codes.append(gm.code)
    raise Stop  # traced: running it would need a GPU

def backend(gm, example_inputs):
    {rewrite}
    return aot_autograd(fw_compiler=fw)(gm, example_inputs)

try:
    with torch.no_grad():
        {run}
except Exception:
    pass
print("CODE", codes[0] if codes else None)
"""


def aot_traced_code(prelude: str, rewrite: str, run: str) -> tuple[str, str]:
    """The forward code aot_autograd traces after ``rewrite`` (a statement on ``gm``), and the child's output.

    ``prelude``: imports and inputs; ``run``: one statement that compiles and calls with ``backend``. The
    child runs without the Triton interpreter, so user-defined kernels are real ``JITFunction`` s.
    """
    script = _SCRIPT.format(prelude=textwrap.dedent(prelude).strip(), rewrite=rewrite, run=run)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    return out.stdout.partition("CODE")[2], out.stdout[-2000:] + out.stderr[-3000:]
