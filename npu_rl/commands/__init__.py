"""One module per `npu-rl` job; see npu_rl/cli.py.

A handler imports its job's modules inside itself (``# lazy: the job``): `npu-rl --help`, a bad argument and
the other jobs load none of them, nor what they bring (psutil, rich, jinja2, numpy, pyarrow, and torch, verl,
ray). At module level a command imports only what its parser needs and what the parsers load anyway (the
recipe schema, run_files, data.deepscaler, data.math, the dashboards' constants)."""
