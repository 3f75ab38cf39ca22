"""Preflight: what must hold before Ray or verl start (one clear line on failure).

The host's checks (verl, torch_npu, CANN, driver, devices, HBM, shm) are npu_rl.platform.doctor's;
a job's own checks (disk, model, data, checkpoints, ports, the rollout's graph capture by
npu_rl.platform.aclgraph) and which of them each job runs are here.
``run_checks`` returns one result per check, the host's first, for `npu-rl doctor`'s table;
``preflight`` is what jobs call before starting Ray: it raises ``UserError`` with the first
failure's one-line fix. ``check_launch`` is a training launch's whole preflight: the model, the
data's columns and rows, the reward file, the table's checks and verl's composed config;
``check_graphs`` the graph check alone, for `npu-rl train --dry-run`.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import run_files, versions
from ..cluster.probe import port_free
from ..errors import UserError
from ..model.fetch import check_model_dir
from ..patches.guard import unsupported
from ..patches.rehearse import sft_layout
from ..paths import sandbox_python
from ..platform import aclgraph
from ..platform.doctor import CheckResult, Context, GiB, Host, fail, gib, ok, run_host_checks
from ..recipe.schema import Recipe
from ..sandbox import client as sandbox_client
from .overrides import reward_function_path
from .verl_config import check_argv

JOBS = ("train", "merge", "eval")

# verl's RLHFDataset reads these; the reward manager needs reward_model.ground_truth.
REQUIRED_DATA_COLUMNS = ("data_source", "reward_model")
# An FSDP checkpoint holds fp32 weights (2x the bf16 files), two Adam moments
# (4x) and an HF copy (1x): about 7x the model's weight files per saved step.
CHECKPOINT_FACTOR = 7
# HCCL opens this many host ports from HCCL_IF_BASE_PORT.
HCCL_PORT_SPAN = 16


# --- the launch: the data's columns and rows, the reward file -------------------------------


def check_data_file(path: Path, prompt_key: str, field: str, required: tuple[str, ...] = REQUIRED_DATA_COLUMNS) -> int:
    """The file's row count, once it is a parquet file with the columns verl reads (``prompt_key`` and
    ``required``)."""
    import pyarrow.parquet as pq  # lazy: pyarrow

    if not path.is_file():
        raise UserError(f"{field}: data file not found: {path} (run `npu-rl prepare`)")
    try:
        schema = pq.read_schema(path)
    except Exception as err:  # pyarrow raises several types for a broken file
        raise UserError(f"{field}: {path} is not a readable parquet file ({err})") from None
    missing = [c for c in (prompt_key, *required) if c not in schema.names]
    if missing:
        how = "`npu-rl prepare`" if required != REQUIRED_DATA_COLUMNS else "`npu-rl data math`"
        raise UserError(f"{field}: {path} lacks column(s) {', '.join(missing)} (convert it with {how})")
    return pq.read_metadata(path).num_rows


def check_data(recipe: Recipe) -> None:
    """verl drops the last incomplete batch, so fewer training rows than a batch is an empty dataloader."""
    d, batch = recipe.data, recipe.algorithm.train_batch_size
    # An SFT recipe's rows are transcripts: verl's SFT dataset reads their messages (the tools are optional).
    key, required = (recipe.sft.messages_key, ()) if recipe.sft is not None else (d.prompt_key, REQUIRED_DATA_COLUMNS)
    for field, files, least, why in (
        ("data.train_files", d.train_files, batch, f"algorithm.train_batch_size is {batch}"),
        ("data.val_files", d.val_files, 1, "validation needs at least one"),
    ):
        rows = sum(check_data_file(run_files.resolve(f), key, field, required) for f in files)
        if rows < least:
            raise UserError(f"{field}: {rows} row(s) in {', '.join(files)}; {why}")
        if field == "data.train_files" and recipe.sft is not None:
            check_sft_steps(recipe, rows)


def sft_steps_per_epoch(recipe: Recipe, rows: int) -> int:
    """The steps an epoch of ``rows`` makes in verl's SFT loader over the recipe's world (0: not one batch), as
    the rehearsal reads them off verl's own objects (npu_rl.patches.rehearse.sft_layout)."""
    sft = recipe.sft
    assert sft is not None
    _, layout = sft_layout(
        rows,
        recipe.resources.world_size,
        sft.ulysses_sequence_parallel_size,
        recipe.algorithm.train_batch_size,
        sft.micro_batch_size_per_device,
        sft.use_dynamic_bsz,
    )
    return int(layout.get("steps_per_epoch", 0))


def sft_total_steps(recipe: Recipe) -> int | None:
    """Where the SFT run will end: ``total_training_steps``, else its epochs over the training files' rows
    (None: the files are not there yet)."""
    a = recipe.algorithm
    if a.total_training_steps is not None:
        return a.total_training_steps
    files = [run_files.resolve(f) for f in recipe.data.train_files]
    if not all(f.is_file() for f in files):
        return None
    import pyarrow.parquet as pq  # lazy: pyarrow

    return sft_steps_per_epoch(recipe, sum(pq.read_metadata(f).num_rows for f in files)) * a.total_epochs


def check_sft_steps(recipe: Recipe, rows: int) -> None:
    """verl's SFT trainer stops after ``total_epochs`` even where ``total_training_steps`` asks for more, and
    then neither validates nor saves its last step (verl v0.9.0 trainer/sft_trainer.py:356, :411-442: both wait
    for a step reaching the total). Its loader drops each rank's incomplete batch (:236-252)."""
    a = recipe.algorithm
    per_epoch = sft_steps_per_epoch(recipe, rows)
    if a.total_training_steps is not None and a.total_training_steps > per_epoch * a.total_epochs:
        need = -(-a.total_training_steps // max(1, per_epoch))
        raise UserError(
            f"algorithm.total_training_steps {a.total_training_steps} is past the {per_epoch * a.total_epochs} steps "
            f"of algorithm.total_epochs {a.total_epochs} ({per_epoch} per epoch over {rows} rows): verl's SFT trainer "
            f"would stop there without saving its last step; set algorithm.total_epochs to {need} or more"
        )


def check_reward(recipe: Recipe) -> None:
    """The reward file exists and defines the function verl will look up (read with ast, not imported)."""
    path = Path(reward_function_path(recipe))
    if not path.is_file():
        raise UserError(f"reward.function: file not found: {path}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"reward.function: {path} is not valid Python ({err})") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    if recipe.reward.name not in names:
        raise UserError(f"reward.name: {path} defines no {recipe.reward.name!r}")


# --- the job's checks, one row each of the doctor's table -----------------------------------


@dataclass
class JobContext(Context):
    """The host checks' context and the ports the job needs free."""

    ports: tuple[int, ...] = ()


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _weights_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for pat in ("*.safetensors", "*.bin") for p in model_dir.glob(pat))


def check_disk(ctx: JobContext) -> CheckResult:
    target = run_files.resolve(ctx.recipe.checkpoint.dir)
    weights = _weights_bytes(run_files.model_dir(ctx.recipe))
    factor = CHECKPOINT_FACTOR if ctx.job == "train" else 2  # merge writes one fp32 HF copy
    need = max(weights * factor, GiB)
    free = ctx.host.disk_usage(_existing_parent(target))[2]
    if free < need:
        return fail(
            "disk",
            f"{gib(free)} free at {target}, a checkpoint needs about {gib(need)}",
            "free space there or point checkpoint.dir at a larger volume",
        )
    return ok("disk", f"{gib(free)} free at {target}")


def check_model(ctx: JobContext) -> CheckResult:
    path = run_files.model_dir(ctx.recipe)
    try:
        check_model_dir(path)
    except UserError as err:
        return fail("model", f"not ready at {path}", str(err))
    return ok("model", str(path))


# The head sizes vLLM 0.9.1's CPU attention takes, with IPEX installed as in the cpu-vllm image
# (vllm/attention/ops/ipex_attn.py:21-22; the TorchSDPA backend refuses others, torch_sdpa.py:441-445).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 192, 256)


def check_rollout_model(ctx: JobContext) -> CheckResult:
    """On CPU with ``rollout.name: vllm``: the model's head size is one vLLM's CPU attention takes."""
    recipe = ctx.recipe
    if recipe.resources.platform != "cpu" or recipe.rollout.name != "vllm":
        return ok("rollout model", recipe.rollout.name)
    config_file = run_files.model_dir(recipe) / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    except (OSError, ValueError, KeyError, ZeroDivisionError):
        return ok("rollout model", "no config.json to read (the model check says why)")
    if head not in VLLM_CPU_HEAD_SIZES:
        return fail(
            "rollout model",
            f"head size {head} of {config_file.parent}: vLLM's CPU attention takes "
            f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))}",
            "use a model with one of those (the tiny model: npu-rl model tiny --heads 2 --kv-heads 2), "
            "or sample with --set rollout.name=hf",
        )
    return ok("rollout model", f"head size {head}")


def check_rollout_graphs(ctx: JobContext) -> CheckResult:
    """The rollout's largest decode batches get a captured ACL graph on the line's vllm-ascend, or the recipe
    runs them eager by choice (npu_rl.platform.aclgraph): a fail is a rollout that would silently decode
    several times slower; a warn, eager or sizes the recipe chose, or the engine's own cap."""
    verdict = aclgraph.check(ctx.recipe)
    return CheckResult(aclgraph.NAME, verdict.status, verdict.detail, verdict.fix)


def check_graphs(recipe: Recipe, warn: Callable[[str], None] | None = None) -> None:
    """:func:`check_rollout_graphs` where no host is checked (`npu-rl train --dry-run`, the rehearsal):
    ``UserError`` on a fail, the warning to ``warn``."""
    result = check_rollout_graphs(JobContext(recipe, "train", Host()))
    if result.status == "fail":
        raise UserError(f"{result.name}: {result.detail}; fix: {result.fix}")
    if result.status == "warn":
        (warn or _warn)(f"{result.name}: {result.detail}" + (f"; fix: {result.fix}" if result.fix else ""))


def check_data_present(ctx: JobContext) -> CheckResult:
    """The job's data files exist (what is in them: :func:`check_data`, at launch)."""
    files = list(ctx.recipe.data.val_files)
    if ctx.job == "train":
        files = list(ctx.recipe.data.train_files) + files
    for f in files:
        path = run_files.resolve(f)
        if not path.is_file():
            return fail("data", f"{path} missing", f"run `npu-rl prepare --recipe {ctx.recipe.name}`")
    return ok("data", f"{len(files)} file(s)")


def check_checkpoints(ctx: JobContext) -> CheckResult:
    steps = run_files.saved_steps(ctx.recipe)
    root = run_files.checkpoint_root(ctx.recipe)
    if not steps:
        damaged = "".join(f"; global_step_{s} is incomplete: {p}" for s, p in run_files.damaged_steps(ctx.recipe))
        return fail(
            "checkpoints", f"none under {root}{damaged}", f"train first: `npu-rl train --recipe {ctx.recipe.name}`"
        )
    return ok("checkpoints", f"steps {', '.join(map(str, steps))}")


def required_ports(ctx: JobContext) -> list[int]:
    ports = list(ctx.ports)
    base = ctx.recipe.env.get("HCCL_IF_BASE_PORT")
    if ctx.npu and ctx.job == "train" and base and base.isdigit():
        ports += range(int(base), int(base) + HCCL_PORT_SPAN)
    return ports


def check_ports(ctx: JobContext) -> CheckResult:
    ports = required_ports(ctx)
    busy = [p for p in ports if not port_free(p)]
    if busy:
        return fail(
            "ports",
            f"port {busy[0]} in use",
            f"stop the process listening on {busy[0]} (ss -ltnp) or change the port in the recipe env",
        )
    return ok("ports", f"{len(ports)} free" if ports else "none needed")


def _progress(message: str) -> None:
    print(f"npu-rl: {message}", file=sys.stderr)


def _sandbox_fix(recipe: Recipe) -> str:
    sb = recipe.sandbox
    if sb.url is not None:
        return (
            f"start the sandbox that serves {sb.url} (Kubernetes: the job's sandbox pods, "
            "`kubectl logs -l npu-rl/role=sandbox` says why one stopped), or set sandbox.url to one that runs"
        )
    return f"start it beside the run: `npu-rl sandbox serve --port {sb.port}` (docs/sandbox.md)"


def check_sandbox(ctx: JobContext) -> CheckResult:
    """The recipe's sandbox answers now (a launch waits for it first: :func:`check_launch`)."""
    sb = ctx.recipe.sandbox  # run only for a recipe with a sandbox (SANDBOX_JOB_CHECKS)
    why = sandbox_client.unanswered(sb.run_code_url)
    if why is not None:
        return fail("sandbox", why, _sandbox_fix(ctx.recipe))
    return ok("sandbox", f"{sb.run_code_url} answers")


def check_sandbox_isolation(ctx: JobContext) -> CheckResult:
    """Where the recipe's sandbox is npu-rl's own on this host: can an execution be isolated here (the probe
    `npu-rl sandbox serve` runs before it serves: user namespaces, an unmasked /proc, seccomp and AppArmor
    letting bwrap unshare, root for the slots' users)."""
    sb = ctx.recipe.sandbox
    if sb.url is not None:
        return ok("sandbox host", "not here")
    from ..sandbox import jail as jails  # lazy: only a recipe with a sandbox on this host probes
    from ..sandbox.probe import DOCTOR_UID, isolation_fault  # lazy: as above
    from ..sandbox.request import Caps  # lazy: as above

    python = sandbox_python()
    if python is None or not Path(python).is_file():
        return fail(
            "sandbox host",
            f"the code's interpreter {python} does not exist" if python else "no interpreter for the code",
            "make sandbox-venv (or set NPU_RL_SANDBOX_PYTHON to the image's python)",
        )
    try:
        fault = isolation_fault(jails.make(python, uid_base=DOCTOR_UID), Caps())
    except (jails.JailUnavailable, OSError) as e:
        fault = str(e)
    if fault is not None:
        return fail("sandbox host", f"no execution can be isolated here: {fault}", "docs/sandbox.md (what it needs)")
    return ok("sandbox host", "an execution isolated (user, PID, net namespaces; seccomp; rlimits)")


def wait_for_sandbox(recipe: Recipe, warn: Callable[[str], None] = _progress) -> None:
    """Wait up to ``sandbox.wait_s`` for the recipe's sandbox (on Kubernetes its pods start beside the job's);
    ``UserError`` naming why it never answered."""
    sb = recipe.sandbox
    if not sb.enabled:
        return
    why = sandbox_client.wait_answered(sb.run_code_url, sb.wait_s, progress=warn)
    if why is not None:
        raise UserError(f"sandbox: {why} after {sb.wait_s:.0f}s; fix: {_sandbox_fix(recipe)}")


JobCheck = Callable[[JobContext], CheckResult]
# Which of its own checks a job runs, after the host's (npu_rl.platform.doctor.HOST_CHECKS).
JOB_CHECKS: dict[str, list[JobCheck]] = {
    "train": [
        check_model,
        check_rollout_model,
        check_rollout_graphs,
        check_data_present,
        check_disk,
        check_ports,
        check_sandbox_isolation,
        check_sandbox,
    ],
    "eval": [check_model, check_data_present],
    "merge": [check_checkpoints, check_disk],
}
# Skipped for platform cpu, where nothing is captured (as npu_rl.platform.doctor.NPU_ONLY for the host's).
NPU_ONLY_JOB_CHECKS = {check_rollout_graphs}
# Only for a recipe whose policy's code runs in a sandbox (recipe.sandbox).
SANDBOX_JOB_CHECKS = {check_sandbox_isolation, check_sandbox}


def run_checks(
    recipe: Recipe,
    for_job: str = "train",
    *,
    host: Host | None = None,
    ports: Iterable[int] = (),
    checked: Collection[JobCheck] = (),
) -> list[CheckResult]:
    """The host's checks and the job's, in that order; ``checked``: job checks the caller has made already."""
    if for_job not in JOB_CHECKS:
        raise ValueError(f"unknown job {for_job!r} (expected one of {', '.join(JOBS)})")
    ctx = JobContext(recipe, for_job, host or Host(), tuple(ports))
    return run_host_checks(ctx) + [
        check(ctx)
        for check in JOB_CHECKS[for_job]
        if check not in checked
        and (ctx.npu or check not in NPU_ONLY_JOB_CHECKS)
        and (recipe.sandbox.enabled or check not in SANDBOX_JOB_CHECKS)
    ]


def _warn(message: str) -> None:
    print(f"npu-rl: warning: {message}", file=sys.stderr)


def preflight(
    recipe: Recipe,
    *,
    for_job: str,
    host: Host | None = None,
    ports: Iterable[int] = (),
    warn: Callable[[str], None] = _warn,
    checked: Collection[JobCheck] = (),
) -> None:
    """Raise ``UserError`` naming the first failed check and its fix; warnings go to ``warn``."""
    for result in run_checks(recipe, for_job, host=host, ports=ports, checked=checked):
        if result.status == "fail":
            raise UserError(f"{result.name}: {result.detail}; fix: {result.fix}")
        if result.status == "warn":
            warn(f"{result.name}: {result.detail}")


def check_patches(names: Iterable[str], recipe: Recipe) -> None:
    """Every patch the launch selects has fingerprints for the verl release of the recipe's stack line:
    one that does not would refuse verl in every process, minutes into the run."""
    release = versions.line_verl(recipe.stack_line)
    missing = unsupported(names, release)
    if missing:
        raise UserError(
            f"patches: {', '.join(missing)} not ported to verl {release} (stack line {recipe.stack_line}); "
            f"fix: run the recipe on a line they support ({', '.join(supported_lines(missing))})"
        )


def supported_lines(names: Iterable[str]) -> list[str]:
    """The stack lines whose verl release every one of ``names`` supports."""
    return [line for line in versions.line_names() if not unsupported(names, versions.line_verl(line))]


def check_launch(spec, recipe: Recipe, ports=(), host: bool = True) -> None:
    """Everything that must hold before Ray starts, checked on the launch that will run.

    ``host=False`` (the rehearsal) leaves out this host's platform checks (NPU driver,
    CANN, torch_npu, devices, ports), which only the machine that trains can pass."""
    check_patches(spec.patches, recipe)
    if recipe.sft is None:  # an SFT run has no rollout and no reward
        check_graphs(recipe)
    check_model_dir(run_files.model_dir(recipe))
    check_data(recipe)
    if recipe.sft is None:
        check_reward(recipe)
    if host:
        # The model and the data files are checked above, the data more closely than the table's row; the
        # rollout's graphs too (a recipe check, made with or without the host's).
        wait_for_sandbox(recipe)
        checked = [check_model, check_data_present, check_rollout_graphs, check_sandbox_isolation, check_sandbox]
        if recipe.sft is not None:
            checked.append(check_rollout_model)  # an SFT run has no rollout
        preflight(recipe, for_job="train", ports=ports, checked=checked)
    check_argv(spec.argv)
