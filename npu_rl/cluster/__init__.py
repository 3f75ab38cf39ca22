"""Multi-node Ray bring-up on Ascend nodes (`npu-rl ray head|worker|wait`).

placement
    role, rank, node count and head host from the launcher's environment
    (Volcano, KubeRay, MindCluster, plain variables).
network
    the interface that routes to the head and the HCCL/Gloo/TensorPipe
    variables pinned to it.
raynode
    one `ray start --block` child with explicit ``NPU`` resources.
membership
    waiting until the expected nodes and NPUs have joined.
supervisor
    the head / worker / wait programs and their exit codes.

ray is imported inside the functions that talk to a running cluster (``# lazy: ray``): `npu-rl ray`'s node
programs start Ray as a child process, and the launcher, the dashboards and the parsers import this package,
without it.
"""
