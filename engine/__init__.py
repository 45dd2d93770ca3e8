"""The offline engine: candidates and their improvements without a model.

What the graph's nodes use (the face):

- :func:`.compiler.compiler_seeds` (generator): TorchInductor's kernels for the task, captured in child
  processes (:mod:`.inductor_seed`), with graph rewrites first (:mod:`.reformulate`: convolutions as
  GEMMs, 3xTF32 products, attention onto our kernel) and fallbacks when every variant fails.
- :func:`.transforms.applicable` (planner) and :func:`.transforms.apply` (optimizer): the
  deterministic skills, one per skill card that names a ``transform``.
- :func:`.accumulation.compensated` (diagnoser): the compensated-summation repair.

Inside: the kernel families (:mod:`.flash_attention`; :mod:`.conv`, the implicit-GEMM convolutions of
every rank, forward and transposed, not yet proposed by a skill), the precision rewrites (:mod:`.precision`,
:mod:`.accumulation`) and the launch-configuration sweep (:mod:`.sweep`). The engine imports the
review side (``runner``) but never the reverse: the reviewer stays importable with torch and triton
alone, and judges the engine's candidates like any model's.
"""
