"""A short real CPU run's TensorBoard and SwanLab pages, served by `npu-rl dashboard` and opened in
headless Chromium: the metrics a user reads are there, through each dashboard's own data API and
on its rendered page, and the health report links to their charts while the dashboards run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from needs import missing_setup

from npu_rl.cluster.probe import free_port
from npu_rl.dashboards import answers, chart_links, running, state_file

from .browser import chromium, executables, open_until

REPO = Path(__file__).resolve().parents[2]
RECIPE = "tiny_math_cpu"
STEPS = 2  # the notebook_run fixture's NOTEBOOK_STEPS (tests/conftest.py)
# The metrics the recipe's guide reads in SwanLab and TensorBoard (the source article's 训练指标).
METRICS = [
    "actor/entropy",
    "actor/kl_loss",
    "actor/pg_loss",
    "critic/score/mean",
    "actor/pg_clipfrac",
    "actor/grad_norm",
    "response_length/mean",
]
ARTIFACTS = Path(os.environ.get("NPU_RL_TEST_ARTIFACTS", REPO / "workspace" / "test-artifacts")) / "dashboards"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _npu_rl(*argv: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "npu_rl", *argv], env=env, capture_output=True, text=True, timeout=600, **kw
    )


@pytest.fixture(scope="module")
def run_dir(notebook_run) -> Path:
    """The notebook's 2-step GRPO run of the CPU recipe, logged to TensorBoard and SwanLab (local) by
    verl's loggers: the dashboards show what a user's run logged."""
    _, ws = notebook_run
    run = ws / "logs" / "npu_rl_demo" / RECIPE
    assert (run / "tensorboard").is_dir() and (run / "swanlab").is_dir()
    return run


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def test_dashboards_show_the_runs_metrics_and_the_report_links_them(run_dir, tmp_path):
    browser, driver = executables()
    if not (browser and driver):
        missing_setup("no chromium/chromedriver", "apt-get install chromium chromium-driver (.ci/apt-packages.txt)")
    ports = {"tensorboard": free_port(), "swanlab": free_port()}
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "npu_rl",
            "dashboard",
            "--run",
            str(run_dir),
            "--tensorboard-port",
            str(ports["tensorboard"]),
            "--swanlab-port",
            str(ports["swanlab"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    states = [state_file(run_dir, k) for k in ("tensorboard", "swanlab")]
    try:
        deadline = time.monotonic() + 120
        while not all(s.exists() for s in states) and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(s.exists() for s in states), serve.stdout.read() if serve.poll() is not None else "no state"
        urls = running(run_dir)
        assert urls["tensorboard"] == f"http://127.0.0.1:{ports['tensorboard']}/"
        assert urls["swanlab"] == f"http://127.0.0.1:{ports['swanlab']}/"

        # TensorBoard's own data API: every metric, and the held-out validation reward.
        tags = set(_get(urls["tensorboard"] + "data/plugin/scalars/tags")["."])
        assert set(METRICS) <= tags, sorted(set(METRICS) - tags)
        assert [t for t in tags if t.startswith("val-core/")], "no val-core reward in TensorBoard"
        points = _get(urls["tensorboard"] + "data/plugin/scalars/scalars?run=.&tag=critic%2Fscore%2Fmean")
        assert [p[1] for p in points] == list(range(1, STEPS + 1))

        # SwanLab's own API: the experiment, its charts and their values.
        project = _get(urls["swanlab"] + "api/v1/project")["data"]
        (experiment,) = project["experiments"]
        assert experiment["name"] == RECIPE
        charts = _get(urls["swanlab"] + f"api/v1/experiment/{experiment['id']}/chart")["data"]["charts"]
        names = {c["name"] for c in charts}
        assert set(METRICS) <= names, sorted(set(METRICS) - names)
        assert [n for n in names if n.startswith("val-core/")], "no val-core reward in SwanLab"

        # The pages as a user opens them, through the links the report gives.
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        tb_link = chart_links(urls, "actor/entropy")["TensorBoard"]
        sw_link = chart_links(urls, "actor/entropy")["SwanLab"]
        assert sw_link == urls["swanlab"] + f"experiment/{experiment['id']}/chart"
        with chromium() as page:
            tb_text = open_until(page, tb_link, ["Tags matching filter", "actor/entropy"], tmp_path / "tensorboard.png")
            sw_text = open_until(
                page, sw_link, [RECIPE, "actor/entropy", "critic/score/mean"], tmp_path / "swanlab.png"
            )
        for png in ("tensorboard.png", "swanlab.png"):
            assert (tmp_path / png).stat().st_size > 20_000, png
            shutil.copy(tmp_path / png, ARTIFACTS / png)
        assert "actor/kl_loss" not in tb_text, "the link's tag filter was not applied"
        assert "actor/entropy" in sw_text

        # The report links each finding's metric to its charts while the dashboards run (a thresholds file
        # that makes the entropy rule fire on this healthy run: the starting value is the median of both
        # steps, so whichever step's entropy is lower falls below it, whether entropy rose or fell).
        th = tmp_path / "thresholds.yaml"
        th.write_text(
            "entropy:\n  warn_below: 100.0\n  critical_below: 50.0\n  fall_fraction: 1.0\n"
            "  min_points: 1\n  baseline_points: 2\n"
        )
        env = {**os.environ}
        linked = _npu_rl(
            "report", "--run", str(run_dir), "--thresholds", str(th), "--out", str(tmp_path / "r1"), env=env
        )
        assert linked.returncode == 2, linked.stderr
        html = (tmp_path / "r1" / "report.html").read_text()
        assert f'href="{tb_link.replace("&", "&amp;")}"' in html and f'href="{sw_link}"' in html
        assert f"[TensorBoard]({tb_link})" in linked.stdout
    finally:
        serve.send_signal(signal.SIGTERM)
        rc = serve.wait(timeout=60)
    # A stop ends both servers and withdraws the state files: reports are self-contained again.
    assert rc == 128 + signal.SIGTERM
    assert not [s for s in states if s.exists()]
    assert not answers(urls["tensorboard"]) and not answers(urls["swanlab"])
    plain = _npu_rl(
        "report", "--run", str(run_dir), "--thresholds", str(th), "--out", str(tmp_path / "r2"), env={**os.environ}
    )
    html = (tmp_path / "r2" / "report.html").read_text()
    assert "127.0.0.1" not in html and "TensorBoard" not in plain.stdout
