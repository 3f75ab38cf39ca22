"""The pods of a rendered Volcano job, run as containers of the manifest's own image (podman or Docker).

tests/cluster/pods.py runs the pods' commands as processes of this machine, from the suite's own
environment. Here each pod is a container of the image the manifest names, started as a kubelet starts a
hostNetwork pod: the image's entrypoint with the manifest's ``args``, ``workingDir``, ``env`` (and nothing of
this machine's environment), its capabilities, and its volumes: the ConfigMap's recipe, the workspace claim,
the token's Secret (read-only, 0400) and the memory-backed /dev/shm, at the manifest's own paths. Both pods
share the machine's network (``hostNetwork: true``) and nothing else: each has its own PID namespace, /tmp
and file system, as two pods on one node do. Deleting a pod sends its first process SIGTERM, then SIGKILL
after the grace period, as the kubelet does.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

import psutil
from pods import Pods, _pod_spec
from test_ray_cluster import wait_until

LABEL = "npu-rl-test-job"


def _memory(quantity: str) -> str:
    """A Kubernetes quantity (64Gi) as the engine's size (64g)."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", quantity)
    assert m, quantity
    return m.group(1) + {"Ki": "k", "Mi": "m", "Gi": "g", "Ti": "t", None: "b"}[m.group(2)]


class ContainerProc:
    """A pod's container as the ``subprocess.Popen`` the harness waits on and signals; its output is copied
    to ``log`` while it runs."""

    def __init__(self, container, log):
        self.container = container
        self._copy = threading.Thread(target=self._follow, args=(log,), daemon=True)
        self._copy.start()
        container.reload()
        self.pid = container.attrs["State"]["Pid"]

    def _follow(self, log) -> None:
        with open(log, "wb") as out:
            for chunk in self.container.logs(stream=True, follow=True):
                out.write(chunk)
                out.flush()

    def poll(self) -> int | None:
        self.container.reload()
        if self.container.status in ("created", "running", "paused"):
            return None
        return self.container.attrs["State"]["ExitCode"]

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.container.name, timeout)
            time.sleep(0.5)
        self._copy.join(timeout=30)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            self.container.kill(signal=int(sig))


class ContainerPods(Pods):
    """One Volcano job's pods as containers; ``client`` is a docker SDK client (npu_rl.image.engine)."""

    def __init__(self, recipe, work, one_host: bool = True, ray_port: int | None = None, *, client):
        super().__init__(recipe, work, one_host=one_host, ray_port=ray_port)
        self.client = client
        self.job_id = work.name

    def _volumes(self, task: str, job: dict, pod: dict, own: dict) -> tuple[dict, str | None]:
        """The pod's volumes as bind mounts ({host path: {bind, mode}}), and the size of its memory /dev/shm."""
        sources = {v["name"]: v for v in _pod_spec(job, task)["volumes"]}
        binds, shm = {}, None
        for m in pod["volumeMounts"]:
            v = sources[m["name"]]
            mode = "ro" if m.get("readOnly") else "rw"
            if "secret" in v:
                binds[str(self.secret)] = {"bind": m["mountPath"], "mode": mode}
            elif "configMap" in v:
                binds[str(self.etc)] = {"bind": m["mountPath"], "mode": mode}
            elif "persistentVolumeClaim" in v:
                binds[str(self.ws)] = {"bind": m["mountPath"], "mode": mode}
            elif v.get("emptyDir", {}).get("medium") == "Memory" and m["mountPath"] == "/dev/shm":
                shm = _memory(v["emptyDir"]["sizeLimit"])
            else:
                raise AssertionError(f"a volume the container pods do not map: {v}")
        for where, what in own.items():
            binds[str(what)] = {"bind": str(where), "mode": "rw"}
        return binds, shm

    def _launch(self, task, job, pod, pod_env, extra_env, own_mounts, log):
        binds, shm = self._volumes(task, job, pod, own_mounts)
        caps = ((pod.get("securityContext") or {}).get("capabilities") or {}).get("add", [])
        container = self.client.containers.run(
            pod["image"],
            command=pod["args"],
            name=f"{self.job_id}-{task}-{self.runs}",
            labels={LABEL: self.job_id},
            detach=True,
            network_mode="host",
            working_dir=pod["workingDir"],
            environment={**pod_env, **self.harness_env(task), **extra_env},
            volumes=binds,
            shm_size=shm,
            cap_add=caps,
        )
        return ContainerProc(container, log)

    def wait_for_step(self, step: int, timeout: float = 400) -> None:
        """Until the run has logged ``step`` to its metrics file (the engine's log stream lags the pod's output
        by seconds, several steps of the vLLM run)."""
        wait_until(
            lambda: step in self.metrics() or self.procs["head"].poll() is not None,
            timeout,
            f"step {step} in the run's metrics",
            poll=0.5,
        )
        assert step in self.metrics(), self.log("head")[-3000:]

    def _containers(self) -> list:
        return self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.job_id}"})

    def tree(self, task: str) -> list[psutil.Process]:
        proc = self.procs.get(task)
        if proc is None or proc.poll() is not None:
            return []
        return super().tree(task)

    def wait(self, timeout: float = 600) -> dict[str, int]:
        """As Pods.wait; the worker pod deleted as the kubelet deletes one (SIGTERM, SIGKILL after the grace
        period)."""
        codes = {"head": self.procs["head"].wait(timeout=timeout)}
        worker = self.procs["worker"]
        if worker.poll() is None:
            grace = _pod_spec(self.job, "worker").get("terminationGracePeriodSeconds", 30)
            worker.container.stop(timeout=grace)
        codes["worker"] = worker.wait(timeout=120)
        return codes

    def left(self) -> list:
        """The job's containers still running (a pod's processes all end with its container)."""
        return [c.name for c in self._containers() if c.status in ("created", "running", "paused")]

    def cleanup(self) -> None:
        for c in self._containers():
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
