"""Every exit code an npu-rl process ends with, in one table.

The rendered Volcano and KubeRay manifests read it (which codes restart a job and
which abort it), docs/clusters.md's "When a run fails on a cluster" table and the tests
read it; nothing restates a number.
"""

from __future__ import annotations

from enum import IntEnum, unique


@unique  # two names for one code would make a manifest policy ambiguous
class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the training (verl) failed on its own; the log says why
    BAD_INPUT = 2  # bad recipe, flag or file, or a cross-node mismatch: retrying cannot help
    JOIN_TIMEOUT = 3  # worker: the head never became reachable, or Ray never joined it
    HEAD_LOST = 4  # worker: the head went away after this node joined
    CLUSTER_TIMEOUT = 5  # head/wait: nodes or NPUs still missing at the deadline
    RAY_FAILED = 6  # `ray start` failed to come up or died on its own
    HUNG = 7  # train: no step completed within the watchdog's allowance; stacks dumped, run stopped
    NODE_LOST = 8  # train: a node left the cluster (killed, or frozen past Ray's health check) mid-run
    INCONSISTENT = 9  # train: the rollout's token probabilities differ from the trainer's (consistency gate)
    SANDBOX_DOWN = 10  # train: every tool call failed to reach the sandbox for tools.code_interpreter.down_s
    PIPE_CLOSED = 141  # the reader of stdout went away (`npu-rl ... | head`); 128 + SIGPIPE as a shell reports it
    TERMINATED = 143  # SIGTERM (pod deletion, job completion); 128 + 15 as a shell reports it


# What a cluster job does with each code when a pod exits with it. A restart resumes from the newest
# complete checkpoint (npu-rl train --resume auto); a bad configuration fails the same way every time.
RESTART = (
    Exit.HUNG,
    Exit.NODE_LOST,
    Exit.SANDBOX_DOWN,
    Exit.HEAD_LOST,
    Exit.CLUSTER_TIMEOUT,
    Exit.RAY_FAILED,
    Exit.JOIN_TIMEOUT,
)
ABORT = (Exit.BAD_INPUT, Exit.INCONSISTENT)
# The codes an SFT run's pod can exit with besides OK, FAILED and TERMINATED: torchrun's ranks on one node, no
# Ray, no rollout, no sandbox (npu_rl.launcher.sft); its job's policies name only these.
SFT = (Exit.BAD_INPUT, Exit.HUNG)
# Why a restart cannot help, for the manifests' policy comments.
ABORT_WHY = {
    Exit.BAD_INPUT: "a bad recipe, flag or file, or nodes that disagree",
    Exit.INCONSISTENT: "the rollout samples from another policy than the trained one (a broken weight sync)",
}
