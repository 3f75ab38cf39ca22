"""npu-rl: GRPO training of LLMs on Ascend NPUs (and on CPU for laptops and CI).

Layers, top first: a module imports from its own package and from the packages below its own,
never from one above it, and no two modules or packages import each other. Imports inside
functions keep to the same order; they are there only to keep a heavy or optional dependency
(verl, torch, ray, pyarrow, matplotlib, rich, the recipe schema in every Ray worker's patches) off a
path, each marked ``# lazy:`` with what it keeps off (which path: on the line, or once in its module's
or package's docstring).

    __main__, demo       `python -m npu_rl` and `make demo`
    cli                  the `npu-rl` parser
    commands             one module per job
    launcher             a run: overrides (hydra quoting in hydra.py), the preflight with the job's
                         checks, Ray, verl, the watchdog, prepare, merge
    render, report       compose and Kubernetes files; the training health report
    image                image builds
    envs                 the locked environments (the eval lock reads eval's requirements)
    eval, dashboards     base-vs-trained evaluation; TensorBoard and SwanLab
    patches              verl patches, installed in every Ray process
    reshard              the train->inference reshard
    cluster              Ray nodes, probes, the cross-node preflight
    platform             this host: devices, CANN and driver, npu-smi, the host checks
    model, reward        model weights and tokenizers; the MATH reward
    data                 datasets -> verl parquet
    run_files            where a run's files live (models, data, checkpoints, logs, eval output)
    recipe               the recipe schema and loading
    console              what the terminal shows of long work: progress, events, the raw log's digest
    defaults, versions, paths, errors, exit_codes: the base, which imports nothing above it
"""

__version__ = "0.1.0"
