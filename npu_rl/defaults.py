"""Defaults that the CLI, the cluster code, the demo and the renderers must agree on, in one place.

A rendered Kubernetes job passes some of them back to `npu-rl ray` as flags, so a
value changed here changes both sides at once.
"""

from __future__ import annotations

# Ray's GCS port on the head (Ray's own default); `NPU_RL_RAY_PORT` overrides it for `npu-rl ray`.
RAY_PORT = 6379
RAY_PORT_ENV = "NPU_RL_RAY_PORT"

# How long the head waits for every node to join, and a worker keeps trying to join: a
# gang-scheduled job's pods can start many minutes apart (image pulls on 16 nodes).
NODES_TIMEOUT_S = 1800
# `npu-rl ray wait` on its own (a quick check that the cluster is complete).
RAY_WAIT_TIMEOUT_S = 600
RAY_START_TIMEOUT_S = 180  # for `ray start` to come up
# How long `npu-rl ray wait` gives ray.init past its own timeout before calling the port not Ray's
# (ray.init would wait for ever on a port that accepts and never speaks). Ray is imported before the
# timeout starts; connecting to a real head took up to a few seconds on loaded cores.
RAY_CONNECT_GRACE_S = 8
HEAD_LOST_AFTER_S = 30  # a worker exits once the head has been unreachable this long
PROBE_INTERVAL_S = 2  # between a worker's probes of the head
MAX_BACKOFF_S = 15  # the longest pause between a worker's join attempts

# `npu-rl render k8s`
K8S_TARGETS = ("volcano", "kuberay")
K8S_TARGET = "volcano"
K8S_QUEUE = "default"  # Volcano queue
K8S_PVC = "npu-rl-workspace"  # ReadWriteMany claim with models, data, checkpoints, logs
K8S_SHM_SIZE = "64Gi"  # memory-backed /dev/shm: Ray's object store and HCCL buffers
K8S_MAX_RETRY = 3  # job restarts on pod failure or eviction

# GRPO steps of `make demo` (npu_rl.demo) and the cpu-demo service: enough for the held-out gain (docs/demo.md).
DEMO_STEPS = 64
# Teacher-forcing steps of the demo's warm start: at 1000 the base model copied one number in eight
# wrong, which capped what GRPO could reach at ~83%; at 2000, one in twenty.
DEMO_WARM_START_STEPS = 1600
